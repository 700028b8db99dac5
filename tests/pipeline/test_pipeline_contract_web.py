"""Contract tests for Mind2Web: the pipeline against the real Mind2Web env server (started and
stopped through its launcher), the real retrieval server (MiniLM) and a fake SGLang HTTP server
(`tests/fakes/sglang_server.py`), as `test_pipeline_contract.py` does for ALFWorld.

The data is a tiny generated set (`env.mind2web.generate` + `prepare`). The scripted solver
(`tests/fakes/web.WebSolver`) reads the task and the page snapshot from each step prompt and
answers the gold action of that step (computed from the generated files, never sent by the
server) or a wrong one; extractor
prompts get skills of `tests/fakes/scripted.SKILLS`. Checks token/mask/log-prob alignment, group
ids under both `pipeline.solver_grouping` values, advantages recomputed with the core and role
weights, retrieval never returning the source task, step rewards equal to the server's verdicts,
extractor rewards equal to the mean fraction of correct steps per downstream episode, unreadable
replies counted and judged wrong steps, an env server killed mid-rollout, and the plain GRPO
baseline's skill-free per-step samples grouped by source task and step.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from statistics import fmean

import pytest
import yaml

from env.launch import free_port, read_pid
from env.mind2web.generate import GenerateSpec, generate
from env.mind2web.prepare import prepare
from env.mind2web.server import pid_file
from env.retrieval.launcher import start_retrieval_server, stop_retrieval_server
from evolving_rl.config import Config, load_config
from evolving_rl.core.grid import (
    baseline_group_id,
    extractor_group_id,
    solver_group_id,
    step_group_id,
)
from evolving_rl.core.grpo import group_advantages
from evolving_rl.core.roles import Role
from evolving_rl.core.samples import TrainSample
from evolving_rl.pipeline.rollout import RolloutOutcome
from tests.fakes.contract import run_contract_rollout, with_pipeline
from tests.fakes.scripted import (
    EXTRACTOR_MARKER,
    SKILLS,
    ActsAtCall,
    skill_responder,
    token_log_prob,
)
from tests.fakes.sglang_server import FakeSGLang
from tests.fakes.web import WRONG_AT, GoldPlay, WebSolver, gold_book
from tests.servers import ROOT, mind2web_server, web_contract_config_file

SPEC = GenerateSpec(tasks=12, seed=3, distractors=4, tasks_per_file=12, password="contract")
ROLLOUT_TIMEOUT_S = 60
@dataclass(frozen=True)
class WebWorld:
    config_path: Path
    cfg: Config
    book: dict[str, list[GoldPlay]]
    train_rows: list[dict]


@pytest.fixture(scope="module")
def web_world(tmp_path_factory) -> Iterator[WebWorld]:
    """Generated data, the retrieval cache and server, and the Mind2Web server, for the module."""
    base = tmp_path_factory.mktemp("web_contract")
    root = generate(base / "root", SPEC).root
    prepared_dir = base / "prepared"
    prepare(root, prepared_dir, password=SPEC.password)
    config_path = web_contract_config_file(base, root, prepared_dir)
    cfg = load_config(config_path)
    subprocess.run([sys.executable, "-m", "evolving_rl.retrieval.build", "--config",
                    str(config_path)], check=True, cwd=ROOT, timeout=300,
                   stdout=subprocess.DEVNULL)
    start_retrieval_server(cfg)
    try:
        mind2web_server("start", config_path)
        try:
            rows = [json.loads(line)
                    for line in (prepared_dir / "train.jsonl").read_text().splitlines()]
            yield WebWorld(config_path, cfg, gold_book(root, prepared_dir), rows)
        finally:
            mind2web_server("stop", config_path)
    finally:
        stop_retrieval_server(cfg)


def _run(cfg: Config, responder, rows, policy_wrapper=None):
    return run_contract_rollout(cfg, responder, rows, policy_wrapper, ROLLOUT_TIMEOUT_S)


def _skills(outputs: list[dict], solver: Callable[[str], str]):
    return skill_responder([json.dumps(o) for o in outputs], solver=solver)


def _check_alignment(outcome: RolloutOutcome, fake: FakeSGLang, cfg: Config) -> None:
    assert outcome.samples
    for sample in outcome.samples:
        assert len(sample.loss_mask) == len(sample.log_probs) == sample.response_length > 0
        for token, mask, log_prob in zip(sample.response_ids, sample.loss_mask,
                                         sample.log_probs, strict=True):
            assert log_prob == (token_log_prob(token) if mask else 0.0)
        assert sample.tokens[: len(sample.prompt_ids)] == sample.prompt_ids
    for body in fake.requests:
        assert body["return_logprob"] is True
        max_new = body["sampling_params"]["max_new_tokens"]
        assert len(body["input_ids"]) + max_new <= cfg.pipeline.max_context_tokens


def _check_groups(outcome: RolloutOutcome, cfg: Config, rows: list[dict]) -> None:
    keys = [f"{i}:{row['id']}" for i, row in enumerate(rows)]
    bases = {solver_group_id(k, t) for k in keys for t in range(cfg.pipeline.top_k)}
    if cfg.pipeline.solver_grouping == "step_index":
        bases = {step_group_id(b, s) for b in bases for s in range(cfg.pipeline.max_steps)}
    allowed = {extractor_group_id(k) for k in keys} | bases
    assert {s.group_id for s in outcome.samples} <= allowed
    expected = group_advantages([s.group_id for s in outcome.samples],
                                [s.reward for s in outcome.samples],
                                eps=cfg.rewards.advantage_eps)
    for sample, advantage in zip(outcome.samples, expected.advantages, strict=True):
        weight = (cfg.rewards.extractor_weight if sample.role is Role.EXTRACTOR
                  else cfg.rewards.solver_weight)
        assert abs(sample.advantage - weight * advantage) < 1e-9


def _good_skills(ctx) -> dict[tuple[str, int], bool]:
    """(source id, skill index) -> whether that skill is the good one, from the skill library."""
    good = SKILLS["compact"].good["name"]
    return {(r.source_id, r.skill_index): r.skill["name"] == good for r in ctx.library.load()}


def _solver_samples(outcome: RolloutOutcome) -> list[TrainSample]:
    return [s for s in outcome.samples if s.role is Role.SOLVER]


@pytest.mark.parametrize(("grouping", "fmt"), [("task", "reference"), ("step_index", "compact")])
def test_samples_are_aligned_grouped_weighted_and_judged_by_the_server(web_world, grouping, fmt):
    cfg = with_pipeline(web_world.cfg, solver_grouping=grouping, skill_format=fmt)
    rows = web_world.train_rows[:2]
    solver = WebSolver(web_world.book)
    skills = SKILLS[fmt]
    outcome, fake, ctx = _run(cfg, _skills([skills.good, skills.bad], solver), rows)
    assert solver.misses == []  # every prompt showed the generated page of its step
    metrics = outcome.metrics
    assert metrics["extractor/parse_ok_rate"] == 1.0
    assert not any(k.endswith("/status/env_error") for k in metrics)
    assert metrics.get("solver/action/no_action_tag", 0.0) == 0.0
    _check_alignment(outcome, fake, cfg)
    _check_groups(outcome, cfg, rows)
    # retrieval: never the source task, only train tasks
    assert metrics["retrieval/failed"] == 0.0 and metrics["retrieval/source_retrieved"] == 0.0
    solver_samples = _solver_samples(outcome)
    train_ids = {row["id"] for row in web_world.train_rows}
    assert solver_samples and {s.metadata["task_id"] for s in solver_samples} <= train_ids
    assert all(s.metadata["task_id"] != s.metadata["source_id"] for s in solver_samples)
    # step rewards: the server's verdicts on what the scripted solver sent
    good = _good_skills(ctx)
    questions = {row["id"]: row["question"] for row in web_world.train_rows}
    episodes: dict[tuple, list[int]] = {}
    for sample in solver_samples:
        meta = sample.metadata
        card_is_good = good[(meta["source_id"], meta["skill_index"])]
        right = solver.expected_correct(card_is_good, meta["step_index"])
        assert meta["step_correct"] is right and sample.reward == float(right)
        key = (meta["source_id"], meta["skill_index"], meta["task_id"])
        episodes.setdefault(key, []).append(meta["step_index"])
    for (source, skill, task), steps in episodes.items():
        n_steps = len(web_world.book[questions[task]])
        played = n_steps if good[(source, skill)] else min(WRONG_AT + 1, n_steps)
        assert sorted(steps) == list(range(played))
    # extractor rewards: the mean fraction of correct steps per downstream episode
    extractor = [s for s in outcome.samples if s.role is Role.EXTRACTOR]
    assert len(extractor) == 2 * len(rows)
    for sample in extractor:
        source, skill = sample.metadata["source_id"], sample.metadata["skill_index"]
        tasks = [t for (s, k, t) in episodes if (s, k) == (source, skill)]
        assert len(tasks) == cfg.pipeline.top_k
        assert sample.reward == pytest.approx(fmean(
            solver.expected_score(questions[t], good[(source, skill)]) for t in tasks))


def test_unreadable_reply_is_counted_and_judged_a_wrong_step(web_world):
    cfg = web_world.cfg
    rows = web_world.train_rows[:1]
    skill = SKILLS[cfg.pipeline.skill_format].good
    outcome, _, _ = _run(cfg, _skills([skill], lambda _: "I would click the search button."),
                         rows)
    metrics = outcome.metrics
    episodes = cfg.pipeline.n_skills * cfg.pipeline.top_k
    # a train episode ends at its first wrong step: one unreadable reply per episode
    assert metrics["source/action/no_action_tag"] == 1.0
    assert metrics["solver/action/no_action_tag"] == float(episodes)
    assert not any(k.endswith("/status/env_error") for k in metrics)
    solver_samples = _solver_samples(outcome)
    assert len(solver_samples) == episodes
    assert all(s.reward == 0.0 and s.metadata["step_correct"] is False for s in solver_samples)
    assert all(s.reward == 0.0 for s in outcome.samples if s.role is Role.EXTRACTOR)


def test_env_server_killed_mid_rollout_is_a_status_not_a_hang(web_world, tmp_path):
    data = yaml.safe_load(web_world.config_path.read_text())
    taken = {data["mind2web"]["port"], data["retrieval"]["port"]}
    data["mind2web"].update(port=free_port(exclude=taken), log_dir=str(tmp_path / "logs"))
    config = tmp_path / "dying.yaml"
    config.write_text(yaml.safe_dump(data))
    cfg = load_config(config)
    mind2web_server("start", config)

    def kill() -> None:
        os.kill(read_pid(pid_file(cfg.mind2web)), signal.SIGKILL)

    skills = SKILLS[cfg.pipeline.skill_format]
    try:
        outcome, _, _ = _run(cfg, _skills([skills.good], WebSolver(web_world.book)),
                             web_world.train_rows[:2],
                             policy_wrapper=lambda inner: ActsAtCall(inner, 4, kill))
    finally:
        mind2web_server("stop", config)
    errors = sum(v for k, v in outcome.metrics.items() if k.endswith("/status/env_error"))
    assert errors >= 1
    assert all(s.status.trainable for s in outcome.samples)


def test_grpo_baseline_plays_skill_free_per_step_samples_grouped_by_step(web_world):
    cfg = with_pipeline(web_world.cfg, method="grpo_baseline", solver_grouping="step_index")
    rows = web_world.train_rows[:2]
    solver = WebSolver(web_world.book)
    prompts: list[str] = []
    outcome, fake, ctx = _run(cfg, lambda prompt: prompts.append(prompt) or solver(prompt), rows)
    assert solver.misses == [] and not any(EXTRACTOR_MARKER in p for p in prompts)
    assert ctx.library.load() == []
    _check_alignment(outcome, fake, cfg)
    g = 1 + cfg.pipeline.n_skills * cfg.pipeline.top_k * cfg.pipeline.n_repeats
    assert outcome.metrics["solver/episodes"] == g * len(rows)
    questions = {row["id"]: row["question"] for row in web_world.train_rows}
    for position, row in enumerate(rows):
        members = [s for s in outcome.samples if s.metadata["source_id"] == row["id"]]
        played = min(WRONG_AT + 1, len(web_world.book[questions[row["id"]]]))
        assert len(members) == g * played and all(s.role is Role.SOLVER for s in members)
        for sample in members:
            step = sample.metadata["step_index"]
            assert sample.group_id == step_group_id(baseline_group_id(f"{position}:{row['id']}"),
                                                    step)
            assert sample.reward == float(solver.expected_correct(False, step))
            assert sample.advantage == 0.0  # every episode of a step group played it alike
