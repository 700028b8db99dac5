"""slime's real `RolloutManager` (slime/ray/rollout.py:366) running our hooks for one training
rollout of each environment: `generate` (rollout.py:492-511) calls our rollout function on slime's
own data source over the prepared prompts, checks the rollout-id contract, logs through our logger,
converts through our hook and splits the train data over the data-parallel ranks
(`_split_train_data_by_dp`, rollout.py:757) into Ray object refs.

The args are what slime parses from the train script's exact command line, run for real
(two source tasks a rollout, the config's pipeline.source_tasks_per_rollout; small local data). The
pipeline runs against our real env server and retrieval server (MiniLM); SGLang is replaced at
its HTTP boundary only: slime's server start (`start_rollout_servers`, rollout.py:987) is skipped
and the router address points at a fake SGLang speaking the byte tokenizer (tests/fakes), so the
pipeline's tokenizer is that byte tokenizer. slime's data source reads the prompts with an HF
tokenizer from --hf-checkpoint: MiniLM's, beside the Qwen config slime checks.

Each environment runs under `pipeline.skill_use: context` and `teacher` (with extractor_reward
`teach`, docs/design.md §4.6). Under the teacher switch the ALFWorld rollout's no-skill students
reach slime with `Sample.teacher_log_probs` equal to what the fake scored with each card, each
data-parallel rank's role channel decodes (our loss's `decode_channel`) into those teachers on the
students' trained tokens and the role codes elsewhere, and our logger logs the teacher/* metrics;
Mind2Web prompts every step afresh, so the pipeline refuses the switch when it is built. slime's
own prefix-cache metrics read the fake's `cached_tokens` / `prompt_tokens`, summed per sample.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import yaml
from conftest import TRAIN_SCRIPTS, slime_parse, submitted_argv

from env.launch import free_port
from evolving_rl.config import ConfigError
from evolving_rl.core.roles import Role
from evolving_rl.retrieval.encoder import resolve_model
from evolving_rl.slime_bridge.loss import decode_channel
from evolving_rl.slime_bridge.samples import SampleTag
from evolving_rl.slime_bridge.train_data import ROLE_CHANNEL_KEY
from tests.fakes.scripted import GOOD_SKILL, reply_text, skill_responder
from tests.fakes.sglang_server import FakeSGLang, input_token_logprobs, prefix_log_prob
from tests.fakes.tokenizer import ByteChatTokenizer
from tests.servers import (
    CLIENTS,
    ROOT,
    alfworld_servers,
    contract_config_file,
    mind2web_server,
    web_contract_config_file,
)

PROMPTS = 2
SMALL_PIPELINE = {"n_skills": 2, "top_k": 2, "n_repeats": 1, "max_steps": 3,
                  "source_tasks_per_rollout": PROMPTS,
                  "max_concurrent_episodes": 8, "max_concurrent_extractions": 4}
ALFWORLD_DATA = ROOT / "data/test_alfworld"  # tests/conftest.py generates it once
TEACHER_METRICS = ("students", "student_wins", "students_scored", "score_calls",
                   "score_failures", "mean_log_ratio")  # pipeline.teacher.teacher_metrics


@dataclass(frozen=True)
class World:
    """One environment's script, config (servers running) and prepared prompts."""

    script: Path
    config: Path
    prepared: Path
    responder: object


def _profile(script: Path, contract: Path, folder: Path) -> Path:
    """The script's own profile on the contract config's servers and data, small sizes."""
    profile = yaml.safe_load((ROOT / "configs" / script.name.replace("train_", "")
                              .replace(".sh", ".yaml")).read_text())
    contract_values = yaml.safe_load(contract.read_text())
    for key in ("alfworld", "mind2web", "retrieval", "run"):
        if key in contract_values:
            profile[key] = contract_values[key]
    profile["clients"] = CLIENTS
    profile["pipeline"] = {**profile["pipeline"], **SMALL_PIPELINE}
    for role in ("solver", "eval_solver"):  # byte tokens of one solver turn
        profile["sampling"][role] = {**profile["sampling"][role], "max_new_tokens": 128}
    path = folder / "profile.yaml"
    path.write_text(yaml.safe_dump(profile))
    return path


