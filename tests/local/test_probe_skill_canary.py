"""The skill-path canary (issue 61 §1): learning that can only pass through the four stages. The
method trains the learning canary's randomly initialised 2-layer character model on the hidden
probe through the main job (`python -m evolving_rl.local --config
configs/probe_skill_canary_cpu.yaml`: data stage, servers over HTTP, pipeline, rewards, trainer,
evaluation). Tasks come in families sharing one of 2 answers that no observation states, and the
evaluation's families are held out, so no weights can hold their answers: held-out greedy success
with the model's own card (the `reference` protocol: retrieve a task of the test task's family,
play it, extract a card from it, play the test task with the card) must rise far above the
no-card arm, which stays at chance (0.5: each answer wins half the families).

What makes it learnable (the profile's header): the extractor writes one character, the card's
one step, inside JSON the pipeline opens and closes on the parser side only; the probe's `canary`
prompt layout ends the solver's prompt with the card and the extractor's with the answer the
source episode's feedback revealed. The extractor's KL term to the initial model keeps it from
settling on one character before the solver reads cards (docs/results/
2026-12-07-skill-canary-attempts.md: 25 runs that settled). The code the two roles agree on is
the model's own: in the measured run (2026-12-07, seed 0) the extractor writes `2` for a family
whose answer is 1 and another character otherwise, and the solver answers accordingly.

Measured (2026-12-07, 2 cores shared with another engineer's job, load 4-7): held-out greedy
success 0.00 with and without a card before training; after 150 steps 1.00 with the model's own
card, 0.50 without (chance 0.50). Every seed is fixed and the source tasks, episodes and
extractions run one at a time (`pipeline.max_concurrent_sources: 1`), so the run draws the same
random numbers in the same order whatever the timing: a rerun wrote the same metrics, every
value but the clock's and the evaluation's engine admission counts (11,202 values, 150 steps).
Too slow for the default run on this machine, hence `slow`: 607 s in the measured run and 1,162
to 1,543 s in the mutated ones (load 4-7 from other jobs; training 374 s of the 607), against
the issue's 3 minutes; not measured on a quiet machine. Run it with
`pytest -m slow tests/local/test_probe_skill_canary.py`.

Each check below was seen to fail on a one-line mutation of the real code (2026-12-07: the
mutation made, the profile run, the mutation reverted):
- the card left out of the downstream prompt (rollout.py `_downstream`: `None` for the card):
  held-out 0.50 with the card, 0.50 without, after 150 steps (`with_card >= 0.9` fails);
- retrieval returning the source task itself (similar_tasks.py: no id excluded):
  `retrieval/source_retrieved == 0` fails at step 1 (1 of 16 hits; a family's tasks share one
  question, so ties decide; learning alone would not catch it, the source's card fits its own
  family);
- downstream scores credited to the neighbouring skill (assembly.py: `skill_episodes((index + 1)
  % n_skills)` for the extractor's reward): held-out 0.50 with the card, 0.50 without
  (`with_card >= 0.9` fails; the extractor stopped writing digits by step 60);
- the extractor's GRPO group over the whole step (assembly.py: one group id for every extractor
  sample): `groups/extractor/count == 8` fails at step 1 (1 group);
- the extractor always told its source episode succeeded (rollout.py: `True` for the flag):
  `extractor/told_wrong_outcome == 0` fails at step 1 (32 of 32 extractions; the canary's card
  carries the revealed answer, so learning alone does not need the flag);
- the evaluation's card taken from another task's retrieval (evaluation.py: the retrieved list
  rotated by one): held-out 0.75 with the card, 0.50 without (`with_card >= 0.9` fails; the
  training is the healthy run's, step for step).

What it does not cover: the trainer's log-probs and token counts (the learning canary,
tests/local/test_probe_canary.py); the paper's prompts and skill schema (the canary's layout
replaces them: tests/pipeline/test_pipeline_extraction.py); several repeats, top-p, batching."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.local.local_helpers import run_main_job

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "configs" / "probe_skill_canary_cpu.yaml"
SOURCES = 8  # pipeline.source_tasks_per_rollout: one extractor group each


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_own_cards_lift_held_out_success_through_the_four_stages(tmp_path):
    records = run_main_job(PROFILE, tmp_path, timeout_s=1800)
    evals = [r for r in records if r["kind"] == "eval"]
    steps = [r for r in records if r["kind"] == "train"]
    assert [r["split"] for r in evals] == ["valid", "valid"], "evaluated off the held-out split"
    for r in steps:
        assert r["retrieval/source_retrieved"] == 0, (
            f"step {r['step']}: retrieval returned the source task itself "
            f"{r['retrieval/source_retrieved']:.0f} times")
        assert r["groups/extractor/count"] == SOURCES, (
            f"step {r['step']}: {r['groups/extractor/count']:.0f} extractor groups, not one per "
            f"source task ({SOURCES})")
        assert r["extractor/told_wrong_outcome"] == 0, (
            f"step {r['step']}: {r['extractor/told_wrong_outcome']:.0f} extractions told another "
            "outcome than their source episode's")
    before, after = evals
    for r in evals:
        assert r["eval/all/cases"] == 32 and r["eval/infra_failures"] == 0
        assert r["eval/all/skill_obtained_rate"] == 1.0
    assert before["eval/all/with_skill_success_mean"] <= 0.5, before
    with_card = after["eval/all/with_skill_success_mean"]
    without = after["eval/all/without_skill_success_mean"]
    curve = [round(r["solver/success_rate"], 2) for r in steps[::10]]
    assert 0.25 <= without <= 0.75, f"held-out success {without} without a card: not chance"
    assert with_card >= 0.9, (
        f"held-out success {with_card} with the model's own card ({without} without); "
        f"downstream success every 10 steps: {curve}")
