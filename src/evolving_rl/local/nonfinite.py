"""What a skipped update leaves behind (issue 61 §3): the evidence of a non-finite gradient.

Owns `capture_skipped_step`. The trainer skips an optimiser step whose gradient norm is NaN or
infinite (`GRPOTrainer.step`); before this module a skip left one warning line, and the cause of
the skips seen on the hidden probe at 0.5B in bfloat16 (docs/results/2026-12-06-probe-mechanism-
0.5b-gpu.md) could not be found afterwards. On a skipped step the trainer calls it with the
step's micro-batches, and it writes into `<run>/nonfinite/step_NNNNN/`:

- `batches.pt`: every micro-batch as the trainer built it (token ids, attention mask, the trained
  tokens' positions, old log-probs, advantages, coefficients, roles): replayable offline
  (`torch.load`, then `token_log_probs` and `per_token_policy_loss` on any model and dtype);
- `findings.json`: per micro-batch, its shape and trained tokens per role; the count of
  non-finite values in the forward (the final hidden states at real and at padding positions,
  the new log-probs, the entropy, the PPO ratio, the loss); the gradient norm of each loss term
  on its own (pg; kl, entropy when their coefficients are on); and, for a micro-batch whose
  gradient is not finite, each row (sample) forwarded and backpropagated alone, unpadded: the
  role, length and first non-finite tokens (old and new log-prob) of the rows that stay
  non-finite. No such row while the micro-batch is: the cause needs the rows together
  (padding, the batch's shape).

Each backward here is of one term or one row, so a non-finite gradient is pinned to a
micro-batch, a term and a sample; a row needs its own forward, since in a joint backward its
zero gradient meets another token's infinity (0 x inf = NaN). NaN in the forward at positions
the loss never reads (padding) poisons the gradient the same way, hence the real/padding split
of the hidden states. The weights are not touched; the gradients are cleared after each
backward.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from evolving_rl.core.samples import TrainSample
from evolving_rl.local.trainer import ROLES, GRPOTrainer, TokenBatch
from evolving_rl.losses import TokenLoss

logger = logging.getLogger(__name__)
BAD_TOKENS_SHOWN = 10


def _nonfinite(tensor: torch.Tensor | None) -> int:
    return 0 if tensor is None else int((~torch.isfinite(tensor.detach())).sum())


def _on_cpu(value: Any) -> Any:
    return value.detach().cpu() if isinstance(value, torch.Tensor) else value


def _grad_norm(params: Sequence[torch.nn.Parameter]) -> float:
    """The L2 norm of the parameters' gradients (inf or NaN when one is), then cleared."""
    norms = [p.grad.detach().float().norm() for p in params if p.grad is not None]
    for p in params:
        p.grad = None
    return float(torch.linalg.vector_norm(torch.stack(norms))) if norms else 0.0


def _term_losses(trainer: GRPOTrainer, batch: TokenBatch,
                 terms: TokenLoss) -> dict[str, torch.Tensor]:
    """Each loss term the objective holds, summed over the micro-batch's trained tokens."""
    losses = {"pg": terms.pg.sum()}
    if trainer.uses_kl:
        losses["kl"] = (batch.kl_coef * terms.kl).sum()
    if trainer.uses_entropy:
        losses["entropy"] = -(batch.entropy_coef * terms.entropy).sum()
    return losses


def _hidden_nonfinite(trainer: GRPOTrainer, batch: TokenBatch) -> dict[str, int]:
    with torch.no_grad():
        hidden = trainer.model.base_model(input_ids=batch.input_ids,
                                          attention_mask=batch.attention_mask,
                                          use_cache=False).last_hidden_state
    bad = (~torch.isfinite(hidden)).any(-1)
    real = batch.attention_mask.bool()
    return {"hidden_real_positions": int((bad & real).sum()),
            "hidden_padding_positions": int((bad & ~real).sum())}


def _row_batch(batch: TokenBatch, row: int) -> TokenBatch:
    """Row `row` of `batch` as a micro-batch of its own, cut to its length (no padding)."""
    selected = batch.rows == row
    length = int(batch.attention_mask[row].sum())
    per_token = {name: getattr(batch, name)[selected] for name in (
        "cols", "targets", "old_log_probs", "advantages", "kl_coef", "entropy_coef",
        "role_index", "teacher", "distill_coef") if getattr(batch, name) is not None}
    return dataclasses.replace(
        batch, input_ids=batch.input_ids[row:row + 1, :length],
        attention_mask=batch.attention_mask[row:row + 1, :length],
        rows=torch.zeros_like(batch.rows[selected]), **per_token)


