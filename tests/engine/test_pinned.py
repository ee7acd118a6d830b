"""Refactors keep the numbers: a few rounds of seven algorithms on an unbalanced federation
with minibatches give the metrics pinned in ``tests/pinned/values.json`` (regenerated only by
a change meant to alter them: ``python -m tests.pinned.make_pins``)."""

from __future__ import annotations

import json

import pytest

from tests.pinned.make_pins import CASES, PATH, measure

PINNED = json.loads(PATH.read_text())


@pytest.mark.represented
@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("oracle", ["stacked", "loop"])
def test_metrics_match_pinned_values(name, oracle):
    rows = measure(CASES[name], oracle)
    expected = PINNED[name]
    assert len(rows) == len(expected)
    for got, want in zip(rows, expected, strict=True):
        assert got.keys() == want.keys()
        for key, value in want.items():
            assert got[key] == pytest.approx(value, rel=2e-5, abs=1e-6), (name, key)
