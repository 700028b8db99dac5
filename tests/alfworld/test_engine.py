"""The worker engine against the stock TextWorld/ALFWorld engine, game paths, wire validation."""

from __future__ import annotations

import random
import sys
import threading
import time
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


def test_short_deadline_flood_translates_a_game_once(alfworld_root, alfworld_games,
                                                      monkeypatch):
    """Resets whose deadline ends before the translation (408) leave the one job running and
    queue no other; the next reset gets its kept result, even with no translation cache."""
    engine = Engine(cache_games=0)
    submitted = []
    submit = engine._pool.submit
    monkeypatch.setattr(engine._pool, "submit",
                        lambda fn, *args: submitted.append(args) or submit(fn, *args))
    game = resolve_game(alfworld_root, alfworld_games[0].key)
    try:
        timed_out = 0
        for _ in range(20):  # 0.01 s each; starting the translator process alone takes longer
            try:
                engine.new_episode(game, 0.01)
            except WireError as err:
                assert err.status == 408 and "retrying soon will be fast" in err.message
                timed_out += 1
        assert timed_out >= 2
        engine.new_episode(game, 60)
        assert len(submitted) == 1 and engine.translator_jobs == 1
    finally:
        engine.shutdown()


def test_finished_translation_is_kept_for_the_next_reset(alfworld_root, alfworld_games):
    """What a 408 promises: its translation runs on and a reset soon after is fast, even with
    a 10 ms deadline and no translation cache."""
    engine = Engine(cache_games=0)
    game = resolve_game(alfworld_root, alfworld_games[1].key)
    try:
        with pytest.raises(WireError) as err:
            engine.new_episode(game, 0.01)
        assert err.value.status == 408
        deadline = time.monotonic() + 60
        while engine.translations_ready == 0 and time.monotonic() < deadline:
            time.sleep(0.05)  # the translation runs on after the 408
        assert engine.new_episode(game, 0.01).observation
        assert engine.translator_jobs == 1 and engine.translations_ready == 0
        engine.new_episode(game, 60)  # used once: no cache, so the next reset translates again
        assert engine.translator_jobs == 2
    finally:
        engine.shutdown()


def test_short_deadline_resets_of_many_cold_games_leave_no_backlog(alfworld_root,
                                                                   alfworld_games):
    """While one game translates, 10 ms resets of other cold games: the jobs still queued when
    their reset gives up are dropped (the executor holds at most two beyond the running one),
    so the next reset waits for no pile of abandoned translations."""
    engine = Engine(cache_games=4)
    first, *others = (resolve_game(alfworld_root, g.key) for g in alfworld_games[:8])
    waited = threading.Thread(target=engine.new_episode, args=(first, 60))
    try:
        waited.start()
        deadline = time.monotonic() + 60
        while engine.translator_jobs == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        messages = []
        for game in others:  # the first job starts the translator process: seconds, not 10 ms
            with pytest.raises(WireError) as err:
                engine.new_episode(game, 0.01)
            assert err.value.status == 408
            messages.append(err.value.message)
        waited.join(60)
        dropped = [m for m in messages if "dropped" in m and "longer timeout_s" in m]
        assert engine.translations_dropped == len(dropped) >= len(others) - 2
        assert engine.new_episode(others[-1], 60).observation  # dropped or kept, it still loads
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
