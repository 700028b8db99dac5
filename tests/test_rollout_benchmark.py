"""benchmarks/rollout_sglang_vs_engine.py on the CPU: both halves' code without a GPU.

- The engine half for real (no mocks), as a subprocess the way its docstring runs it: a randomly
  initialised 2-layer Qwen2 (a config folder, as tests/local's tiny models), `--backends engine`
  and `--out`: episodes x turns x new tokens generated every round, each turn's prompt longer by
  reply + observation, the prefix cache used, the printed lines and the JSON result.
- The SGLang half's launch, requests and stop, against a stand-in `sglang.launch_server` module
  (put first on PYTHONPATH) that accepts exactly the flags the benchmark passes, answers
  `/health` and `/generate` in SGLang's native format (`ignore_eos` required, a radix cache's
  `cached_tokens`) and records its PID: the half's result and that its process group is gone;
  a stand-in that exits at start is reported with the end of its log.
- Asking for the SGLang half without a GPU (or with random weights) exits 2 with the reason.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import rollout_sglang_vs_engine as bench

ROOT = Path(__file__).resolve().parents[1]
TINY_QWEN2 = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": 32,
              "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 512,
              "tie_word_embeddings": True, "rope_theta": 1000000.0, "bos_token_id": 2,
              "eos_token_id": 1, "pad_token_id": 0}
EPISODES, TURNS, NEW, PROMPT, OBSERVATION = 3, 4, 4, 24, 6  # --tiny, episodes and turns given
EXPECTED = EPISODES * TURNS * NEW
STUB = '''"""Stand-in for `python -m sglang.launch_server` (tests/test_rollout_benchmark.py)."""
import argparse, os
from aiohttp import web

parser = argparse.ArgumentParser()
for flag in ("--model-path", "--host", "--port", "--tp-size", "--dtype",
             "--mem-fraction-static", "--random-seed"):
    parser.add_argument(flag, required=True)
args = parser.parse_args()
open(os.environ["STUB_PID_FILE"], "w").write(str(os.getpid()))
seen = []


async def health(request):
    return web.Response()


async def generate(request):
    body = await request.json()
    params, prompt = body["sampling_params"], body["input_ids"]
    if params.get("ignore_eos") is not True or not body.get("return_logprob"):
        return web.json_response({"error": "ignore_eos and return_logprob expected"}, status=400)
    ids = [7 + len(prompt) % 5] * params["max_new_tokens"]
    cached = max((len(os.path.commonprefix([prompt, s])) for s in seen), default=0)
    seen.append(prompt + ids)
    return web.json_response({"text": "", "meta_info": {
        "id": body["rid"], "prompt_tokens": len(prompt), "cached_tokens": cached,
        "finish_reason": {"type": "length", "length": len(ids)},
        "output_token_logprobs": [[-1.0, i, None] for i in ids]}})


app = web.Application()
app.router.add_get("/health", health)
app.router.add_post("/generate", generate)
web.run_app(app, host=args.host, port=int(args.port), print=None)
'''


def _prompt_lengths() -> list[int]:
    return [PROMPT + t * (NEW + OBSERVATION) for t in range(TURNS)]


@pytest.fixture
def tiny_model(tmp_path: Path) -> Path:
    folder = tmp_path / "tiny-qwen2"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_QWEN2))
    return folder


def test_the_engine_half_plays_the_workload_and_writes_its_result(tiny_model, tmp_path):
    out = tmp_path / "result.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.rollout_sglang_vs_engine", "--tiny", "--backends",
         "engine", "--random-init", str(tiny_model), "--episodes", str(EPISODES), "--turns",
         str(TURNS), "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=270,
        env={**os.environ, "PYTHONPATH": "."})
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
    assert re.search(rf"round 1 engine: {EXPECTED} generated tokens \(expected {EXPECTED}\) "
                     r"in \d+\.\d\ds = \d+\.\d tok/s", done.stdout), done.stdout
    assert re.search(rf"SUMMARY cpu float32 .*{EPISODES} episodes x {TURNS} turns x {NEW} new "
                     r"tokens .* engine \d+\.\d tok/s", done.stdout), done.stdout
    result = json.loads(out.read_text())
    assert result["workload"]["expected_tokens_per_round"] == EXPECTED
    assert result["random_weights"] is True and result["ratio_sglang_over_engine"] is None
    assert list(result["backends"]) == ["engine"]
    engine = result["backends"]["engine"]
    assert engine["generated_tokens"] == [EXPECTED]
    assert engine["prompt_tokens_by_turn"] == _prompt_lengths()  # the prefix grows each turn
    assert len(engine["wall_s"]) == 1 and engine["tokens_per_s"] == pytest.approx(
        EXPECTED / engine["wall_s"][0])
    # turns 2.. reuse their episode's stored prefix: at least the last prompt's, per turn
    assert engine["cached_prompt_tokens"][0] >= EPISODES * sum(_prompt_lengths()[:-1])
    assert engine["settings"]["decoder"] == "dynamic"
    assert engine["settings"]["prefix_entries"] >= EPISODES


def _stub_sglang(tmp_path: Path, monkeypatch, source: str):
    """`python -m sglang.launch_server` runs `source`; (args, workloads) of a tiny SGLang half."""
    stub = tmp_path / "stub" / "sglang"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("")
    (stub / "launch_server.py").write_text(source)
    monkeypatch.setenv("PYTHONPATH", str(stub.parent))
    args = bench.parse_args(["--tiny", "--backends", "sglang", "--model", str(tmp_path),
                             "--episodes", str(EPISODES), "--turns", str(TURNS),
                             "--sglang-log", str(tmp_path / "sglang.log"),
                             "--sglang-start-timeout", "120"])
    return args, [bench.build_workload(args, None, 256, rnd) for rnd in range(args.rounds + 1)]


def test_the_sglang_half_launches_the_server_plays_and_stops_it(tmp_path, monkeypatch):
    pid_file = tmp_path / "stub.pid"
    monkeypatch.setenv("STUB_PID_FILE", str(pid_file))
    args, workloads = _stub_sglang(tmp_path, monkeypatch, STUB)
    result = bench.sglang_half(args, workloads)
    assert result.generated_tokens == [EXPECTED]
    assert result.prompt_tokens_by_turn == _prompt_lengths()
    # every later turn's prompt extends the last prompt + its reply, which the cache holds
    assert result.cached_prompt_tokens == [EPISODES * sum(n + NEW for n in _prompt_lengths()[:-1])]
    command = result.settings["command"]
    assert command[1:3] == ["-m", "sglang.launch_server"] and "--mem-fraction-static" in command
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)  # stopped with its process group


def test_a_server_that_does_not_start_is_reported_with_its_log(tmp_path, monkeypatch):
    args, workloads = _stub_sglang(
        tmp_path, monkeypatch, "import sys\nprint('CUDA out of memory')\nsys.exit(1)\n")
    results, failed = bench.run_halves(args, workloads)
    assert results == {} and list(failed) == ["sglang"]
    assert "exited with code 1" in failed["sglang"] and "CUDA out of memory" in failed["sglang"]


@pytest.mark.parametrize(("extra", "reason"), [
    ((), "the SGLang half needs a CUDA GPU"),
    (("--random-init", "qwen2.5-0.5b"), "the SGLang half needs real weights")])
def test_asking_for_sglang_without_what_it_needs_exits_2(extra, reason, capsys):
    code = bench.main(["--tiny", "--device", "cpu", "--backends", "engine,sglang", *extra])
    assert code == 2
    assert reason in capsys.readouterr().err
