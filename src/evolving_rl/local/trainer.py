"""The local GRPO trainer: one optimiser step per rollout, the same objective as the slime path.

Owns `GRPOTrainer` (micro-batching, gradient accumulation, clipping, AdamW, HF checkpoints with
optimiser state and resume), `TokenBatch` (the loss-mask tokens of a micro-batch, flattened) and
`token_log_probs` (the log-probs the trainer — and the policy-consistency test — compute for
given tokens). The per-token math is `evolving_rl.losses.per_token_policy_loss` (PPO-clip with
asymmetric ε, low-variance KL to the frozen reference, entropy term); this module only gathers
its inputs and reduces it.

- Old log-probs are the sampled ones stored in each `TrainSample`; they are raw-model
  log-probs at temperature 1 (see `local.engine.policy`), the same quantity recomputed here.
- Advantages already carry the GRPO normalisation and role weights (pipeline); KL and entropy
  coefficients are looked up per sample from its role (`cfg.loss.kl_coef` / `entropy_coef`).
- The reduction is a token-level mean over every loss-mask token of the whole rollout: each
  micro-batch adds `sum(loss_t) / total_tokens` to the gradient, so accumulation over micro-batches
  gives exactly the full-batch mean whatever the micro-batch size.
- Logits are computed only at loss-mask positions (output embeddings applied to the selected
  final hidden states), which keeps memory linear in the trained tokens rather than in sequence
  length × vocabulary. This assumes logits = output_embeddings(last hidden state), true for the
  Llama / Qwen / Mistral families; models with logit soft-capping or scaling are refused.
- Memory (`local.*`, measured by benchmarks/main_job_memory.py): activation checkpointing per
  decoder layer, the output layer over `logit_chunk_tokens` trained tokens at a time (each chunk
  recomputed in backward), and `release_freed_memory`, a fixed glibc mmap threshold so that freed
  activations leave the resident set instead of fragmenting the heap.
- A model in a lower precision than float32 is optimised through float32 master copies of its
  weights (`local.master_weights`, on by default, as Megatron's `--bf16` does;
  `evolving_rl.local.master_weights` says why); with `local.optimizer_device: cpu` those copies
  and AdamW's state live in CPU memory and a fused CPU AdamW steps them (`OffloadedMasters`).
- Samples that are not trainable (status) or have no loss-mask token are skipped.
- A step whose gradient norm is not finite is skipped (the weights stay as they were) and
  counted (`StepMetrics.skipped`); the main job then saves its evidence
  (`evolving_rl.local.nonfinite`).
- Under `pipeline.skill_use: teacher` a student sample's tokens carry its teacher log-probs and
  `loss.distill_coef` (on-policy distillation folded into the advantages, docs/design.md §4.6);
  a rollout without any teacher takes exactly the code path it takes without the switch.
"""

from __future__ import annotations

import ctypes
import logging
import random
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from torch.utils.checkpoint import checkpoint
from tqdm import tqdm

from evolving_rl.config.schema import LocalConfig, LossConfig
from evolving_rl.core.roles import Role
from evolving_rl.core.samples import TrainSample
from evolving_rl.local.checkpoints import STATE_FILE, write_folder
from evolving_rl.local.master_weights import MasterWeights, OffloadedMasters
from evolving_rl.losses import TokenLoss, per_token_policy_loss

logger = logging.getLogger(__name__)

ROLES = (Role.SOLVER, Role.EXTRACTOR)
TERMS = ("pg", "kl", "entropy", "clipped", "ratio")


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (the trainer itself draws no random numbers)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@dataclass
class TokenBatch:
    """A right-padded micro-batch and its loss-mask tokens, flattened to 1-D per-token tensors."""

    input_ids: torch.Tensor  # [rows, length]
    attention_mask: torch.Tensor  # [rows, length]
    rows: torch.Tensor  # [tokens] row of each trained token
    cols: torch.Tensor  # [tokens] position of each trained token in its row
    targets: torch.Tensor  # [tokens] the token id
    old_log_probs: torch.Tensor
    advantages: torch.Tensor
    kl_coef: torch.Tensor
    entropy_coef: torch.Tensor
    role_index: torch.Tensor  # [tokens] index into ROLES
    teacher: torch.Tensor | None = None  # [tokens] teacher log-probs; None: no sample has any
    distill_coef: torch.Tensor | None = None  # [tokens] loss.distill_coef on teacher tokens

    @property
    def n_tokens(self) -> int:
        return int(self.targets.numel())

    @property
    def n_sequence_tokens(self) -> int:
        return int(self.attention_mask.sum())


