"""`benchmarks/seed_spread.py`'s permutation test of two trainers' seed-to-seed spread: small p
where one side is clearly wider, not small where both are alike, whatever their means."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import seed_spread


def test_a_wider_side_gives_a_small_p_and_alike_sides_do_not() -> None:
    rng = np.random.default_rng(1)
    narrow = list(0.25 + 0.01 * rng.standard_normal(8))
    wide = list(0.10 + 0.05 * rng.standard_normal(8))  # another mean: only the spread counts
    assert seed_spread.spread_p(wide, narrow, 4000) < 0.01
    assert seed_spread.spread_p(narrow, wide, 4000) > 0.99
    alike = list(0.10 + 0.01 * rng.standard_normal(8))
    assert 0.05 < seed_spread.spread_p(alike, narrow, 4000) < 0.95


def test_pooled_runs_are_centred_each_on_its_own_mean() -> None:
    rng = np.random.default_rng(2)
    # Two runs of ours whose means differ (two arms), each as narrow as the peer's one run.
    ours = [list(m + 0.01 * rng.standard_normal(8)) for m in (0.20, 0.30)]
    theirs = [list(0.25 + 0.01 * rng.standard_normal(8))]
    s_ours, _, p = seed_spread.pooled_p(ours, theirs, 4000)
    assert s_ours < 0.02  # the 0.1 between the runs' means is not spread
    assert 0.05 < p < 0.95
    wide = [list(m + 0.04 * rng.standard_normal(8)) for m in (0.20, 0.30)]
    assert seed_spread.pooled_p(wide, theirs, 4000)[2] < 0.01
