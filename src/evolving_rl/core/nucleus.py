"""The top-p nucleus of sampled tokens, in slime's flat form, and its response-aligned builder.

With `--rollout-top-p` < 1, slime replays the nucleus each token was sampled from: the training
log-probs are renormalised over the kept ids (slime/backends/megatron_utils/loss.py:326
`_fill_topp_mask_rows`, :349 `_build_topp_keep_mask`; the target id itself is always kept,
slime/utils/ppo_utils.py:262-266, so a sampled id missing from its span is legal). The kept ids
of response token i are `token_ids[offsets[i]:offsets[i + 1]]`. Non-generated tokens get an
empty span (slime/utils/types.py:54-70 `_pad_rollout_top_p_offsets`): their row keeps only the
forced-in target, a log-prob of 0 that their loss mask 0 leaves out of the loss. The validity
rules are those slime applies to SGLang's answer (slime/utils/types.py:13-36) and to every sample
(slime/ray/rollout.py:718-730).

Owns `Nucleus` (immutable, validated) and `NucleusBuilder` (a multi-turn response built block by
block: generated blocks append their nucleus, observation blocks append empty spans).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise


def nucleus_problem(token_ids: Sequence[int], offsets: Sequence[int],
                    n_tokens: int | None = None) -> str | None:
    """Why (token_ids, offsets) is not a valid nucleus of `n_tokens` tokens; None when it is."""
    if not offsets or offsets[0] != 0:
        return f"offsets must start with 0, got {list(offsets[:1])}"
    if offsets[-1] != len(token_ids):
        return f"offsets[-1]={offsets[-1]} != {len(token_ids)} token ids"
    if n_tokens is not None and len(offsets) != n_tokens + 1:
        return f"{len(offsets)} offsets for {n_tokens} tokens (need one more than tokens)"
    if any(b < a for a, b in pairwise(offsets)):
        return "offsets decrease"
    return None


@dataclass(frozen=True)
class Nucleus:
    """Kept ids of consecutive tokens: token i kept `token_ids[offsets[i]:offsets[i + 1]]`."""

    token_ids: tuple[int, ...]
    offsets: tuple[int, ...]

    def __post_init__(self) -> None:
        problem = nucleus_problem(self.token_ids, self.offsets)
        if problem:
            raise ValueError(f"invalid nucleus: {problem}")

    @classmethod
    def empty(cls, n_tokens: int) -> Nucleus:
        """`n_tokens` empty spans (tokens that were not sampled)."""
        return cls((), (0,) * (n_tokens + 1))

    @property
    def n_tokens(self) -> int:
        return len(self.offsets) - 1

    def span(self, index: int) -> tuple[int, ...]:
        """The kept ids of token `index`."""
        return self.token_ids[self.offsets[index]:self.offsets[index + 1]]


@dataclass
class NucleusBuilder:
    """The nucleus of a growing response; starts with `n_before` empty spans."""

    n_before: int = 0
    token_ids: list[int] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.offsets = [0] * (self.n_before + 1)

    def add_empty(self, n_tokens: int) -> None:
        self.offsets.extend([self.offsets[-1]] * n_tokens)

    def add(self, nucleus: Nucleus) -> None:
        base = self.offsets[-1]
        self.token_ids.extend(nucleus.token_ids)
        self.offsets.extend(base + offset for offset in nucleus.offsets[1:])

    def build(self) -> Nucleus:
        return Nucleus(tuple(self.token_ids), tuple(self.offsets))
