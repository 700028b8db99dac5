"""Helpers of the local-backend tests: tiny random Llama / Qwen2, a character tokenizer, samples,
`local_policy` (a `LocalPolicy` whose engine settings are the config's `local:` defaults but
those a test names) and `run_main_job` (the canaries' run of `python -m evolving_rl.local`).

Most tests use a randomly initialised 2-layer Llama (vocabulary of 64) so that they run in
seconds on a busy 2-core machine; only a few load the real SmolLM2.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

from env.launch import free_port
from evolving_rl.config.schema import LocalConfig
from evolving_rl.core.roles import Role
from evolving_rl.core.samples import TrainSample
from evolving_rl.local.engine import LocalPolicy

VOCAB = 64
EOS_ID = 1
PAD_ID = 0


def local_policy(model: torch.nn.Module, tokenizer: Any, *, seed: int = 0,
                 **settings: Any) -> LocalPolicy:
    """`LocalPolicy` over `model` with `LocalConfig()`'s engine settings, `settings` (named as in
    the config) replaced."""
    return LocalPolicy(model, tokenizer, dataclasses.replace(LocalConfig(), **settings), seed=seed)


class CharTokenizer:
    """Token id i decodes to one printable character; ids 0 and 1 are pad and eos."""

    pad_token_id = PAD_ID
    eos_token_id = EOS_ID

    def decode(self, ids, skip_special_tokens: bool = False) -> str:
        return "".join("" if i in (PAD_ID, EOS_ID) else chr(ord("!") + i) for i in ids)


def run_main_job(profile: Path, tmp_path: Path, timeout_s: int = 600) -> list[dict]:
    """The records of `metrics.jsonl` of the main job on `profile`, its servers on free ports and
    every file it writes under `tmp_path`; fails the test on a non-zero exit."""
    port = free_port()
    overrides = {"probe.port": port, "retrieval.port": free_port(exclude=[port]),
                 "probe.prepared_dir": tmp_path / "prepared", "probe.log_dir": tmp_path / "logs",
                 "retrieval.cache_path": tmp_path / "cache.npz",
                 "retrieval.log_dir": tmp_path / "logs", "local.models_dir": tmp_path / "models",
                 "run.output_dir": tmp_path / "run"}
    sets = [arg for key, value in overrides.items() for arg in ("--set", f"{key}={value}")]
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-m", "evolving_rl.local", "--config", str(profile),
                           *sets], cwd=root, capture_output=True, text=True, timeout=timeout_s)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]


def tiny_llama(seed: int = 0, vocab: int = VOCAB) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, pad_token_id=PAD_ID, eos_token_id=EOS_ID,
                         bos_token_id=2, tie_word_embeddings=True)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = EOS_ID
    return model.eval()


def tiny_qwen2(seed: int = 0, tied: bool = True, vocab: int = VOCAB) -> torch.nn.Module:
    """A 2-layer Qwen2 (q/k/v projections with biases), embeddings tied or not. The biases are
    drawn at random: transformers initialises them to zero, which would hide a decode path that
    dropped them."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=vocab, hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, pad_token_id=PAD_ID, eos_token_id=EOS_ID,
                         bos_token_id=2, tie_word_embeddings=tied, rope_theta=1000000.0)
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():
        for layer in model.model.layers:
            attention = layer.self_attn
            for projection in (attention.q_proj, attention.k_proj, attention.v_proj):
                projection.bias.normal_(0.0, 0.5)
    model.generation_config.eos_token_id = EOS_ID
    return model.eval()


ARCHITECTURES = {"llama": tiny_llama, "qwen2_tied": lambda seed=0: tiny_qwen2(seed, True),
                 "qwen2_untied": lambda seed=0: tiny_qwen2(seed, False)}


def make_sample(role: Role, prompt_len: int, response_len: int, advantage: float,
                seed: int, masked_every: int = 0) -> TrainSample:
    """A sample with random tokens; every `masked_every`-th response token has mask 0."""
    gen = torch.Generator().manual_seed(seed)
    prompt = torch.randint(2, VOCAB, (prompt_len,), generator=gen).tolist()
    response = torch.randint(2, VOCAB, (response_len,), generator=gen).tolist()
    mask = [0 if masked_every and j % masked_every == 0 else 1 for j in range(response_len)]
    log_probs = [(-4.0 - 0.1 * (j % 3)) if m else 0.0 for j, m in enumerate(mask)]
    return TrainSample(role=role, prompt_ids=prompt, response_ids=response, loss_mask=mask,
                       log_probs=log_probs, reward=1.0, group_id=f"g{seed}", advantage=advantage)
