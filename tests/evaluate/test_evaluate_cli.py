"""The evaluation's command line and scripts: argument errors, missing data, the OpenAI-compatible
client over real HTTP, and (slow) the README's CPU command on a local-backend checkpoint."""

from __future__ import annotations

import asyncio
import json
import os
import struct
import subprocess
import sys

import pytest
import yaml
from aiohttp import web

from env.launch import free_port, free_port_block
from evolving_rl.clients.openai_compat import OpenAICompletionsClient, completions_body
from evolving_rl.clients.policy import FinishReason, PolicyError, SamplingParams
from evolving_rl.config import parse_config
from evolving_rl.pipeline.eval_records import CaseStore
from tests.fakes.tokenizer import ByteChatTokenizer
from tests.servers import ROOT

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
       "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}  # this tree's code


def _evaluate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "evolving_rl.evaluate", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env=ENV)


@pytest.mark.parametrize(("args", "message"), [
    (["--config", "configs/local_cpu.yaml", "--out", "x"], "one of the arguments"),
    (["--config", "configs/local_cpu.yaml", "--out", "x", "--local", "m",
      "--protocols", "library"], "needs --library"),
    (["--config", "configs/local_cpu.yaml", "--out", "x", "--sglang-url", "http://h"],
     "--tokenizer"),
    (["--config", "configs/local_cpu.yaml", "--out", "x", "--sglang-url", "http://h",
      "--tokenizer", "no_such_dir"], "no tokenizer folder at no_such_dir"),
    (["--config", "nope.yaml", "--out", "x", "--local", "m"], "nope.yaml"),
    (["--config", "configs/local_cpu.yaml", "--out", "x", "--local", "m",
      "--protocols", "oracle"], "invalid choice"),
])
def test_bad_arguments_exit_2_with_a_message(args, message):
    result = _evaluate(*args)
    assert result.returncode == 2 and message in result.stderr
    assert "Traceback" not in result.stderr


