"""slime's real `RolloutManager` (slime/ray/rollout.py:366) running our hooks for one training
rollout of each environment: `generate` (rollout.py:492-511) calls our rollout function on slime's
own data source over the prepared prompts, checks the rollout-id contract, logs through our logger,
converts through our hook and splits the train data over the data-parallel ranks
(`_split_train_data_by_dp`, rollout.py:757) into Ray object refs.

The args are what slime parses from the train script's exact command line, run for real
(PROMPTS_PER_ROLLOUT=2, the script's own override; the data and config are small local ones). The
pipeline runs against our real env server and retrieval server (MiniLM); SGLang is replaced at
its HTTP boundary only: slime's server start (`start_rollout_servers`, rollout.py:987) is skipped
and the router address points at a fake SGLang speaking the byte tokenizer (tests/fakes), so the
pipeline's tokenizer is that byte tokenizer. slime's data source reads the prompts with an HF
tokenizer from --hf-checkpoint: MiniLM's, beside the Qwen config slime checks.
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
import yaml
from conftest import TRAIN_SCRIPTS, slime_parse, submitted_argv

from env.launch import free_port
from evolving_rl.retrieval.encoder import resolve_model
from tests.fakes.scripted import GOOD_SKILL, reply_text, skill_responder
from tests.fakes.sglang_server import FakeSGLang
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
                  "max_turn_tokens": 128, "source_tasks_per_rollout": PROMPTS,
                  "max_concurrent_episodes": 8, "max_concurrent_extractions": 4}
ALFWORLD_DATA = ROOT / "data/test_alfworld"  # tests/conftest.py generates it once


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


def test_one_training_rollout_through_slimes_rollout_manager(world, ray_session, pins, tmp_path,
                                                              monkeypatch):
    from evolving_rl.pipeline import context as context_module
    from evolving_rl.slime_bridge import runtime

    slime, megatron = pins
    argv = submitted_argv(world.script, tmp_path / "launch", slime, megatron, world.config,
                          world.prepared, {"PROMPTS_PER_ROLLOUT": str(PROMPTS)})
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
    try:
        manager, dp = _manager(args, monkeypatch)
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