def _alfworld(folder: Path) -> tuple[Path, Path, object]:
    if not (ALFWORLD_DATA / "READY").is_file():
        from env.alfworld.generate import generate_dataset
        from env.alfworld.prepare import prepare

        data = folder / "alfworld"
        generate_dataset(data, {"train": 2, "valid_seen": 1, "valid_unseen": 1}, seed=11,
                         workers=2)
        prepare(data, data / "prepared")
    else:
        data = ALFWORLD_DATA
    contract = contract_config_file(folder, data)
    return contract, data / "prepared", skill_responder([json.dumps(GOOD_SKILL)], reply_text)


def _mind2web(folder: Path) -> tuple[Path, Path, object]:
    from env.mind2web.generate import GenerateSpec, generate
    from env.mind2web.prepare import prepare
    from tests.fakes.web import WebSolver, gold_book

    spec = GenerateSpec(tasks=12, seed=3, distractors=4, tasks_per_file=12, password="upstream")
    root = generate(folder / "root", spec).root
    prepared = folder / "prepared"
    prepare(root, prepared, password=spec.password)
    contract = web_contract_config_file(folder, root, prepared)
    solver = WebSolver(gold_book(root, prepared))
    return contract, prepared, skill_responder([json.dumps(GOOD_SKILL)], solver)


@pytest.fixture(scope="module", params=TRAIN_SCRIPTS, ids=lambda p: p.name)
def world(request, tmp_path_factory) -> Iterator[World]:
    """Data, the retrieval cache and server, the env server, for one train script."""
    from env.retrieval.launcher import start_retrieval_server, stop_retrieval_server
    from evolving_rl.config import load_config

    script, folder = request.param, tmp_path_factory.mktemp(request.param.stem)
    contract, prepared, responder = (_alfworld if "alfworld" in script.name
                                     else _mind2web)(folder)
    config = _profile(script, contract, folder)
    cfg = load_config(config)
    env_servers = alfworld_servers if "alfworld" in script.name else mind2web_server
    with pytest.MonkeyPatch.context() as patch:
        # our servers run in the project's environment, without SGLang's overlay
        patch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "src"), str(ROOT)]))
        subprocess.run([sys.executable, "-m", "evolving_rl.retrieval.build", "--config",
                        str(config)], check=True, cwd=ROOT, timeout=300, stdout=subprocess.DEVNULL)
        start_retrieval_server(cfg)
        env_servers("start", config)
    try:
        yield World(script, config, prepared, responder)
    finally:
        env_servers("stop", config)
        stop_retrieval_server(cfg)


@pytest.fixture(scope="module")
def ray_session():
    import ray

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _manager(args, monkeypatch):
    """slime's RolloutManager, constructed for real but for its SGLang server start."""
    from slime.ray import rollout

    monkeypatch.setattr(rollout, "start_rollout_servers", lambda args, pg: ({}, []))
    manager = rollout.RolloutManager.__ray_actor_class__(args, pg=None)
    dp = args.world_size // (args.tensor_model_parallel_size
                             * args.pipeline_model_parallel_size * args.context_parallel_size)
    manager.set_train_parallel_config({"dp_size": dp, "cp_size": args.context_parallel_size,
                                       "vpp_size": 1, "microbatch_group_size_per_vp_stage": 1})
    return manager, dp


