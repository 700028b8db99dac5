"""slime's top-p replay (`--rollout-top-p` < 1) through our hooks, at the pinned commit 624b824a.

slime refuses a sample without a nucleus of `response_length + 1` offsets ending at the number of
kept ids (slime/ray/rollout.py:718-730, replicated condition for condition in `slime_accepts`;
our convert hook replaces that conversion and checks the same), then masks each response row of
the recomputed log-probs to its span (slime/backends/megatron_utils/loss.py:326
`_fill_topp_mask_rows`; an empty span keeps no id, and slime/utils/ppo_utils.py:262-266 forces
the target back in). End to end: the rollout hook against the real ALFWorld and retrieval servers
and the fake SGLang router, which returns a nucleus when asked, as slime's patched SGLang does,
as JSON lists and as base64 int32. Where slime's sources are found (`tests.upstream`), slime's own
decoding (slime/utils/types.py, slime/utils/misc.py) and keep-mask code run on our data.
"""

from __future__ import annotations

import ast
import base64
import inspect
import itertools
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from slime_fixtures import realistic_samples, slime_file
from test_hooks_end_to_end import PromptDataSource, e2e, fake_router  # noqa: F401

from evolving_rl import slime_hooks
from evolving_rl.clients.policy import parse_nucleus
from evolving_rl.config import load_config, to_dict
from evolving_rl.slime_bridge import samples as sample_bridge
from evolving_rl.slime_bridge.settings import SlimeArgsError, check_slime_args
from evolving_rl.slime_bridge.train_data import convert_samples_to_train_data
from tests.fakes.sglang_server import nucleus_meta, top_p_span

TOP_P = 0.9


def slime_accepts(sample: Any) -> None:
    """slime/ray/rollout.py:720-730 at the pin: what every sample must satisfy."""
    assert sample.rollout_top_p_token_ids is not None
    assert sample.rollout_top_p_token_offsets is not None
    assert len(sample.rollout_top_p_token_offsets) == sample.response_length + 1
    offset_end = int(sample.rollout_top_p_token_offsets[-1])
    assert offset_end == len(sample.rollout_top_p_token_ids)


def slime_code(path: str, *names: str) -> dict[str, Any]:
    """The named top-level functions and constants of a slime file at the pin, executed."""
    namespace: dict[str, Any] = {"torch": torch, "Any": Any, "Iterable": Iterable}
    for node in ast.parse(slime_file(path)).body:
        named = getattr(node, "name", None) or next(
            (t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)), None)
        if named in names:
            exec(compile(ast.Module([node], []), path, "exec"), namespace)
    assert set(names) <= set(namespace), f"{path} at the pin lacks some of {names}"
    return namespace


def test_the_replicated_assertions_are_slimes():
    lines = slime_file("slime/ray/rollout.py").splitlines()
    block = [line.strip() for line in lines[717:730]]
    assert block[0] == 'if getattr(self.args, "rollout_top_p", 1.0) != 1.0:'
    ours = inspect.getsource(slime_accepts).splitlines()[2:]
    for statement in (line.strip() for line in ours):
        assert any(line.startswith(statement) for line in block), statement


@pytest.fixture
def replay(e2e):  # noqa: F811 - the fixture imported above
    """The end-to-end setup with both trained roles at top-p 0.9 and --rollout-top-p 0.9."""
    args, rows, fake, _ = e2e
    path = Path(args.evolving_rl_config)
    ours, loaded = yaml.safe_load(path.read_text()), load_config(path).sampling
    ours["sampling"] = {role: {**to_dict(getattr(loaded, role)), "top_p": TOP_P}
                        for role in ("solver", "extractor")}
    path.write_text(yaml.safe_dump(ours))
    args.rollout_top_p = TOP_P
    return args, rows, fake


@pytest.mark.parametrize("nucleus_base64", [False, True], ids=["list", "base64"])
def test_every_slime_sample_carries_the_servers_nucleus(replay, slime_types, nucleus_base64):
    args, rows, fake = replay
    fake.nucleus_base64 = nucleus_base64
    output = slime_hooks.generate_rollout(args, 0, PromptDataSource(slime_types.sample, rows))
    assert fake.requests and all(
        r["sampling_params"]["custom_params"] == {"return_top_p_token_ids": True}
        and r["sampling_params"]["top_p"] == TOP_P for r in fake.requests)
    flat = list(itertools.chain.from_iterable(output.samples))
    roles = {sample.metadata[sample_bridge.TAG_KEY]["role"] for sample in flat}
    assert roles == {"solver", "extractor"}
    observation_tokens = 0
    for sample in flat:
        slime_accepts(sample)
        ids, offsets = sample.rollout_top_p_token_ids, sample.rollout_top_p_token_offsets
        assert offsets[0] == 0 and all(a <= b for a, b in itertools.pairwise(offsets))
        response = sample.tokens[-sample.response_length:]
        for i, (token, mask) in enumerate(zip(response, sample.loss_mask, strict=True)):
            assert tuple(ids[offsets[i]:offsets[i + 1]]) == (top_p_span(token) if mask else ())
            observation_tokens += 1 - mask
    assert observation_tokens > 0  # multi-turn solver samples: observation blocks were checked

    train = slime_hooks.convert_samples_to_train_data(args, flat)
    assert train["rollout_top_p_token_ids"] == [s.rollout_top_p_token_ids for s in flat]
    assert train["rollout_top_p_token_offsets"] == [s.rollout_top_p_token_offsets for s in flat]


