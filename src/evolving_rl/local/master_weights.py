"""float32 master copies of a low-precision model's trainable parameters, for the optimiser.

Owns `MasterWeights`. A bfloat16 weight of magnitude ~0.02 has a spacing of ~1.2e-4 between
representable values, so an AdamW update of ~lr (1e-5 .. 5e-5) applied to it in place rounds to
nothing: most of the step is lost. Megatron's `--bf16` (the slime path) keeps float32 main
parameters and gradients in its optimiser and copies them back to the bf16 model after each
step; this class does the same for the local trainer (`local.master_weights`): the optimiser owns
float32 copies, `load_grads` hands them the model's gradients in float32, and `write_back` rounds
the updated copies into the model's parameters in place (so their version counters move, as the
decoders' weight caches expect). A float32 model needs none of this (`needed` is False).

Owns `OffloadedMasters` too (`local.optimizer_device: cpu`): the same float32 copies, and the
optimiser's state with them, in CPU memory, so that a model whose masters and AdamW moments
(12 bytes a parameter) do not fit its GPU beside it can still be trained there. Its
`clip_and_step` takes the total gradient norm on the model's device, then one parameter at a
time copies the gradient into CPU memory (through a pinned staging buffer on a GPU), scales it
as `clip_grad_norm_` would, steps the optimiser on that master alone (AdamW's update is
elementwise, so one parameter at a time is the whole-model step) and writes its rounding back:
the CPU holds one extra float32 gradient, the largest parameter's, never all of them.
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
        """The masters themselves, not copies (a 7B model's are 30 GB): save them before the
        next step changes them."""
        return [master.detach() for master in self.masters]

    @torch.no_grad()
    def load_state_dict(self, state: Sequence[torch.Tensor]) -> None:
        if len(state) != len(self.masters):
            raise ValueError(f"{len(state)} saved master weights for {len(self.masters)} "
                             "parameters")
        for master, saved in zip(self.masters, state, strict=True):
            master.copy_(saved)
        self.write_back()


class OffloadedMasters(MasterWeights):
    """float32 masters in CPU memory for a model on another device (module docstring); the
    optimiser built over `masters` keeps its state there too."""

    def __init__(self, params: Sequence[torch.nn.Parameter]) -> None:
        self.params = list(params)
        self.masters = [p.detach().to("cpu").to(torch.float32, copy=True) for p in self.params]
        largest = max(p.numel() for p in self.params)
        pinned = self.params[0].device.type == "cuda"
        self._staging = torch.empty(largest * max(p.element_size() for p in self.params),
                                    dtype=torch.uint8, pin_memory=pinned)
        self._grad = torch.empty(largest, dtype=torch.float32)

    def _staged(self, like: torch.Tensor) -> torch.Tensor:
        """The staging buffer as a tensor of `like`'s dtype and shape."""
        size = like.numel() * like.element_size()
        return self._staging[:size].view(like.dtype).view(like.shape)

    def grad_norm(self) -> torch.Tensor:
        """The total 2-norm of the model's gradients, in float32 on the model's device."""
        norms = [torch.linalg.vector_norm(p.grad, dtype=torch.float32)
                 for p in self.params if p.grad is not None]
        if not norms:
            return torch.zeros((), device=self.params[0].device)
        return torch.linalg.vector_norm(torch.stack(norms))

    def _host_grad(self, grad: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        staged = self._staged(grad)
        staged.copy_(grad)
        return self._grad[:grad.numel()].view(grad.shape).copy_(staged).mul_(scale)

    @torch.no_grad()
    def clip_and_step(self, optimizer: torch.optim.Optimizer, max_norm: float) -> torch.Tensor:
        """Clip the gradients to a total norm of `max_norm`, step `optimizer` (built over
        `masters`) and write the result into the model; the norm before clipping. A NaN or
        infinite norm steps nothing. The model's gradients are cleared either way."""
        total = self.grad_norm()
        finite = bool(torch.isfinite(total))
        scale = torch.clamp(max_norm / (total + 1e-6), max=1.0).cpu()  # as clip_grad_norm_
        for param, master in zip(self.params, self.masters, strict=True):
            if finite and param.grad is not None:
                master.grad = self._host_grad(param.grad, scale)
                optimizer.step()
                master.grad = None
                self._write(param, master)
            param.grad = None
        return total

    def _write(self, param: torch.nn.Parameter, master: torch.Tensor) -> None:
        staged = self._staged(param)
        staged.copy_(master)
        param.copy_(staged)

    @torch.no_grad()
    def write_back(self) -> None:
        for param, master in zip(self.params, self.masters, strict=True):
            self._write(param, master)