def _teacher_config(config: Path, folder: Path) -> Path:
    """The world's config under the teacher switch, the extractor rewarded by what it teaches."""
    values = yaml.safe_load(config.read_text())
    values["pipeline"] |= {"skill_use": "teacher", "extractor_reward": "teach"}
    path = folder / "teacher.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def _scored(requests: list[dict]) -> dict[tuple[int, ...], list[list[float]]]:
    """Per scored response (the ids after the first one scored): the log-probs the fake answered
    each scoring request (max_new_tokens 0) with, its own `input_token_logprobs`."""
    scored: dict[tuple[int, ...], list[list[float]]] = {}
    for body in requests:
        if body["sampling_params"]["max_new_tokens"] == 0:
            ids, start = body["input_ids"], body["logprob_start_len"]
            values = [v for v, _, _ in input_token_logprobs(ids, start, prefix_log_prob)[1:]]
            scored.setdefault(tuple(ids[start + 1:]), []).append(values)
    return scored


def _check_students(samples: list, scored: dict[tuple[int, ...], list[list[float]]]) -> None:
    """Every student's slime `Sample.teacher_log_probs` (slime/utils/types.py:128) has one value
    per response token: on its trained tokens the mean of what the fake scored for its response
    with each card, 0.0 elsewhere (`pipeline.teacher.attach_teacher`). Students with the same
    response share its requests: every card is GOOD_SKILL's, so they score alike."""
    students = [s for s in samples if s.teacher_log_probs is not None]
    assert students
    for sample in students:
        assert SampleTag.of(sample).role is Role.SOLVER
        response = tuple(sample.tokens[-sample.response_length:])
        assert len(sample.teacher_log_probs) == sample.response_length
        assert response in scored, "a student's teacher without a scoring request"
        runs = scored[response]
        mean = [sum(values) / len(runs) for values in zip(*runs, strict=True)]
        for value, expected, trained in zip(sample.teacher_log_probs, mean, sample.loss_mask,
                                            strict=True):
            assert value == pytest.approx(expected if trained else 0.0, abs=1e-9)


def _check_channel(samples: list, ranks: list[dict]) -> None:
    """Each data-parallel rank's role channel, tensorised as slime's actor does
    (slime/backends/megatron_utils/actor.py:284-299, float32) and decoded by our loss's
    `decode_channel`: a student's trained token carries its teacher log-prob, every other token
    its role (extractor or solver) and no teacher."""
    for rank in ranks:
        channel = decode_channel({ROLE_CHANNEL_KEY: [torch.as_tensor(v, dtype=torch.float32)
                                                     for v in rank[ROLE_CHANNEL_KEY]]},
                                 torch.device("cpu"))
        expected_student, expected_extractor, expected_teacher = [], [], []
        for index, mask in zip(rank["partition"], rank["loss_masks"], strict=True):
            sample = samples[index]
            teacher = sample.teacher_log_probs or [0.0] * sample.response_length
            student = [float(sample.teacher_log_probs is not None and m == 1) for m in mask]
            expected_student += student
            expected_teacher += [v * s for v, s in zip(teacher, student, strict=True)]
            expected_extractor += [float(SampleTag.of(sample).role is Role.EXTRACTOR)] * len(mask)
        assert channel.student.tolist() == expected_student
        assert channel.extractor.tolist() == expected_extractor
        assert channel.teacher.tolist() == pytest.approx(expected_teacher, abs=1e-6)