def _train_data(slime_types, rollout_top_p: float) -> tuple[list, dict]:
    flat = sample_bridge.flatten(
        sample_bridge.to_slime_groups(realistic_samples(), slime_types.sample))
    return flat, convert_samples_to_train_data(flat, 2, rollout_top_p)


def test_slimes_keep_mask_of_our_train_data_is_each_tokens_span(slime_types):
    fill = slime_code("slime/backends/megatron_utils/loss.py",
                      "_fill_topp_mask_rows")["_fill_topp_mask_rows"]
    _, train = _train_data(slime_types, TOP_P)
    vocab = max(max(ids) for ids in train["rollout_top_p_token_ids"]) + 1
    for ids, offsets, tokens, n in zip(train["rollout_top_p_token_ids"],
                                       train["rollout_top_p_token_offsets"], train["tokens"],
                                       train["response_lengths"], strict=True):
        keep = torch.ones((len(tokens), vocab), dtype=torch.bool)
        start = len(tokens) - n  # cp = 1: logits row of response token r is start - 1 + r
        fill(keep, ids, offsets, 0, start - 1, n, 0, vocab)
        for r in range(n):
            span = ids[offsets[r]:offsets[r + 1]]
            expected = torch.zeros(vocab, dtype=torch.bool)
            expected[span] = True  # an empty span keeps nothing: only the forced-in target
            assert torch.equal(keep[start - 1 + r], expected), (r, span)


def test_without_replay_the_train_data_has_no_top_p_keys(slime_types):
    _, train = _train_data(slime_types, 1.0)
    assert "rollout_top_p_token_ids" not in train
    assert "rollout_top_p_token_offsets" not in train


def test_convert_refuses_samples_slime_would_refuse(slime_types):
    flat, _ = _train_data(slime_types, TOP_P)
    flat[1].rollout_top_p_token_offsets = flat[1].rollout_top_p_token_offsets[:-1]
    with pytest.raises(ValueError, match="offsets length"):
        convert_samples_to_train_data(flat, 2, TOP_P)
    flat[1].rollout_top_p_token_offsets = None
    with pytest.raises(ValueError, match="no top-p nucleus"):
        convert_samples_to_train_data(flat, 2, TOP_P)
    flat[1].rollout_top_p_token_offsets = [0] * flat[1].response_length + [1]
    with pytest.raises(ValueError, match="offsets\\[-1\\]"):
        convert_samples_to_train_data(flat, 2, TOP_P)


@pytest.mark.parametrize("as_base64", [False, True], ids=["list", "base64"])
def test_slime_decodes_the_fake_servers_nucleus_as_our_client_does(monkeypatch, as_base64):
    monkeypatch.setitem(sys.modules, "pybase64", base64)  # slime's decoder imports pybase64
    misc = slime_code("slime/utils/misc.py", "decode_int32_meta_array")
    types_ns = slime_code("slime/utils/types.py", "_TOP_P_TOKEN_ID_META_KEYS",
                          "_TOP_P_TOKEN_OFFSET_META_KEYS", "_extract_rollout_top_p_token_data")
    types_ns["decode_int32_meta_array"] = misc["decode_int32_meta_array"]
    ids = [60, 97, 257, 3]
    meta = nucleus_meta(ids, as_base64)
    token_ids, offsets = types_ns["_extract_rollout_top_p_token_data"](
        meta, expected_num_tokens=len(ids))
    ours = parse_nucleus(meta, len(ids))
    assert (tuple(token_ids.tolist()), tuple(offsets.tolist())) == \
        (ours.token_ids, ours.offsets)


def _config(tmp_path, solver: float, extractor: float):
    path = tmp_path / "top_p.yaml"
    path.write_text(yaml.safe_dump({"environment": "alfworld", "pipeline": {
        "source_tasks_per_rollout": 2}, "sampling": {"solver": {"top_p": solver},
                                                     "extractor": {"top_p": extractor}}}))
    return load_config(path)


def test_rollout_top_p_must_be_the_configs_and_the_roles_must_agree(tmp_path, slime_args):
    slime_args.rollout_top_p = 1.0
    with pytest.raises(SlimeArgsError, match="--rollout-top-p: is 1.0, need 0.9"):
        check_slime_args(slime_args, _config(tmp_path, TOP_P, TOP_P))
    slime_args.rollout_top_p = TOP_P
    with pytest.raises(SlimeArgsError, match="top_p differ"):
        check_slime_args(slime_args, _config(tmp_path, TOP_P, 0.85))


def test_the_rollout_hook_asks_for_the_nucleus_below_top_p_1(slime_args, slime_types,
                                                             fake_pipeline):
    source = PromptDataSource(slime_types.sample, [
        {"prompt": "put a mug in cab 0", "id": "train/t0/trial", "metadata": {"split": "train"}},
        {"prompt": "put a mug in cab 1", "id": "train/t1/trial", "metadata": {"split": "train"}}])
    slime_hooks.generate_rollout(slime_args, 0, source)
    assert fake_pipeline["context"]["top_p_replay"] is True
