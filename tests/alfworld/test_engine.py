"""The worker engine against the stock TextWorld/ALFWorld engine, game paths, wire validation."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
import textworld
from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

from env.alfworld.engine import Engine
from env.alfworld.games import resolve_game
from env.alfworld.runtime import DownwardLib, Episode
from env.alfworld.translation import argv_kept, compile_game
from env.wire import WireError


def _stock(path: Path):
    infos = textworld.EnvInfos(won=True, admissible_commands=True)
    with argv_kept():
        env = textworld.start(str(path), infos,
                              wrappers=[AlfredDemangler(shuffle=False), AlfredInfos])
        return env, env.reset()


def one_per_type(games):
    return list({g.task_type: g for g in games}.values())


def test_same_text_as_stock_engine(alfworld_root, alfworld_games):
    """Every observation, command list, `won` and reward equals the stock engine's, with two
    episodes of each game interleaved on the shared lib and some commands that are not
    admissible."""
    lib = DownwardLib()
    for index, game in enumerate(one_per_type(alfworld_games)):
        path = alfworld_root / game.key
        env, state = _stock(path)
        runtime = compile_game(str(path), game.key, game.task_type).runtime(lib)
        ours, other = Episode(runtime, lib), Episode(runtime, lib)
        assert (ours.observation, ours.admissible) == (state.feedback, state.admissible_commands)
        rng = random.Random(index)
        for _ in range(25):
            action = rng.choice(state.admissible_commands) if rng.random() < 0.9 else "dance"
            state, reward, _ = env.step(action)
            ours.step(action)
            other.step(rng.choice(other.admissible))
            assert ours.observation == state.feedback
            assert ours.admissible == state.admissible_commands
            assert ours.won == state.won and ours.reward == reward


@pytest.mark.parametrize("every", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_walkthroughs_win(alfworld_root, alfworld_games, every):
    engine = Engine(cache_games=4)
    try:
        for game in alfworld_games if every else one_per_type(alfworld_games):
            episode = engine.new_episode(resolve_game(alfworld_root, game.key), 60)
            assert episode.observation.startswith("-= Welcome to TextWorld, ALFRED! =-")
            for action in game.walkthrough:
                engine.step(episode, action)
            assert episode.won, game.key
        assert engine.cached_games == 4
    finally:
        engine.shutdown()


def test_translation_keeps_argv(alfworld_root, alfworld_games):
    before = list(sys.argv)
    game = alfworld_games[0]
    compile_game(str(alfworld_root / game.key), game.key, game.task_type)
    assert sys.argv == before


def test_no_cache_still_plays(alfworld_root, alfworld_games):
    engine = Engine(cache_games=0)
    try:
        game = alfworld_games[0]
        for _ in range(2):
            episode = engine.new_episode(resolve_game(alfworld_root, game.key), 60)
            for action in game.walkthrough:
                engine.step(episode, action)
            assert episode.won
        assert engine.cached_games == 0 and engine.translations == 2
    finally:
        engine.shutdown()


@pytest.fixture()
def sandbox(tmp_path) -> Path:
    root = tmp_path / "root"
    (root / "json_2.1.1" / "train" / "t" / "trial").mkdir(parents=True)
    (root / "json_2.1.1" / "train" / "t" / "trial" / "game.tw-pddl").write_text("{}")
    outside = tmp_path / "outside" / "trial"
    outside.mkdir(parents=True)
    (outside / "game.tw-pddl").write_text("{}")
    (root / "escape").symlink_to(outside)
    (root / "json_2.1.1" / "train" / "t" / "trial" / "link.tw-pddl").symlink_to(
        outside / "game.tw-pddl")
    return root.resolve()


def test_game_paths_stay_inside_the_root(sandbox):
    ref = resolve_game(sandbox, "json_2.1.1/train/t/trial")
    assert ref.key == "json_2.1.1/train/t/trial/game.tw-pddl"
    assert resolve_game(sandbox, ref.key).path == ref.path
    outside = sandbox.parent / "outside" / "trial" / "game.tw-pddl"
    bad = ["../outside/trial/game.tw-pddl", "../nowhere/game.tw-pddl", str(outside),
           "/no/such/game.tw-pddl", "escape/game.tw-pddl", "escape",
           "json_2.1.1/train/t/trial/link.tw-pddl", "a\x00b"]
    messages = set()
    for name in bad:
        with pytest.raises(WireError) as err:
            resolve_game(sandbox, name)
        assert err.value.status == 400
        messages.add(err.value.message)
    assert len(messages) == 1  # the same words whether or not the outside path exists
    with pytest.raises(WireError) as err:
        resolve_game(sandbox, "json_2.1.1/train/missing")
    assert err.value.status == 404