def _rows(trainer: GRPOTrainer, batch: TokenBatch,
          params: Sequence[torch.nn.Parameter]) -> list[dict[str, Any]]:
    """Each row forwarded and backpropagated alone (in a joint backward a row's zero gradient
    times another's inf is NaN again); the rows whose gradient norm is not finite."""
    found = []
    for row in range(batch.input_ids.shape[0]):
        alone = _row_batch(batch, row)
        log_probs, terms = trainer.batch_terms(alone)
        terms.loss.sum().backward()
        norm = _grad_norm(params)
        if math.isfinite(norm):
            continue
        log_probs = log_probs.detach()
        positions = torch.nonzero(~torch.isfinite(log_probs)
                                  | ~torch.isfinite(terms.ratio.detach()))
        found.append({
            "row": row, "grad_norm": norm, "length": int(alone.input_ids.shape[1]),
            "role": ROLES[int(alone.role_index[0])].value if alone.n_tokens else None,
            "trained_tokens": alone.n_tokens,
            "nonfinite_tokens": [
                {"col": int(alone.cols[i]), "token": int(alone.targets[i]),
                 "old_log_prob": float(alone.old_log_probs[i]),
                 "new_log_prob": float(log_probs[i])}
                for i in positions[:BAD_TOKENS_SHOWN, 0].tolist()]})
    return found


def _micro_batch_finding(trainer: GRPOTrainer, index: int, batch: TokenBatch,
                         params: Sequence[torch.nn.Parameter]) -> dict[str, Any]:
    log_probs, terms = trainer.batch_terms(batch)
    finding: dict[str, Any] = {
        "index": index, "rows": int(batch.input_ids.shape[0]),
        "width": int(batch.input_ids.shape[1]),
        "trained_tokens": {role.value: int((batch.role_index == i).sum())
                           for i, role in enumerate(ROLES)},
        "nonfinite_forward": {
            **_hidden_nonfinite(trainer, batch), "log_probs": _nonfinite(log_probs),
            "entropy": _nonfinite(terms.entropy), "ratio": _nonfinite(terms.ratio),
            "loss": _nonfinite(terms.loss)},
        "grad_norm_by_term": {}}
    losses = _term_losses(trainer, batch, terms)
    for number, (name, loss) in enumerate(losses.items(), 1):
        loss.backward(retain_graph=number < len(losses))
        finding["grad_norm_by_term"][name] = _grad_norm(params)
    bad = [name for name, norm in finding["grad_norm_by_term"].items()
           if not math.isfinite(norm)]
    finding["nonfinite_terms"] = bad
    if bad:
        finding["nonfinite_rows"] = _rows(trainer, batch, params)
    return finding


def capture_skipped_step(trainer: GRPOTrainer, samples: Sequence[TrainSample],
                         folder: Path) -> Path:
    """Write the skipped step's micro-batches and findings (the module doc) into `folder`."""
    batches = trainer.micro_batches(samples)
    folder.mkdir(parents=True, exist_ok=True)
    torch.save([{f.name: _on_cpu(getattr(batch, f.name)) for f in dataclasses.fields(batch)}
                for batch in batches], folder / "batches.pt")
    params = [p for p in trainer.model.parameters() if p.requires_grad]
    was_training = trainer.model.training
    trainer.model.train()
    try:
        findings = [_micro_batch_finding(trainer, i, b, params) for i, b in enumerate(batches)]
    finally:
        trainer.model.train(was_training)
        for p in params:
            p.grad = None
    summary = {"step": trainer.step_count, "dtype": str(next(trainer.model.parameters()).dtype),
               "micro_batches": findings,
               "nonfinite_micro_batches": [f["index"] for f in findings if f["nonfinite_terms"]]}
    (folder / "findings.json").write_text(json.dumps(summary, indent=1))
    logger.warning("step %d: the skipped update's micro-batches and findings are in %s "
                   "(non-finite micro-batches: %s)", trainer.step_count, folder,
                   summary["nonfinite_micro_batches"] or "none when replayed")
    return folder
