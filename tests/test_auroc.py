"""The rank-based AUROC: a table of known values and a property check against the pairwise definition."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runwatch.logger.auroc import auroc


@pytest.mark.parametrize(
    "scores, labels, expected",
    [
        ([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1], 0.75),
        ([1, 2, 3, 4], [0, 0, 1, 1], 1.0),
        ([1, 2, 3, 4], [1, 1, 0, 0], 0.0),
        ([5, 5, 5, 5], [0, 1, 0, 1], 0.5),  # all tied: chance
        ([1, 2, 2, 3], [0, 0, 1, 1], 0.875),  # one tie across classes counts one half
        ([1, 2], [1.0, 1.0], None),  # a single class
        ([], [], None),
    ],
)
def test_auroc_table(scores, labels, expected):
    assert auroc(scores, labels) == (None if expected is None else pytest.approx(expected))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(-5, 5), st.booleans()), min_size=2, max_size=40))
def test_auroc_equals_the_pairwise_definition(pairs):
    scores = [s for s, _ in pairs]
    labels = [1.0 if y else 0.0 for _, y in pairs]
    pos = [s for s, y in pairs if y]
    neg = [s for s, y in pairs if not y]
    if not pos or not neg:
        assert auroc(scores, labels) is None
        return
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg)
    assert auroc(scores, labels) == pytest.approx(wins / (len(pos) * len(neg)))