@pytest.mark.parametrize("skill_use", ["context", "teacher"])
def test_one_training_rollout_through_slimes_rollout_manager(world, skill_use, ray_session, pins,
                                                              tmp_path, monkeypatch):
    """Under `teacher` (and extractor_reward `teach`) the ALFWorld rollout's students reach slime
    with their teacher log-probs, through the split to the loss's decoding, and our logger logs
    the teacher metrics; Mind2Web refuses the switch when the pipeline is built."""
    from evolving_rl import slime_hooks
    from evolving_rl.pipeline import context as context_module
    from evolving_rl.slime_bridge import runtime

    slime, megatron = pins
    config = world.config if skill_use == "context" else _teacher_config(world.config, tmp_path)
    argv = submitted_argv(world.script, tmp_path / "launch", slime, megatron, config,
                          world.prepared)
    model = Path(argv[argv.index("--hf-checkpoint") + 1])
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt",
                 "special_tokens_map.json"):  # for slime's data source only
        shutil.copy(resolve_model("minilm").path / name, model / name)
    args = slime_parse(argv)[0]
    loop = runtime.LoopThread()
    fake = FakeSGLang(responder=world.responder)
    port = free_port()
    loop.run(fake.start(port))
    args.sglang_router_ip, args.sglang_router_port = "127.0.0.1", port  # rollout.py:916 sets them
    monkeypatch.setattr(context_module.HFChatTokenizer, "from_pretrained",
                        staticmethod(lambda path: ByteChatTokenizer()))
    monkeypatch.setattr(runtime, "RUNTIMES", {})
    logged_samples, logged_metrics = [], []
    metrics_of = slime_hooks.rollout_metrics

    def recording_rollout_metrics(samples, pipeline_metrics, rollout_time):
        logged_samples.extend(samples)
        return metrics_of(samples, pipeline_metrics, rollout_time)

    # our logger (slime caches it: slime/utils/misc.py:38) sees the samples and emits the metrics
    monkeypatch.setattr(slime_hooks, "rollout_metrics", recording_rollout_metrics)
    monkeypatch.setattr(slime_hooks, "_emit",
                        lambda args, metrics, rollout_id, step_key: logged_metrics.append(metrics))
    refused = skill_use == "teacher" and "web" in world.script.name
    try:
        manager, dp = _manager(args, monkeypatch)
        if refused:
            with pytest.raises(ConfigError, match="teacher needs an environment with a dialogue"):
                manager.generate(0)
            return
        boxes = manager.generate(0)
    finally:
        for state in runtime.RUNTIMES.values():
            state.loop.run(state.context.close())
        loop.run(fake.stop())
    assert fake.requests
    ranks = [ray_session.get(box.inner) for box in boxes]
    assert len(ranks) == dp == 4
    placed = sorted(i for rank in ranks for i in rank["partition"])
    n_samples = len(placed)
    assert placed == list(range(n_samples)) and n_samples > 2 * PROMPTS  # every sample, once
    assert all(rank["global_batch_sizes"] == [PROMPTS] for rank in ranks)  # one optimiser step
    for rank in ranks:
        assert len(rank["tokens"]) == len(rank["partition"]) == len(rank["teacher_log_probs"])
    assert len(logged_samples) == n_samples and len(logged_metrics) == 1
    _check_channel(logged_samples, ranks)
    _check_prefix_cache(logged_samples, logged_metrics[0], fake.answers)
    if skill_use == "teacher":
        scored = _scored(fake.requests)
        _check_students(logged_samples, scored)
        metrics = logged_metrics[0]
        assert {f"rollout/pipeline/teacher/{key}" for key in TEACHER_METRICS} <= set(metrics)
        assert metrics["rollout/pipeline/teacher/students_scored"] > 0
        assert metrics["rollout/pipeline/teacher/score_failures"] == 0
        assert metrics["rollout/pipeline/teacher/score_calls"] == sum(map(len, scored.values()))
    else:
        assert all(s.teacher_log_probs is None for s in logged_samples)


def _check_prefix_cache(samples: list, metrics: dict, answers: list[dict]) -> None:
    """slime's own prefix-cache metrics (slime/observability/rollout_metrics.py:202-209) read the
    counts the fake SGLang answered, summed per sample: no more than it answered, hits > 0."""
    prompt = sum(s.prefix_cache_info.total_prompt_tokens for s in samples)
    cached = sum(s.prefix_cache_info.cached_tokens for s in samples)
    assert 0 < cached <= prompt <= sum(answer["prompt_tokens"] for answer in answers)
    assert metrics["rollout/prefix_cache_hit_rate"] == pytest.approx(cached / prompt)
    assert metrics["rollout/avg_cached_tokens_per_sample"] == pytest.approx(cached / len(samples))
