"""float32 master copies of a low-precision model's trainable parameters, for the optimiser.

Owns `MasterWeights`. A bfloat16 weight of magnitude ~0.02 has a spacing of ~1.2e-4 between
representable values, so an AdamW update of ~lr (1e-5 .. 5e-5) applied to it in place rounds to
nothing: most of the step is lost. Megatron's `--bf16` (the slime path) keeps float32 main
parameters and gradients in its optimiser and copies them back to the bf16 model after each
step; this class does the same for the local trainer (`local.master_weights`): the optimiser owns
float32 copies, `load_grads` hands them the model's gradients in float32, and `write_back` rounds
the updated copies into the model's parameters in place (so their version counters move, as the
decoders' weight caches expect). A float32 model needs none of this (`needed` is False).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


class MasterWeights:
    """The float32 parameters an optimiser steps in place of `params` (module docstring)."""

    def __init__(self, params: Sequence[torch.nn.Parameter]) -> None:
        self.params = list(params)
        self.masters = [p.detach().to(torch.float32).clone() for p in self.params]

    @staticmethod
    def needed(params: Sequence[torch.nn.Parameter]) -> bool:
        return any(p.dtype != torch.float32 for p in params)

    def load_grads(self) -> None:
        """Each master's gradient: its parameter's, in float32 (None where it has none)."""
        for param, master in zip(self.params, self.masters, strict=True):
            master.grad = None if param.grad is None else param.grad.to(torch.float32)
            param.grad = None

    @torch.no_grad()
    def write_back(self) -> None:
        """Round every master into its parameter, in place (after the optimiser's step)."""
        for param, master in zip(self.params, self.masters, strict=True):
            param.copy_(master)

    def state_dict(self) -> list[torch.Tensor]:
        return [master.detach().clone() for master in self.masters]

    @torch.no_grad()
    def load_state_dict(self, state: Sequence[torch.Tensor]) -> None:
        if len(state) != len(self.masters):
            raise ValueError(f"{len(state)} saved master weights for {len(self.masters)} "
                             "parameters")
        for master, saved in zip(self.masters, state, strict=True):
            master.copy_(saved)
        self.write_back()
