"""The two roles of the shared policy, one number per role, and their advantage weights.

`RoleCoefficients` is a number per role (the config's per-role loss coefficients,
`loss.kl_coef` and `loss.entropy_coef`, are of this type); `RoleWeights` are such numbers that
scale GRPO advantages (λ_s for the solver, λ_e for the extractor; reference values 1.0 and 0.2
for ALFWorld, 1.0 and 0.1 for Mind2Web), whose defaults and bounds are settings declared in
`core.rewards.RewardSettings`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from evolving_rl.core.bounds import FieldError
from evolving_rl.core.strenum import StrEnum


class Role(StrEnum):
    SOLVER = "solver"
    EXTRACTOR = "extractor"


@dataclass(frozen=True)
class RoleCoefficients:
    """One coefficient per role."""

    solver: float = 0.0
    extractor: float = 0.0

    def of(self, role: Role) -> float:
        return self.solver if role is Role.SOLVER else self.extractor


@dataclass(frozen=True)
class RoleWeights(RoleCoefficients):
    """Multipliers applied to GRPO advantages by role (after group normalisation): finite and
    non-negative (`RewardSettings.role_weights` makes them from the settings)."""

    def __post_init__(self) -> None:
        for name in ("solver", "extractor"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise FieldError(name, f"must be finite and >= 0, got {value}")


def apply_role_weights(
    advantages: Sequence[float | None], roles: Sequence[Role], weights: RoleWeights
) -> list[float | None]:
    """Scale each advantage by its role's weight; None (a dropped sample) stays None."""
    if len(advantages) != len(roles):
        raise ValueError(f"{len(advantages)} advantages but {len(roles)} roles")
    return [
        None if advantage is None else advantage * weights.of(Role(role))
        for advantage, role in zip(advantages, roles, strict=True)
    ]
