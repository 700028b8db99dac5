"""The two roles of the shared policy and their advantage weights (λ_s for the solver, λ_e for the
extractor; reference values 1.0 and 0.2 for ALFWorld, 1.0 and 0.1 for Mind2Web).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from evolving_rl.core.bounds import FieldError, bounded, check_bounds
from evolving_rl.core.strenum import StrEnum


class Role(StrEnum):
    SOLVER = "solver"
    EXTRACTOR = "extractor"


@dataclass(frozen=True)
class RoleWeights:
    """Multipliers applied to GRPO advantages by role (after group normalisation)."""

    solver: float = bounded(1.0, ge=0.0)
    extractor: float = bounded(0.2, ge=0.0)

    def __post_init__(self) -> None:
        check_bounds(self)
        for name in ("solver", "extractor"):
            if not math.isfinite(getattr(self, name)):
                raise FieldError(name, f"must be finite, got {getattr(self, name)}")

    def weight(self, role: Role) -> float:
        return self.solver if role is Role.SOLVER else self.extractor


def apply_role_weights(
    advantages: Sequence[float | None], roles: Sequence[Role], weights: RoleWeights
) -> list[float | None]:
    """Scale each advantage by its role's weight; None (a dropped sample) stays None."""
    if len(advantages) != len(roles):
        raise ValueError(f"{len(advantages)} advantages but {len(roles)} roles")
    return [
        None if advantage is None else advantage * weights.weight(Role(role))
        for advantage, role in zip(advantages, roles, strict=True)
    ]
