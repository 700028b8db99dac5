"""The decode-path layouts: `GrowingCache` gives the logits `DynamicCache` gives (across chunk
reallocations and row selection) and `TransposedWeightLinear` equals `nn.Linear`, follows in-place
weight updates and leaves training untouched."""

from __future__ import annotations

import inspect

import torch
from local_helpers import VOCAB, tiny_llama
from torch import nn
from transformers import DynamicCache, LlamaForCausalLM

from evolving_rl.local.engine.growing_cache import CHUNK, GrowingCache
from evolving_rl.local.engine.linear_layout import TransposedWeightLinear, use_transposed_weights

# transformers 5.x renamed the KV-cache argument `past_key_values` -> `cache`
CACHE = "cache" if "cache" in inspect.signature(LlamaForCausalLM.forward).parameters else (
    "past_key_values")


def _decode(model: nn.Module, cache, prompt: torch.Tensor, steps: int,
            keep: torch.Tensor | None = None, feed: list[torch.Tensor] | None = None):
    """Decode `steps` tokens after `prompt`: greedy, or the tokens `feed` gives for each step;
    after the first step keep only the rows `keep`. Returns each step's logits and tokens fed."""
    logits, fed = [], []
    with torch.inference_mode():
        out = model(input_ids=prompt, use_cache=True, **{CACHE: cache})
        for step in range(steps):
            cache = getattr(out, CACHE)
            tokens = out.logits[:, -1].argmax(-1, keepdim=True)
            if step == 1 and keep is not None:
                cache.batch_select_indices(keep)
                tokens = tokens[keep]
            tokens = tokens if feed is None else feed[step]
            fed.append(tokens)
            out = model(input_ids=tokens, use_cache=True, **{CACHE: cache})
            logits.append(out.logits[:, -1].clone())
    return logits, fed


def test_growing_cache_matches_dynamic_cache_across_reallocations():
    """Both caches decode the same tokens (DynamicCache's greedy choices): an argmax of each
    run's own logits could flip on a near-tie, and the logits are compared within tolerance."""
    model = tiny_llama()
    prompt = torch.randint(2, VOCAB, (3, CHUNK - 5), generator=torch.Generator().manual_seed(0))
    keep = torch.tensor([0, 2])
    expected, tokens = _decode(model, DynamicCache(), prompt, CHUNK + 10, keep)
    got, _ = _decode(model, GrowingCache(), prompt, CHUNK + 10, keep, feed=tokens)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)


def test_growing_cache_writes_in_place_until_full():
    cache = GrowingCache.from_layers([(torch.zeros(2, 1, 10, 4), torch.zeros(2, 1, 10, 4))])
    layer = cache.layers[0]
    start = layer.keys.data_ptr()
    for i in range(CHUNK - 10):
        keys, values = cache.update(torch.full((2, 1, 1, 4), float(i)),
                                    torch.full((2, 1, 1, 4), -float(i)), 0)
        assert keys.data_ptr() == start  # no copy while the buffer has room
    assert cache.get_seq_length() == CHUNK and keys[0, 0, -1, 0] == CHUNK - 11
    keys, _ = cache.update(torch.ones(2, 1, 1, 4), torch.ones(2, 1, 1, 4), 0)
    assert keys.data_ptr() != start and keys.shape[-2] == CHUNK + 1
    assert keys[1, 0, CHUNK - 1, 0] == CHUNK - 11 and keys[1, 0, -1, 0] == 1
    cache.batch_select_indices(torch.tensor([1]))
    assert cache.layers[0].keys.shape == (1, 1, CHUNK + 1, 4)
    assert cache.layers[0].values[0, 0, 10, 0] == 0 and cache.layers[0].values[0, 0, 11, 0] == -1


def test_transposed_linear_equals_linear_and_follows_weight_updates():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3, bias=False))
    x = torch.randn(4, 6)
    with torch.inference_mode():
        expected = model(x)
    keys = set(model.state_dict())
    assert use_transposed_weights(model) == 2
    assert all(isinstance(m, TransposedWeightLinear) for m in (model[0], model[2]))
    assert set(model.state_dict()) == keys
    with torch.inference_mode():
        torch.testing.assert_close(model(x), expected)
    optimiser = torch.optim.SGD(model.parameters(), lr=0.5)
    loss = model(x).square().sum()  # training path: gradients flow to the real weights
    loss.backward()
    assert model[0].weight.grad is not None and model[2].weight.grad.abs().sum() > 0
    optimiser.step()
    reference = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3, bias=False))
    reference.load_state_dict(model.state_dict())
    with torch.inference_mode():
        torch.testing.assert_close(model(x), reference(x))  # the copy was rebuilt
        assert not torch.allclose(model(x), expected)
