"""The local inference engine's generations against a recorded snapshot: a refactor of the engine
that changes no behaviour leaves every sampled id, finish reason and log-prob as it was.

A tiny random Llama and Qwen2 (`local_helpers`) decode one batch of prompts of mixed lengths
through each decode backend (dynamic and static, on CPU), with one seed, under greedy decoding,
temperature, top-k and top-p, several at once (rows join and leave the running batch). Log-probs
are rounded to 5 decimals (float32 arithmetic), ids compared exactly.

`UPDATE_ENGINE_SNAPSHOT=1 pytest tests/local/test_engine_snapshot.py` rewrites the snapshot
(`engine_snapshot.json` beside this file); do that only for a change that means to alter it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import torch
from local_helpers import ARCHITECTURES, VOCAB, local_policy

from evolving_rl.clients.policy import SamplingParams

SNAPSHOT = Path(__file__).with_name("engine_snapshot.json")
UPDATE = os.environ.get("UPDATE_ENGINE_SNAPSHOT") == "1"
DECIMALS = 5
LENGTHS = (20, 7, 33, 12, 5, 26)
SAMPLINGS = [  # (temperature, top_k, top_p, max_new_tokens)
    (0.0, -1, 1.0, 16), (1.0, -1, 1.0, 24), (0.7, 5, 1.0, 20), (1.0, -1, 0.8, 12),
    (1.3, 8, 0.9, 28), (1.0, 3, 1.0, 9)]


def _generations(architecture: str, backend: str, tokenizer: Any) -> list[dict[str, Any]]:
    gen = torch.Generator().manual_seed(11)
    prompts = [torch.randint(2, VOCAB, (n,), generator=gen).tolist() for n in LENGTHS]
    samplings = [SamplingParams(temperature=t, top_k=k, top_p=p, max_new_tokens=n)
                 for t, k, p, n in SAMPLINGS]
    policy = local_policy(ARCHITECTURES[architecture](), tokenizer, seed=7, max_batch_generate=4,
                          decode_backend=backend, static_cache_tokens=128)
    return [{"ids": list(g.token_ids), "finish": str(g.finish_reason),
             "log_probs": [round(x, DECIMALS) for x in g.log_probs]}
            for g in policy.generate_batch(prompts, samplings)]


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    return json.loads(SNAPSHOT.read_text()) if SNAPSHOT.is_file() else {}


@pytest.mark.parametrize("backend", ["dynamic", "static"])
@pytest.mark.parametrize("architecture", ["llama", "qwen2_untied"])
def test_generations_match_the_snapshot(architecture, backend, tokenizer, recorded):
    name = f"{architecture}/{backend}"
    got = _generations(architecture, backend, tokenizer)
    if UPDATE:
        recorded[name] = got
        SNAPSHOT.write_text(json.dumps(dict(sorted(recorded.items()))) + "\n")
        return
    assert name in recorded, f"no snapshot of {name}: record it with UPDATE_ENGINE_SNAPSHOT=1"
    for index, (generation, expected) in enumerate(zip(got, recorded[name], strict=True)):
        assert generation["ids"] == expected["ids"], f"row {index}"
        assert generation["finish"] == expected["finish"], f"row {index}"
        torch.testing.assert_close(torch.tensor(generation["log_probs"]),
                                   torch.tensor(expected["log_probs"]), atol=2e-5, rtol=0)
