"""`core.nucleus`: slime's validity rules for a nucleus, and response alignment by the builder."""

from __future__ import annotations

import pytest

from evolving_rl.core.nucleus import Nucleus, NucleusBuilder, nucleus_problem


def test_spans_are_read_from_offsets():
    nucleus = Nucleus((5, 6, 7, 9), (0, 3, 3, 4))
    assert nucleus.n_tokens == 3
    assert [nucleus.span(i) for i in range(3)] == [(5, 6, 7), (), (9,)]
    assert Nucleus.empty(2) == Nucleus((), (0, 0, 0))


@pytest.mark.parametrize(("ids", "offsets", "n_tokens", "problem"), [
    ((1,), (), None, "start with 0"),
    ((1,), (1, 1), None, "start with 0"),
    ((1, 2), (0, 1), None, "offsets[-1]=1 != 2"),
    ((1, 2), (0, 2), 2, "2 offsets for 2 tokens"),
    ((1, 2), (0, 2, 1, 2), None, "decrease"),
])
def test_invalid_nuclei_are_named(ids, offsets, n_tokens, problem):
    assert problem in nucleus_problem(ids, offsets, n_tokens)
    if n_tokens is None:
        with pytest.raises(ValueError, match="invalid nucleus"):
            Nucleus(ids, offsets)


def test_valid_nucleus_has_no_problem():
    assert nucleus_problem([4, 5], [0, 1, 2], 2) is None
    assert nucleus_problem([], [0], 0) is None


def test_builder_aligns_generated_spans_and_empty_observation_spans():
    builder = NucleusBuilder(n_before=2)  # two tokens before the first generation
    builder.add(Nucleus((10, 11, 12), (0, 2, 3)))
    builder.add_empty(3)
    builder.add(Nucleus((20,), (0, 1)))
    nucleus = builder.build()
    assert nucleus.n_tokens == 2 + 2 + 3 + 1
    assert [nucleus.span(i) for i in range(nucleus.n_tokens)] == [
        (), (), (10, 11), (12,), (), (), (), (20,)]
    assert nucleus.offsets[-1] == len(nucleus.token_ids) == 4
