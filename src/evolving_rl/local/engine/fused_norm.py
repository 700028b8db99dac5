"""A fused RMSNorm for the GPU decode path of Llama-style models.

Owns `use_fused_rms_norm`. transformers' Llama-style `RMSNorm.forward` is eight kernels (cast,
square, mean, add, rsqrt, multiply, cast, scale by the weight), a share of a captured decode step
worth removing (docs/design.md §6.2). Under `torch.inference_mode` (the decoders' forwards) the
swapped modules compute the same thing with `torch.nn.functional.rms_norm` in float32 (one fused
kernel on CUDA), then cast and scale by the weight as the original does; training and `no_grad`
forwards take the stock path. The swap keeps each module's class a subclass of its own, its
parameters and its state dict. Only classes known to compute `weight * norm(x)` are switched (not
Gemma's `(1 + weight)`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

LLAMA_STYLE = frozenset({"LlamaRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm", "MistralRMSNorm"})
_FUSED: dict[type, type] = {}


class FusedRMSNorm(nn.Module):
    """Mixin placed before a Llama-style RMSNorm class (see the module docstring)."""

    weight: nn.Parameter
    variance_epsilon: float

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        if not torch.is_inference_mode_enabled():
            return super().forward(hidden_states)
        normed = F.rms_norm(hidden_states.float(), self.weight.shape, eps=self.variance_epsilon)
        return self.weight * normed.to(hidden_states.dtype)


def use_fused_rms_norm(model: nn.Module) -> int:
    """Switch every Llama-style RMSNorm of `model` to its fused subclass; how many."""
    switched = 0
    for module in model.modules():
        cls = type(module)
        if cls.__name__ in LLAMA_STYLE:
            if cls not in _FUSED:
                _FUSED[cls] = type(f"Fused{cls.__name__}", (FusedRMSNorm, cls), {})
            module.__class__ = _FUSED[cls]
            switched += 1
    return switched
