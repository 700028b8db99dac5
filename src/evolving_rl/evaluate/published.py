"""Published numbers the evaluation report compares against (no I/O).

The paper (arXiv 2605.10663), Qwen2.5-7B-Instruct trained on 8 GPUs on the four ALFWorld
training task types (pick_and_place, clean, heat, cool), greedy evaluation with the reference
protocol on valid_unseen: success on the training task types and on the two held-out types
(look_at_obj_in_light, pick_two_obj), against a plain GRPO solver on the held-out types. The
held-out subset is ~35 games: one game moves the rate by ~2.9 points. No Mind2Web numbers are
recorded here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PublishedNumber:
    """One published success rate (percent) of a split and task-type group."""

    environment: str
    split: str
    group: str  # an eval_report bucket: "group/training_types" or "group/held_out_types"
    method: str
    success_pct: float


PUBLISHED = (
    PublishedNumber("alfworld", "valid_unseen", "group/training_types",
                    "Evolving-RL (paper, with skill)", 96.0),
    PublishedNumber("alfworld", "valid_unseen", "group/held_out_types",
                    "Evolving-RL (paper, with skill)", 88.6),
    PublishedNumber("alfworld", "valid_unseen", "group/held_out_types", "GRPO (paper)", 44.6),
)


def published_for(environment: str, split: str) -> list[PublishedNumber]:
    return [n for n in PUBLISHED if n.environment == environment and n.split == split]