def is_trainable(sample: TrainSample) -> bool:
    return sample.status.trainable and any(sample.loss_mask) and bool(sample.prompt_ids)


def build_token_batch(samples: Sequence[TrainSample], loss: LossConfig, pad_id: int,
                      device: torch.device | str) -> TokenBatch:
    """Pad `samples` on the right and list their loss-mask tokens with per-token coefficients."""
    width = max(len(s.prompt_ids) + len(s.response_ids) for s in samples)
    ids = torch.full((len(samples), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(samples), width), dtype=torch.long)
    per_token: dict[str, list[float]] = {k: [] for k in ("rows", "cols", "targets", "old", "adv",
                                                         "kl", "ent", "role", "teacher",
                                                         "distill")}
    distilled = any(s.teacher_log_probs is not None for s in samples)
    for row, sample in enumerate(samples):
        tokens = sample.prompt_ids + sample.response_ids
        ids[row, :len(tokens)] = torch.tensor(tokens, dtype=torch.long)
        mask[row, :len(tokens)] = 1
        role = Role(sample.role)
        start = len(sample.prompt_ids)
        for j, (token, flag, log_prob) in enumerate(
                zip(sample.response_ids, sample.loss_mask, sample.log_probs, strict=True)):
            if not flag:
                continue
            for key, value in (("rows", row), ("cols", start + j), ("targets", token),
                               ("old", log_prob), ("adv", sample.advantage),
                               ("kl", getattr(loss.kl_coef, role.value)),
                               ("ent", getattr(loss.entropy_coef, role.value)),
                               ("role", ROLES.index(role))):
                per_token[key].append(value)
        if distilled:
            _add_teacher(per_token, sample, loss.distill_coef)

    def tensor(key: str, dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor(per_token[key], dtype=dtype, device=device)

    return TokenBatch(
        input_ids=ids.to(device), attention_mask=mask.to(device), rows=tensor("rows", torch.long),
        cols=tensor("cols", torch.long), targets=tensor("targets", torch.long),
        old_log_probs=tensor("old", torch.float32), advantages=tensor("adv", torch.float32),
        kl_coef=tensor("kl", torch.float32), entropy_coef=tensor("ent", torch.float32),
        role_index=tensor("role", torch.long),
        **({"teacher": tensor("teacher", torch.float32),
            "distill_coef": tensor("distill", torch.float32)} if distilled else {}))


def _add_teacher(per_token: dict[str, list[float]], sample: TrainSample, coef: float) -> None:
    """The sample's teacher log-prob and distillation coefficient on each loss-mask token (0.0
    and 0 for a sample without a teacher)."""
    teacher = sample.teacher_log_probs
    kept = [t for t, flag in zip(teacher or sample.log_probs, sample.loss_mask, strict=True)
            if flag]
    per_token["teacher"] += kept if teacher is not None else [0.0] * len(kept)
    per_token["distill"] += [coef if teacher is not None else 0.0] * len(kept)


def check_logits_are_projection(model: torch.nn.Module) -> None:
    """Refuse models whose logits are not just the output embeddings of the last hidden state."""
    config = model.config
    for name in ("final_logit_softcapping", "logit_scale", "logits_scaling"):
        value = getattr(config, name, None)
        if value not in (None, 1.0):
            raise NotImplementedError(f"the local trainer does not support {name}={value}")


def _head_log_probs(head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor,
                    with_entropy: bool) -> tuple[torch.Tensor, ...]:
    """Log-probs of `targets` (and the entropy) from final hidden states [tokens, hidden]."""
    logits = head(hidden)  # float32 (float64 kept: the finite-difference tests)
    log_probs = torch.log_softmax(logits if logits.dtype == torch.float64 else logits.float(), -1)
    chosen = log_probs.gather(1, targets[:, None])[:, 0]
    if not with_entropy:
        return (chosen,)
    return chosen, -(log_probs.exp() * log_probs).sum(-1)


def token_log_probs(model: torch.nn.Module, batch: TokenBatch, with_entropy: bool = False,
                    chunk_tokens: int = 0) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Raw-model log-probs (temperature 1) of the batch's trained tokens, and their entropy.

    `chunk_tokens` > 0 applies the output layer to that many tokens at a time, each chunk
    checkpointed when gradients are on, so at most one chunk's vocabulary-wide tensors are alive
    (backward recomputes them); 0 projects every trained token at once.
    """
    hidden = model.base_model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                              use_cache=False).last_hidden_state
    selected, head = hidden[batch.rows, batch.cols - 1], model.get_output_embeddings()
    if chunk_tokens <= 0:
        outputs = [_head_log_probs(head, selected, batch.targets, with_entropy)]
    else:
        def project(states: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, ...]:
            if not torch.is_grad_enabled():
                return _head_log_probs(head, states, targets, with_entropy)
            return checkpoint(_head_log_probs, head, states, targets, with_entropy,
                              use_reentrant=False)
        outputs = [project(states, targets) for states, targets in
                   zip(selected.split(chunk_tokens), batch.targets.split(chunk_tokens),
                       strict=True)]
    chosen = torch.cat([out[0] for out in outputs])
    return chosen, torch.cat([out[1] for out in outputs]) if with_entropy else None


M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number
MMAP_THRESHOLD_BYTES = 256 << 10


def release_freed_memory() -> bool:
    """Serve every allocation of 256 KB or more from its own mapping, unmapped when freed.

    glibc raises its mmap threshold (up to 32 MB) whenever a mapped block is freed; from then on
    activation-sized tensors come from the heap, whose freed pages stay resident and fragment
    (what it saved and cost: docs/design.md §6.3). Process-wide; False where the C library has no
    `mallopt` (macOS, musl) or refuses it.
    """
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    return mallopt is not None and mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1


def enable_checkpointing(model: torch.nn.Module) -> None:
    """Non-reentrant activation checkpointing (transformers 5.x name, else the 4.x one)."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


@dataclass
class StepMetrics:
    """One optimiser step: means over trained tokens, per-role token counts and KL, throughput."""

    step: int
    n_samples: int
    n_tokens: int
    n_sequence_tokens: int
    loss: float = 0.0
    pg: float = 0.0
    kl: float = 0.0
    entropy: float = 0.0
    clipped: float = 0.0
    ratio: float = 0.0
    grad_norm: float = 0.0
    # The gradient norm was NaN or infinite, so the step was not applied (Megatron's fp16 loss
    # scaler skips such a step; in bf16 it stops the run, `--check-for-nan-in-loss-and-grad`).
    skipped: bool = False
    duration_s: float = 0.0
    tokens_per_s: float = 0.0
    role_tokens: dict[str, int] = field(default_factory=dict)
    role_kl: dict[str, float] = field(default_factory=dict)
    # Under pipeline.skill_use: teacher: the sampled reverse KL (old - teacher) summed over the
    # student tokens and divided by every trained token of the step, as slime reports it
    # (docs/design.md §4.6), and the student tokens' count.
    distill_kl: float = 0.0
    teacher_tokens: int = 0
    # The largest log-prob gain new - old over the trained tokens: the PPO ratio's exponent. Over
    # ~88 its exp overflows float32, and a token with a positive advantage then gives a finite
    # loss with a NaN gradient (the clipped branch wins, 0 x inf in the other).
    max_log_ratio: float = 0.0

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _with_progress(batches: Sequence[TokenBatch], enabled: bool) -> Iterator[TokenBatch]:
    """The micro-batches, with a bar counted in tokens (they are sorted by length, so a count of
    micro-batches would promise too early an end)."""
    with tqdm(total=sum(b.n_sequence_tokens for b in batches), unit="tok", unit_scale=True,
              desc="GRPO update", disable=not enabled, leave=False) as bar:
        for index, batch in enumerate(batches, 1):
            bar.set_postfix_str(f"micro-batch {index}/{len(batches)}")
            yield batch
            bar.update(batch.n_sequence_tokens)


def _masters(trainable: list[torch.nn.Parameter], local: LocalConfig) -> MasterWeights | None:
    """The float32 copies the optimiser steps (`local.optimizer_device`, `local.master_weights`);
    None: it steps the model's own parameters."""
    if local.optimizer_device == "cpu":
        return OffloadedMasters(trainable)
    if local.master_weights and MasterWeights.needed(trainable):
        return MasterWeights(trainable)
    return None


class GRPOTrainer:
    """Optimises `model` in place on the samples of one rollout per `step` call."""

    def __init__(self, model: torch.nn.Module, ref_model: torch.nn.Module | None,
                 loss: LossConfig, local: LocalConfig, pad_id: int) -> None:
        check_logits_are_projection(model)
        self.model, self.ref_model = model, ref_model
        self.loss_cfg, self.local_cfg = loss, local
        self.pad_id = pad_id
        self.device = next(model.parameters()).device
        self.step_count = 0
        self.uses_kl = any(c > 0 for c in (loss.kl_coef.solver, loss.kl_coef.extractor))
        if self.uses_kl and ref_model is None:
            raise ValueError("a KL coefficient is non-zero but no reference model was given")
        self.uses_entropy = any(c != 0 for c in (loss.entropy_coef.solver,
                                                 loss.entropy_coef.extractor))
        trainable = [p for p in model.parameters() if p.requires_grad]
        self.masters = _masters(trainable, local)
        self.optimized = self.masters.masters if self.masters is not None else trainable
        self.optimizer = torch.optim.AdamW(
            self.optimized, lr=loss.lr, betas=(loss.adam_beta1, loss.adam_beta2),
            weight_decay=loss.weight_decay, **({"fused": True} if self.offloaded else {}))
        if local.gradient_checkpointing:
            enable_checkpointing(model)
        if local.release_freed_memory and not release_freed_memory():
            logger.warning("no glibc mallopt: freed activation memory may stay resident")

    def micro_batches(self, samples: Sequence[TrainSample]) -> list[TokenBatch]:
        """The trainable samples, sorted by length, in micro-batches of
        `local.micro_batch_size`: what `step` accumulates over."""
        usable = sorted((s for s in samples if is_trainable(s)),
                        key=lambda s: len(s.prompt_ids) + len(s.response_ids))
        size = self.local_cfg.micro_batch_size
        return [build_token_batch(usable[i:i + size], self.loss_cfg, self.pad_id, self.device)
                for i in range(0, len(usable), size)]

    def batch_terms(self, batch: TokenBatch) -> tuple[torch.Tensor, TokenLoss]:
        """The micro-batch's new log-probs and per-token loss terms at the current weights
        (with gradients when they are enabled; the reference's never)."""
        chunk = self.local_cfg.logit_chunk_tokens
        ref = None
        if self.uses_kl:
            with torch.no_grad():
                ref, _ = token_log_probs(self.ref_model, batch, chunk_tokens=chunk)
        log_probs, entropy = token_log_probs(self.model, batch, with_entropy=True,
                                             chunk_tokens=chunk)
        if not self.uses_entropy:
            entropy = entropy.detach()
        terms = per_token_policy_loss(
            log_probs=log_probs, old_log_probs=batch.old_log_probs,
            advantages=batch.advantages, eps_low=self.loss_cfg.clip_eps_low,
            eps_high=self.loss_cfg.clip_eps_high, ref_log_probs=ref,
            kl_coef=batch.kl_coef, entropy=entropy, entropy_coef=batch.entropy_coef,
            teacher_log_probs=batch.teacher,
            distill_coef=0.0 if batch.distill_coef is None else batch.distill_coef)
        return log_probs, terms

    def _accumulate(self, batches: Sequence[TokenBatch], backward: bool) -> dict[str, float]:
        """Sum of every per-token term over all batches (and gradients of the mean loss)."""
        total = sum(b.n_tokens for b in batches)
        sums = {name: 0.0 for name in ("loss", *TERMS)}
        role_sums = {role.value: [0.0, 0] for role in ROLES}  # [kl sum, tokens]
        distill = [0.0, 0]  # [reverse KL sum, teacher tokens]
        peak: torch.Tensor | None = None  # the largest new - old log-prob (one sync, at the end)
        for batch in _with_progress(batches, enabled=backward):
            with torch.set_grad_enabled(backward):
                log_probs, terms = self.batch_terms(batch)
                if backward:
                    (terms.loss.sum() / total).backward()
            for name in sums:
                sums[name] += float(getattr(terms, name).detach().sum())
            if batch.n_tokens:
                gap = (log_probs.detach() - batch.old_log_probs).max()
                peak = gap if peak is None else torch.maximum(peak, gap)
            if batch.distill_coef is not None:
                distill[0] += float(terms.reverse_kl.detach().sum())
                distill[1] += int((batch.distill_coef != 0).sum())
            for index, role in enumerate(ROLES):
                selected = batch.role_index == index
                role_sums[role.value][0] += float(terms.kl.detach()[selected].sum())
                role_sums[role.value][1] += int(selected.sum())
        means = {name: value / max(total, 1) for name, value in sums.items()}
        means.update({f"kl/{role}": kl / max(n, 1) for role, (kl, n) in role_sums.items()})
        means.update({f"tokens/{role}": n for role, (_, n) in role_sums.items()})
        means["distill_kl"], means["tokens/teacher"] = distill[0] / max(total, 1), distill[1]
        means["max_log_ratio"] = float(peak) if peak is not None else 0.0
        return means

    def evaluate_loss(self, samples: Sequence[TrainSample]) -> dict[str, float]:
        """The objective on `samples` at the current weights, without a gradient or a step."""
        self.model.eval()
        return self._accumulate(self.micro_batches(samples), backward=False)

    def step(self, samples: Sequence[TrainSample]) -> StepMetrics:
        """One optimiser step on the token-level mean objective of `samples`."""
        started = time.perf_counter()
        batches = self.micro_batches(samples)
        self.step_count += 1
        metrics = StepMetrics(step=self.step_count,
                              n_samples=sum(len(b.input_ids) for b in batches),
                              n_tokens=sum(b.n_tokens for b in batches),
                              n_sequence_tokens=sum(b.n_sequence_tokens for b in batches))
        if not batches:
            logger.warning("step %d: no trainable sample, no update", self.step_count)
            return metrics
        self.model.train()
        means = self._accumulate(batches, backward=True)
        grad_norm = self._apply_gradients()
        metrics.skipped = not bool(torch.isfinite(grad_norm))
        if metrics.skipped:
            logger.warning("step %d: gradient norm %s is not finite: update skipped, the "
                           "weights are unchanged (largest new - old log-prob of a trained "
                           "token: %.4g)", self.step_count, float(grad_norm),
                           means["max_log_ratio"])
        self.model.eval()
        for name in ("loss", *TERMS):
            setattr(metrics, name, means[name])
        metrics.grad_norm = float(grad_norm)
        metrics.role_kl = {role.value: means[f"kl/{role.value}"] for role in ROLES}
        metrics.role_tokens = {role.value: int(means[f"tokens/{role.value}"]) for role in ROLES}
        metrics.distill_kl, metrics.teacher_tokens = means["distill_kl"], means["tokens/teacher"]
        metrics.max_log_ratio = means["max_log_ratio"]
        metrics.duration_s = time.perf_counter() - started
        metrics.tokens_per_s = metrics.n_sequence_tokens / max(metrics.duration_s, 1e-9)
        return metrics

    def set_distill_coef(self, beta: float) -> None:
        """β of the distillation term from the next step on (`local.distill_calibration` module)."""
        if not beta >= 0:
            raise ValueError(f"distill_coef must be >= 0, got {beta}")
        self.loss_cfg = replace(self.loss_cfg, distill_coef=beta)

    @property
    def offloaded(self) -> bool:
        """Whether the masters and AdamW's state live in CPU memory (`OffloadedMasters`)."""
        return isinstance(self.masters, OffloadedMasters)

    def _apply_gradients(self) -> torch.Tensor:
        """Clip the gradients, step AdamW unless their norm is NaN or infinite (the weights then
        stay as they were), clear them; the norm before clipping."""
        clip = self.loss_cfg.grad_clip
        if self.offloaded:
            return self.masters.clip_and_step(self.optimizer, clip)
        if self.masters is not None:
            self.masters.load_grads()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.optimized, clip)
        finite = bool(torch.isfinite(grad_norm))
        if finite:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.masters is not None and finite:
            self.masters.write_back()
        return grad_norm

    def save(self, directory: str | Path, tokenizer: object | None = None) -> Path:
        """An HF checkpoint of the policy (+ tokenizer) and the step count; with
        `local.save_trainer_state`, also the optimiser state (and float32 master weights), which
        a resumed run needs to continue exactly (about twice the model's size again). Staged and
        renamed into place (`local.checkpoints.write_folder`): a kill mid-save leaves the folder
        as it was."""
        state: dict[str, object] = {"step": self.step_count}
        if self.local_cfg.save_trainer_state:
            state["optimizer"] = self.optimizer.state_dict()
            if self.masters is not None:
                state["master_weights"] = self.masters.state_dict()

        def write(staging: Path) -> None:
            self.model.save_pretrained(staging)
            if tokenizer is not None:
                tokenizer.save_pretrained(staging)
            torch.save(state, staging / STATE_FILE)

        return write_folder(Path(directory), write)

    def load_state(self, directory: str | Path) -> None:
        """Restore the step count saved by `save` in `directory`, and the optimiser state when it
        was saved (otherwise the optimiser starts afresh, which is logged). Offloaded, the file
        is mapped rather than read whole: a 7B model's saved masters and moments (91 GB) beside
        its live masters would not fit the host; AdamW's writes make the pages its own (until
        then the file must not be overwritten in place; the job never does)."""
        state = torch.load(Path(directory) / STATE_FILE, weights_only=True, mmap=self.offloaded,
                           map_location="cpu" if self.offloaded else self.device)
        if "optimizer" in state:
            self.optimizer.load_state_dict(state["optimizer"])
        else:
            logger.warning("%s holds no optimiser state (saved with local.save_trainer_state "
                           "false): AdamW starts afresh from the saved weights", directory)
        if self.masters is not None and "master_weights" in state:
            self.masters.load_state_dict(state["master_weights"])
        self.step_count = int(state["step"])
