"""Is our seed-to-seed spread wider than the authors'? A one-sided permutation test of the std
ratio (ours / theirs) on committed accuracy runs' per-seed values.

Each side's values are centred on their own mean first, so only the spread is tested, then the
pooled values are dealt to the two sides at random ``--draws`` times: ``p`` is the share of
deals whose std ratio is at least the observed one. Reads the ``rows`` of
`benchmarks/peer_accuracy.py`'s JSON files (``lucid_seeds`` and ``ultralytics_seeds``):

    python3 benchmarks/seed_spread.py docs/benchmarks/peer-accuracy/RUN.json ...

``--pooled`` tests all the runs together, one row per task, set, path and metric: each run's
values are centred on that run's mean (an arm may move the mean, not the spread), a peer's
values are counted once where runs share them (``--peer-from``), and each side's std divides
by its values less its runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable
from pathlib import Path

import numpy as np


def _permutation_p(
    a: np.ndarray,
    b: np.ndarray,
    ratio: Callable[[np.ndarray, np.ndarray], float],
    draws: int,
    seed: int,
) -> float:
    """The share of ``draws`` random deals of ``a`` and ``b``'s pooled values to two sides of
    their sizes whose ``ratio`` is at least the observed one."""
    observed = ratio(a, b)
    pool, k = np.concatenate([a, b]), len(a)
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(draws):
        rng.shuffle(pool)
        hits += ratio(pool[:k], pool[k:]) >= observed
    return hits / draws


def spread_p(ours: list[float], theirs: list[float], draws: int, seed: int = 0) -> float:
    """The one-sided permutation p of std(ours) / std(theirs) being at least as observed."""
    a = np.asarray(ours) - statistics.fmean(ours)
    b = np.asarray(theirs) - statistics.fmean(theirs)
    return _permutation_p(a, b, lambda x, y: x.std(ddof=1) / y.std(ddof=1), draws, seed)


def _pooled_std(values: np.ndarray, runs: int) -> float:
    return float(np.sqrt(np.square(values).sum() / (len(values) - runs)))


def pooled_p(
    ours: list[list[float]], theirs: list[list[float]], draws: int, seed: int = 0
) -> tuple[float, float, float]:
    """std of ours, std of theirs (each run centred) and the one-sided permutation p."""
    a = np.concatenate([np.asarray(v) - statistics.fmean(v) for v in ours])
    b = np.concatenate([np.asarray(v) - statistics.fmean(v) for v in theirs])
    runs_a, runs_b = len(ours), len(theirs)

    def ratio(x: np.ndarray, y: np.ndarray) -> float:
        return _pooled_std(x, runs_a) / _pooled_std(y, runs_b)

    return _pooled_std(a, runs_a), _pooled_std(b, runs_b), _permutation_p(a, b, ratio, draws, seed)


def _pooled_table(runs: list[Path], draws: int) -> None:
    groups: dict[tuple[str, str, str, str], tuple[list[list[float]], list[list[float]]]] = {}
    for run in runs:
        for row in json.loads(run.read_text())["rows"]:
            ours, theirs = row.get("lucid_seeds"), row.get("ultralytics_seeds")
            if not ours or not theirs or len(ours) < 3 or len(theirs) < 3:
                continue
            key = (row["task"].split()[0], row["set"].split()[0], row["path"], row["metric"])
            ours_runs, theirs_runs = groups.setdefault(key, ([], []))
            ours_runs.append(ours)
            if theirs not in theirs_runs:  # a peer reused by --peer-from counts once
                theirs_runs.append(theirs)
    print(
        "| task | set | path | metric | fits ours (runs) / theirs (runs) | std ours / theirs "
        "| ratio | p (ours wider) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for (task, set_name, path, metric), (ours_runs, theirs_runs) in groups.items():
        s_a, s_b, p = pooled_p(ours_runs, theirs_runs, draws)
        fits_a, fits_b = sum(map(len, ours_runs)), sum(map(len, theirs_runs))
        print(
            f"| {task} | {set_name} | {path} | {metric} | {fits_a} ({len(ours_runs)}) / "
            f"{fits_b} ({len(theirs_runs)}) | {s_a:.4f} / {s_b:.4f} | {s_a / s_b:.2f} | {p:.3f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="peer_accuracy.py JSON files")
    parser.add_argument("--draws", type=int, default=20000)
    parser.add_argument("--pooled", action="store_true", help="one row over all the runs")
    args = parser.parse_args()
    if args.pooled:
        _pooled_table(args.runs, args.draws)
        return
    print("| run | path | metric | seeds | std ours / theirs | ratio | p (ours wider) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for run in args.runs:
        for row in json.loads(run.read_text())["rows"]:
            ours, theirs = row.get("lucid_seeds"), row.get("ultralytics_seeds")
            if not ours or not theirs or len(ours) < 3 or len(theirs) < 3:
                continue
            s_ours, s_theirs = statistics.stdev(ours), statistics.stdev(theirs)
            p = spread_p(ours, theirs, args.draws)
            print(
                f"| {run.stem} | {row['path']} | {row['metric']} | {len(ours)} | "
                f"{s_ours:.4f} / {s_theirs:.4f} | {s_ours / s_theirs:.2f} | {p:.2f} |"
            )


if __name__ == "__main__":
    main()
