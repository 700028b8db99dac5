"""The learning canary (issue 44, docs/design.md §7.5): plain GRPO on the stated probe rises from
chance to at least 90% greedy success on held-out tasks, through the main job itself
(`python -m evolving_rl.local --config configs/probe_stated_cpu.yaml`: the same data stage,
servers over HTTP, pipeline, rewards, trainer and evaluation as every run), with a randomly
initialised 2-layer character model. Every seed is fixed and episodes run one at a time, so the
run draws the same random numbers whatever the machine's timing; the measured run ends at 100%
against the 90% bar, and before training the model wins none (chance among the answers: 50%).
A pipeline that attaches rewards to the wrong samples or trains on no solver token cannot pass
(the issue's closing note records both broken variants). About a minute on 2 cores.

Besides the learning curve, every step checks what a broken pipeline shows at once (issue 52;
each mutation of the trainer below was run, 2026-12-06, and failed the canary as said):
- the trainer reproduces the sampled log-probs: `|train/ratio - 1| < 1e-4` and
  `train/max_log_ratio < 1e-3` (at step 1: logits not shifted, ratio 1.021; old log-probs of the
  previous token, 0.524; the last prompt token trained, 0.669; at step 2: a stale KV cache after
  the weights changed, 1.0011);
- every sampled solver token is trained once: the sum of `train/n_tokens` equals the sum of
  `policy/new_tokens` (the last sampled token left out: 4,299 of 8,619; the loss mask shifted by
  one token: 4,304 of 8,624; the ratio check passes on both);
- both evaluations ran on the held-out split (`valid`), not the training one.

What it does not cover, and the tests that do:
- KL and entropy terms (its coefficients are 0): tests/local/test_local_trainer.py
  (`test_role_coefficients_reach_the_loss`), tests/slime/test_losses.py;
- multi-turn episodes (one answer an episode): tests/pipeline/test_pipeline_episode.py,
  tests/local/test_local_pipeline.py;
- several micro-batches (one a step): tests/local/test_local_trainer.py
  (`test_accumulation_matches_one_big_batch`);
- batched decoding (one episode at a time): tests/local/test_local_policy.py,
  tests/local/test_decode_static.py;
- top-p below 1: tests/local/test_local_top_p.py, tests/pipeline/test_pipeline_top_p.py,
  tests/slime/test_top_p_replay.py;
- distillation (`pipeline.skill_use: teacher`): tests/local/test_distill.py,
  tests/local/test_distill_calibration.py, tests/pipeline/test_pipeline_teacher.py;
- the extractor role (plain GRPO has none): tests/pipeline/test_pipeline_rollout.py,
  tests/pipeline/test_pipeline_extraction.py;
- resume from a checkpoint: tests/local/test_local_trainer.py
  (`test_checkpoint_resume_gives_the_same_next_step`);
- training rollouts sampled with the evaluation's (greedy) settings: caught here only after the
  whole run, at once by tests/pipeline/test_rollout_sampling.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.local.local_helpers import run_main_job

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "configs" / "probe_stated_cpu.yaml"


@pytest.mark.timeout(600)
def test_grpo_learns_the_stated_probe_through_the_main_job(tmp_path):
    records = run_main_job(PROFILE, tmp_path)
    evals = [r for r in records if r["kind"] == "eval"]
    steps = [r for r in records if r["kind"] == "train"]
    assert [r["split"] for r in evals] == ["valid", "valid"], "evaluated off the held-out split"
    for r in steps:
        assert abs(r["train/ratio"] - 1) < 1e-4 and r["train/max_log_ratio"] < 1e-3, (
            f"step {r['step']}: the trainer's log-probs are not the sampled ones (ratio "
            f"{r['train/ratio']}, largest log-ratio {r['train/max_log_ratio']})")
    trained = sum(r["train/n_tokens"] for r in steps)
    sampled = sum(r["policy/new_tokens"] for r in steps)
    assert trained == sampled, f"{trained} tokens trained of {sampled} sampled"
    before, after = (r["eval/all/without_skill_success_mean"] for r in evals)
    train = [r["solver/success_rate"] for r in steps]
    assert evals[0]["eval/cases"] == 64 and evals[-1]["eval/infra_failures"] == 0
    assert before <= 0.5, f"not at chance before training: {before}"
    assert train[0] <= 0.5, train
    assert after >= 0.9, f"held-out success {after} after training; per step: {train}"
