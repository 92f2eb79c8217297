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

``--by-seed`` takes the seed, not the fit, as the unit, because runs that share a seed share its
first weights and image order and so are not independent draws: each side's values of one seed
are averaged over the runs that hold it, the std of those seed means is compared by the same
permutation over seeds, and each side's spread is split into a between-seed and a within-seed
(run to run) part by one-way analysis of variance.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections.abc import Callable, Iterator
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


Key = tuple[str, str, str, str]
Run = dict[int, float]  # seed -> value


SIZES = ("small", "medium", "large")


def _seed_values(doc: dict, by_size: bool) -> Iterator[tuple[Key, Run, Run]]:
    """A run's rows as (key, ours, theirs), each side seed -> value: the ``rows``' mAP per seed,
    or with ``by_size`` the ``seed_rows``' COCO AP by object size (``AP_small`` ...)."""
    if not by_size:
        for row in doc["rows"]:
            ours, theirs = row.get("lucid_seeds"), row.get("ultralytics_seeds")
            if ours and theirs:
                key = (row["task"].split()[0], row["set"].split()[0], row["path"], row["metric"])
                yield (
                    key,
                    dict(zip(row["seeds"], ours, strict=True)),
                    dict(zip(row["seeds"], theirs, strict=True)),
                )
        return
    sides: dict[Key, tuple[Run, Run]] = {}
    for row in doc.get("seed_rows", []):
        for size in SIZES:
            a, b = row.get(f"lucid_AP_{size}"), row.get(f"ultralytics_AP_{size}")
            if a is None or b is None:
                continue
            metric = f"{row['metric']} AP_{size}"
            key = (row["task"].split()[0], row["set"].split()[0], row["path"], metric)
            ours, theirs = sides.setdefault(key, ({}, {}))
            ours[row["seed"]], theirs[row["seed"]] = a, b
    for key, (ours, theirs) in sides.items():
        yield key, ours, theirs


def _grouped(runs: list[Path], by_size: bool = False) -> dict[Key, tuple[list[Run], list[Run]]]:
    """Per task, set, path and metric: our runs and the peer's (a peer reused by --peer-from
    counts once), each as seed -> value."""
    groups: dict[Key, tuple[list[Run], list[Run]]] = {}
    for run in runs:
        for key, ours, peer in _seed_values(json.loads(run.read_text()), by_size):
            if len(ours) < 3 or len(peer) < 3:
                continue
            ours_runs, theirs_runs = groups.setdefault(key, ([], []))
            ours_runs.append(ours)
            if peer not in theirs_runs:
                theirs_runs.append(peer)
    return groups


def seed_components(runs: list[Run]) -> tuple[dict[int, float], float, float]:
    """The seed means, and the between-seed and within-seed std of one fit (one-way random
    effects ANOVA: within = sqrt(MSW), between = sqrt(max(0, (MSB - MSW) / n0))). With one
    fit a seed, nothing separates the two: within is nan and between is the fits' std."""
    by_seed: dict[int, list[float]] = {}
    for run in runs:
        for seed, value in run.items():
            by_seed.setdefault(seed, []).append(value)
    means = {seed: statistics.fmean(v) for seed, v in sorted(by_seed.items())}
    sizes = np.array([len(v) for v in by_seed.values()])
    total, k = int(sizes.sum()), len(by_seed)
    grand = statistics.fmean(x for v in by_seed.values() for x in v)
    ssw = sum((x - means[s]) ** 2 for s, v in by_seed.items() for x in v)
    ssb = sum(len(v) * (means[s] - grand) ** 2 for s, v in by_seed.items())
    msw = ssw / (total - k) if total > k else 0.0
    if total == k:
        return means, float(np.sqrt(ssb / (k - 1))), math.nan
    msb = ssb / (k - 1)
    n0 = (total - np.square(sizes).sum() / total) / (k - 1)
    return means, float(np.sqrt(max(0.0, (msb - msw) / n0))), float(np.sqrt(msw))


def _or_dash(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:.4f}"


def _by_seed_table(runs: list[Path], draws: int, by_size: bool = False) -> None:
    print(
        "| task | set | path | metric | seeds ours / theirs (fits) | std of seed means ours / "
        "theirs | ratio | p (ours wider) | between-seed ours / theirs | within-seed ours / "
        "theirs |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (task, set_name, path, metric), (ours_runs, theirs_runs) in _grouped(runs, by_size).items():
        m_a, b_a, w_a = seed_components(ours_runs)
        m_b, b_b, w_b = seed_components(theirs_runs)
        a, b = list(m_a.values()), list(m_b.values())
        s_a, s_b = statistics.stdev(a), statistics.stdev(b)
        fits_a, fits_b = sum(map(len, ours_runs)), sum(map(len, theirs_runs))
        print(
            f"| {task} | {set_name} | {path} | {metric} | {len(a)} ({fits_a}) / {len(b)} "
            f"({fits_b}) | {s_a:.4f} / {s_b:.4f} | {s_a / s_b:.2f} | {spread_p(a, b, draws):.3f} "
            f"| {b_a:.4f} / {b_b:.4f} | {_or_dash(w_a)} / {_or_dash(w_b)} |"
        )


def _pooled_table(runs: list[Path], draws: int) -> None:
    groups = {
        key: ([list(r.values()) for r in ours], [list(r.values()) for r in theirs])
        for key, (ours, theirs) in _grouped(runs).items()
    }
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
    parser.add_argument("--by-seed", action="store_true", help="the seed as the unit")
    parser.add_argument(
        "--by-size", action="store_true", help="with --by-seed: COCO AP of small, medium, large"
    )
    args = parser.parse_args()
    if args.by_seed:
        _by_seed_table(args.runs, args.draws, args.by_size)
        return
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