def _weightless_model(folder):
    """A complete HF folder as far as the checkpoint check reads: a config, a whole (empty)
    safetensors file."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", 2) + b"{}")


def test_a_checkpoint_cut_short_exits_2_before_anything_starts(tmp_path):
    folder = tmp_path / "checkpoints" / "step_0003"
    _weightless_model(folder)
    (folder / "config.json").write_bytes(b"")  # a save killed at its first file
    result = _evaluate("--config", "configs/local_cpu.yaml", "--out", str(tmp_path / "out"),
                       "--local", str(folder))
    assert result.returncode == 2, result.stderr
    assert f"{folder} is no complete checkpoint (config.json does not parse (0 bytes))" \
        in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()


def test_eval_scripts_refuse_to_serve_a_checkpoint_cut_short(tmp_path):
    folder = tmp_path / "step_0003"
    _weightless_model(folder)
    (folder / "model.safetensors").write_bytes(b"")
    for script in ("scripts/alfworld/eval.sh", "scripts/web/eval.sh"):
        result = subprocess.run(["bash", script, "--hf", str(folder), "--out",
                                 str(tmp_path / "out")], cwd=ROOT, capture_output=True,
                                text=True, timeout=60, env={**ENV, "PYTHON": sys.executable})
        assert result.returncode == 2, result.stderr
        assert result.stderr.splitlines() == [
            f"{folder} is no complete checkpoint: model.safetensors has no readable header "
            "(0 bytes)", f"eval.sh: refusing to serve {folder}"]
        assert not (tmp_path / "out").exists()  # SGLang was never started


def test_missing_data_names_what_to_run(tmp_path):
    config = tmp_path / "web.yaml"
    config.write_text(yaml.safe_dump({"environment": "mind2web", "mind2web": {
        "prepared_dir": str(tmp_path / "prepared")}}))
    _weightless_model(tmp_path / "m")  # the checkpoint is checked first
    result = _evaluate("--config", str(config), "--out", str(tmp_path / "out"),
                       "--local", str(tmp_path / "m"))
    assert result.returncode == 2
    assert "no prepared split 'test_task'" in result.stderr
    assert "bash scripts/web/prepare_data.sh" in result.stderr


@pytest.mark.parametrize("args", [[], ["--local", "a", "--hf", "b"], ["--hf"]])
def test_eval_scripts_refuse_a_missing_or_double_checkpoint(args):
    for script in ("scripts/alfworld/eval.sh", "scripts/web/eval.sh"):
        result = subprocess.run(["bash", script, *args], cwd=ROOT, capture_output=True,
                                text=True, timeout=60)
        assert result.returncode == 2 and result.stderr.startswith("eval.sh: ")


def test_eval_scripts_list_the_saved_iterations_when_the_checkpoint_is_missing(tmp_path):
    saves = tmp_path / "checkpoints"
    for name in ("iter_0000024", "iter_0000149"):
        (saves / name).mkdir(parents=True)
    for script in ("scripts/alfworld/eval.sh", "scripts/web/eval.sh"):
        result = subprocess.run(["bash", script, "--torch-dist", str(saves / "iter_0000150"),
                                 "--hf-base", str(tmp_path)], cwd=ROOT, capture_output=True,
                                text=True, timeout=60)
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith(f"eval.sh: no checkpoint at {saves / 'iter_0000150'}")
        assert "holds: iter_0000024 iter_0000149" in result.stderr


def test_openai_compatible_client_over_http():
    tokenizer = ByteChatTokenizer()
    seen: list[dict] = []

    async def completions(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body)
        if body["prompt"] == [0]:
            return web.json_response({"choices": []})
        return web.json_response({"choices": [{"text": "<action>look</action>",
                                               "finish_reason": "stop"}]})

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/v1/completions", completions)
        runner = web.AppRunner(app)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        cfg = parse_config({}).clients
        client = OpenAICompletionsClient.open(f"http://127.0.0.1:{port}/", "m",
                                              tokenizer.encode_text, cfg)
        sampling = SamplingParams(0.0, 1.0, -1, 64, ("</action>",))
        try:
            generation = await client.generate([1, 2, 3], sampling)
            assert tokenizer.decode(generation.token_ids) == "<action>look</action>"
            assert set(generation.log_probs) == {0.0}
            assert generation.finish_reason is FinishReason.STOP
            with pytest.raises(PolicyError, match="without choices"):
                await client.generate([0], sampling)
        finally:
            await client.close()
            await runner.cleanup()

    asyncio.run(main())
    assert seen[0] == completions_body("m", [1, 2, 3], SamplingParams(
        0.0, 1.0, -1, 64, ("</action>",)))
    assert seen[0]["prompt"] == [1, 2, 3] and seen[0]["include_stop_str_in_output"] is True
    assert "top_k" not in seen[0]


@pytest.mark.slow
def test_readme_cpu_command_evaluates_a_local_checkpoint(alfworld_data, tmp_path):
    """`scripts/alfworld/eval.sh --local <checkpoint>` with the CPU profile: the script starts
    the servers, loads the checkpoint in-process and writes the report; the servers are gone
    after."""
    from evolving_rl.local.model import load_model, load_tokenizer, resolve_model_path
    from evolving_rl.local.trainer import GRPOTrainer

    base = resolve_model_path("smollm2", ROOT / "models")
    cfg = parse_config({})
    trainer = GRPOTrainer(load_model(base), load_model(base, trainable=False), cfg.loss,
                          cfg.local, 0)
    checkpoint = trainer.save(tmp_path / "step_0001", load_tokenizer(base))
    data = yaml.safe_load((ROOT / "configs/local_cpu.yaml").read_text())
    port = free_port_block(3)
    data["alfworld"].update(data_root=str(alfworld_data),
                            prepared_dir=str(alfworld_data / "prepared"), port=port,
                            worker_base_port=port + 1, n_workers=2,
                            log_dir=str(tmp_path / "logs"))
    data["retrieval"].update(port=free_port(exclude=range(port, port + 3)),
                             cache_path=str(tmp_path / "cache.npz"),
                             log_dir=str(tmp_path / "rlogs"))
    config = tmp_path / "local.yaml"
    config.write_text(yaml.safe_dump(data))
    out = tmp_path / "eval"
    result = subprocess.run(
        ["bash", "scripts/alfworld/eval.sh", "--local", str(checkpoint), "--config", str(config),
         "--out", str(out), "--splits", "valid_unseen", "--limit", "2", "--repeats", "1",
         "--protocols", "reference", "no_skill", "--set", "pipeline.max_steps=3"],
        cwd=ROOT, capture_output=True, text=True, timeout=900, env=ENV)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    metrics = report["results"]["valid_unseen"]
    assert metrics["reference"]["eval/cases"] == 2.0 and metrics["no_skill"]["eval/cases"] == 2.0
    assert metrics["reference"]["eval/infra_failures"] == 0.0
    assert (out / "report.md").is_file() and (out / "valid_unseen.png").is_file()
    store = CaseStore(out / "cases.jsonl")
    assert len(store.load()) == 4 and store.stored_key() == report["meta"]["cases_key"]
    assert not any((tmp_path / "logs").glob("*.pid"))
