"""Transposed weight copies for the CPU decode path of `nn.Linear` layers.

Owns `use_transposed_weights`. `nn.Linear` computes x @ W.T with W stored [out, in]; at the small
row counts of decoding (1-32 rows) MKL's transposed-operand kernel on CPU is slower than a plain
x @ Wt with Wt stored [in, out] contiguous (docs/design.md §6.2). The swap keeps the module an
`nn.Linear` with the same parameters and state dict; only calls under `torch.inference_mode` (the
decoder's) take the transposed copy, and the copy is rebuilt whenever the weight's version
counter moves (every in-place optimiser update), so a model that is trained in place between
rollouts never decodes with stale weights. Training and `no_grad` forwards take the stock path.
"""

from __future__ import annotations

import torch
from torch import nn


class TransposedWeightLinear(nn.Linear):
    """`nn.Linear` that decodes with a cached contiguous transpose of its weight."""

    _transposed: tuple[int, torch.Tensor] | None = None  # (weight version, W.T contiguous)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if not torch.is_inference_mode_enabled():
            return super().forward(inputs)
        version = self.weight._version
        if self._transposed is None or self._transposed[0] != version:
            self._transposed = (version, self.weight.detach().t().contiguous())
        out = inputs @ self._transposed[1]
        return out if self.bias is None else out + self.bias


def use_transposed_weights(model: nn.Module) -> int:
    """Switch every plain `nn.Linear` of `model` to `TransposedWeightLinear`; how many."""
    switched = 0
    for module in model.modules():
        if type(module) is nn.Linear:
            module.__class__ = TransposedWeightLinear
            switched += 1
    return switched
