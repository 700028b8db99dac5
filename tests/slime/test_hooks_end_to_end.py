"""Our slime hooks end to end: the rollout function called exactly as slime calls it, against the
real ALFWorld router + workers, the real retrieval server and a fake SGLang router over HTTP
(at `args.sglang_router_ip/port`), then the convert hook and the custom loss on its output.

Only the tokenizer is a stand-in (the byte-level chat tokenizer the fake SGLang server speaks);
loading a real HF tokenizer from `args.hf_checkpoint` is covered in tests/clients.
"""

from __future__ import annotations

import itertools
import json
from argparse import Namespace
from pathlib import Path

import pytest
import torch
import yaml
from slime_fixtures import (
    TEST_LOSS,
    given_log_probs_and_entropy,
    slime_batch,
    sum_of_token_reducer,
)

from env.launch import free_port
from evolving_rl import slime_hooks
from evolving_rl.core.grid import extractor_group_id
from evolving_rl.pipeline import context as context_module
from evolving_rl.slime_bridge import runtime, slime_api
from evolving_rl.slime_bridge.samples import TAG_KEY
from evolving_rl.slime_bridge.train_data import ROLE_CHANNEL_KEY, ROLE_CODES
from tests.fakes.scripted import GOOD_SKILL, reply_text, skill_responder, token_log_prob
from tests.fakes.sglang_server import FakeSGLang
from tests.fakes.tokenizer import ByteChatTokenizer

N_SOURCE = 2


def _source_rows(config: dict) -> list[dict]:
    """The first train task of each of the first two task types."""
    rows, seen = [], set()
    lines = (Path(config["alfworld"]["prepared_dir"]) / "train.jsonl").read_text().splitlines()
    for row in map(json.loads, lines):
        if row["metadata"]["task_type"] not in seen:
            seen.add(row["metadata"]["task_type"])
            rows.append(row)
    return rows[:N_SOURCE]


class PromptDataSource:
    """slime's data-source view of our prompt JSONL (`--input-key prompt --label-key id`)."""

    def __init__(self, sample_cls: type, rows: list[dict]) -> None:
        self.sample_cls, self.rows = sample_cls, rows

    def get_samples(self, num_samples: int) -> list[list]:
        return [[self.sample_cls(group_index=i, index=i, prompt=row["prompt"], label=row["id"],
                                 metadata=dict(row["metadata"]))]
                for i, row in enumerate(self.rows[:num_samples])]


@pytest.fixture
def fake_router():
    """A fake SGLang router on its own event-loop thread, as slime's router would be."""
    loop = runtime.LoopThread()
    fake = FakeSGLang(responder=skill_responder([json.dumps(GOOD_SKILL)], reply_text))
    url = loop.run(fake.start(free_port()))
    yield fake, int(url.rsplit(":", 1)[1])
    loop.run(fake.stop())


@pytest.fixture
def e2e(real_servers, tmp_path, slime_args, fake_router, monkeypatch):
    """slime args pointing at the real servers (our config) and the fake SGLang router."""
    ours = yaml.safe_load(Path(real_servers).read_text())
    ours["loss"] = TEST_LOSS
    ours["pipeline"]["source_tasks_per_rollout"] = N_SOURCE
    ours["run"] = {"output_dir": str(tmp_path / "run")}
    ours_path = tmp_path / "evolving_rl.yaml"
    ours_path.write_text(yaml.safe_dump(ours))
    custom = tmp_path / "custom.yaml"
    custom.write_text(yaml.safe_dump({"evolving_rl_config": str(ours_path)}))
    fake, port = fake_router
    args = Namespace(**{**vars(slime_args), "custom_config_path": str(custom),
                        "evolving_rl_config": str(ours_path), "sglang_router_port": port,
                        "rollout_batch_size": N_SOURCE, "global_batch_size": 2})
    loaded = []
    monkeypatch.setattr(context_module.HFChatTokenizer, "from_pretrained",
                        staticmethod(lambda path: loaded.append(path) or ByteChatTokenizer()))
    monkeypatch.setattr(runtime, "RUNTIMES", {})
    yield args, _source_rows(ours), fake, loaded
    for state in runtime.RUNTIMES.values():
        state.loop.run(state.context.close())


def test_rollout_convert_and_loss_through_slime_entry_points(e2e, slime_types, monkeypatch):
    args, rows, fake, loaded = e2e
    source = PromptDataSource(slime_types.sample, rows)
    output = slime_hooks.generate_rollout(args, 0, source, evaluation=False)
    assert isinstance(output, slime_types.train_output)
    assert loaded == [args.hf_checkpoint] and fake.requests
    flat = list(itertools.chain.from_iterable(output.samples))
    tags = [sample.metadata[TAG_KEY] for sample in flat]
    assert {tag["role"] for tag in tags} == {"solver", "extractor"}
    extractor_groups = {extractor_group_id(f"{i}:{row['id']}") for i, row in enumerate(rows)}
    assert {t["group_id"] for t in tags if t["role"] == "extractor"} == extractor_groups
    for sample, tag in zip(flat, tags, strict=True):
        assert sample.response_length > 0
        assert len(sample.loss_mask) == len(sample.rollout_log_probs) == sample.response_length
        response = sample.tokens[-sample.response_length:]
        for token, mask, log_prob in zip(response, sample.loss_mask, sample.rollout_log_probs,
                                         strict=True):
            assert log_prob == (token_log_prob(token) if mask else 0.0)
        if tag["role"] == "solver":
            assert sample.metadata["task_id"] != sample.metadata["source_id"]

    train = slime_hooks.convert_samples_to_train_data(args, flat)
    assert train["rewards"] == [tag["advantage"] for tag in tags]
    for codes, tag in zip(train[ROLE_CHANNEL_KEY], tags, strict=True):
        assert set(codes) == {ROLE_CODES[next(r for r in ROLE_CODES if r.value == tag["role"])]}

    policy = [torch.tensor(lp, dtype=torch.float32, requires_grad=True)
              for lp in train["rollout_log_probs"]]
    entropies = [torch.zeros(len(lp), requires_grad=True) for lp in policy]
    batch = slime_batch(train, policy, [lp.detach() - 0.1 for lp in policy])
    monkeypatch.setattr(slime_api, "log_probs_and_entropy",
                        given_log_probs_and_entropy(policy, entropies))
    logits = torch.zeros(1, sum(batch["total_lengths"]), 8)
    loss, _ = slime_hooks.policy_loss(args, batch, logits, sum_of_token_reducer(batch))
    loss.backward()
    assert torch.isfinite(loss)
    for log_prob, mask in zip(policy, train["loss_masks"], strict=True):
        masked_out = torch.tensor(mask) == 0
        assert log_prob.grad[masked_out].abs().sum().item() == 0.0  # observations: no gradient
    for entropy, mask, tag in zip(entropies, train["loss_masks"], tags, strict=True):
        expected = -TEST_LOSS["entropy_coef"][tag["role"]] * torch.tensor(mask).float()
        assert torch.allclose(entropy.grad, expected, atol=1e-6)  # slime keeps it differentiable
