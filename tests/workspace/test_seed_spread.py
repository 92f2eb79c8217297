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


def test_seed_components_split_a_shared_seed_effect_from_run_noise() -> None:
    """Runs that share seeds: the seed effect is the between part, run noise the within part."""
    rng = np.random.default_rng(3)
    effect = 0.03 * rng.standard_normal(40)  # one draw per seed, shared by every run
    runs = [
        {seed: 0.25 + effect[seed] + 0.005 * rng.standard_normal() for seed in range(40)}
        for _ in range(4)
    ]
    means, between, within = seed_spread.seed_components(runs)
    assert list(means) == list(range(40))
    assert 0.02 < between < 0.04
    assert 0.003 < within < 0.007
    # A seed held by fewer runs still counts once in the means.
    runs[0][40] = 0.25
    assert len(seed_spread.seed_components(runs)[0]) == 41
    # One fit a seed: no run noise can be told apart from the seed's effect.
    _, between, within = seed_spread.seed_components(runs[1:2])
    assert between > 0.02 and np.isnan(within)


def test_by_size_reads_each_seeds_ap_of_small_medium_and_large_objects() -> None:
    doc = {
        "rows": [],
        "seed_rows": [
            {"task": "detect", "set": "s (v1)", "path": "e2e", "metric": "mAP50-95", "seed": s,
             "lucid_AP_small": 0.1 + s, "ultralytics_AP_small": 0.2 + s,
             "lucid_AP_large": None, "ultralytics_AP_large": 0.5}
            for s in range(3)
        ],
    }  # fmt: skip
    rows = list(seed_spread._seed_values(doc, by_size=True))
    assert [key for key, _, _ in rows] == [("detect", "s", "e2e", "mAP50-95 AP_small")]
    assert rows[0][1] == {0: 0.1, 1: 1.1, 2: 2.1} and rows[0][2][2] == 2.2  # a None side: no row
