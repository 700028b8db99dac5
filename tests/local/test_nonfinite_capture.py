"""A skipped update leaves its evidence (src/evolving_rl/local/nonfinite.py, issue 61 §3): the
micro-batches, and the micro-batch, term, sample and tokens whose gradient is not finite."""

from __future__ import annotations

import copy
import dataclasses
import json

import torch
from local_helpers import PAD_ID, tiny_llama

from evolving_rl.local.nonfinite import capture_skipped_step
from evolving_rl.local.trainer import GRPOTrainer, build_token_batch, token_log_probs
from evolving_rl.losses import per_token_policy_loss


def _poisoned(batch, index: int):
    """`batch` with one trained token of sample `index` given a sampler log-prob of -200: its
    PPO ratio overflows float32 and, with a positive advantage, its gradient is NaN (the clipped
    branch wins: 0 x inf)."""
    sample = batch[index]
    old = list(sample.log_probs)
    old[sample.loss_mask.index(1)] = -200.0
    return [*batch[:index], dataclasses.replace(sample, log_probs=old), *batch[index + 1:]]


def test_a_skipped_step_names_its_micro_batch_term_sample_and_token(loss_cfg, local_cfg, batch,
                                                                    tmp_path):
    model = tiny_llama()
    trainer = GRPOTrainer(model, copy.deepcopy(model).requires_grad_(False), loss_cfg, local_cfg,
                          pad_id=PAD_ID)
    before = [p.detach().clone() for p in model.parameters()]
    samples = _poisoned(batch, 0)  # a solver sample, advantage +1, 5 + 7 tokens
    assert trainer.step(samples).skipped
    capture_skipped_step(trainer, samples, tmp_path / "step_00001")  # as the main job does
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
    assert all(p.grad is None for p in model.parameters())

    found = json.loads((tmp_path / "step_00001" / "findings.json").read_text())
    # Micro-batches of 2, sorted by length (10, 10 | 10, 12 | 12, 13): sample 0 is in the 2nd.
    assert found["nonfinite_micro_batches"] == [1]
    bad = found["micro_batches"][1]
    assert bad["nonfinite_terms"] == ["pg"]
    assert bad["grad_norm_by_term"]["kl"] < float("inf")
    assert bad["nonfinite_forward"]["ratio"] == 1 and bad["nonfinite_forward"]["log_probs"] == 0
    assert bad["nonfinite_forward"]["hidden_padding_positions"] == 0
    [row] = bad["nonfinite_rows"]  # forwarded alone: the extractor row beside it is finite
    assert (row["role"], row["length"]) == ("solver", 12)
    [token] = row["nonfinite_tokens"]
    assert token["old_log_prob"] == -200.0 and -20 < token["new_log_prob"] < 0
    assert all(not f["nonfinite_terms"] for i, f in enumerate(found["micro_batches"]) if i != 1)

    saved = torch.load(tmp_path / "step_00001" / "batches.pt")
    assert len(saved) == 3 and float(saved[1]["old_log_probs"].min()) == -200.0


def test_the_saved_micro_batch_replays_to_the_same_non_finite_gradient(loss_cfg, local_cfg,
                                                                       batch, tmp_path):
    """What `batches.pt` is for: the batch, replayed on the same weights without the run, gives
    the same non-finite gradient in float32, and a finite one in float64 (where exp(196) does
    not overflow): a question of precision answered offline."""
    model = tiny_llama()
    trainer = GRPOTrainer(model, None, dataclasses.replace(
        loss_cfg, kl_coef=dataclasses.replace(loss_cfg.kl_coef, solver=0.0, extractor=0.0)),
        local_cfg, pad_id=PAD_ID)
    capture_skipped_step(trainer, _poisoned(batch, 0), tmp_path / "step_00001")
    saved = torch.load(tmp_path / "step_00001" / "batches.pt")[1]
    rebuilt = build_token_batch(sorted(_poisoned(batch, 0), key=lambda s: len(s.prompt_ids)
                                       + len(s.response_ids))[2:4], trainer.loss_cfg, PAD_ID,
                                "cpu")
    assert torch.equal(saved["input_ids"], rebuilt.input_ids)
    for dtype, finite in ((torch.float32, False), (torch.float64, True)):
        replica = copy.deepcopy(model).to(dtype)
        replay = dataclasses.replace(rebuilt, **{k: v for k, v in saved.items()
                                                 if isinstance(v, torch.Tensor)})
        log_probs, _ = token_log_probs(replica, replay)
        loss = per_token_policy_loss(log_probs=log_probs, old_log_probs=replay.old_log_probs,
                                     advantages=replay.advantages, eps_low=0.2, eps_high=0.2)
        loss.loss.sum().backward()
        norms = torch.stack([p.grad.norm() for p in replica.parameters() if p.grad is not None])
        assert bool(torch.isfinite(norms).all()) is finite, dtype


def test_the_main_job_leaves_a_skipped_steps_evidence_in_its_run_folder(tmp_path, monkeypatch):
    """The job's wiring (`local.job._train_step`), on the learning canary's profile for one
    step: a step made non-finite by a NaN gradient hook (removed before the capture replays it)
    is recorded as skipped and leaves `nonfinite/step_00001/` with the step's micro-batches; the
    replay, without the hook, finds no non-finite micro-batch and says so."""
    from test_determinism import _config, _env_server_only

    from evolving_rl.local import job

    monkeypatch.setattr(job, "servers", _env_server_only)
    monkeypatch.setattr(job, "build_retrieval_cache", lambda cfg, prepared: None)
    step = GRPOTrainer.step

    def poisoned(self, samples):
        hook = next(self.model.parameters()).register_hook(lambda grad: grad * float("nan"))
        try:
            return step(self, samples)
        finally:
            hook.remove()

    monkeypatch.setattr(GRPOTrainer, "step", poisoned)
    threads = torch.get_num_threads()
    try:
        cfg = _config(tmp_path, "run")
        run_dir = job.run_job(dataclasses.replace(
            cfg, local=dataclasses.replace(cfg.local, train_steps=1, n_eval_games=2))).run_dir
    finally:
        torch.set_num_threads(threads)
    [train] = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
               if json.loads(line)["kind"] == "train"]
    assert train["train/skipped"] is True
    folder = run_dir / "nonfinite" / "step_00001"
    found = json.loads((folder / "findings.json").read_text())
    assert found["step"] == 1 and found["nonfinite_micro_batches"] == []
    saved = torch.load(folder / "batches.pt")
    assert sum(int(b["targets"].numel()) for b in saved) == train["train/n_tokens"]
