"""Is our seed-to-seed spread wider than the authors'? A one-sided permutation test of the std
ratio (ours / theirs) on committed accuracy runs' per-seed values.

Each side's values are centred on their own mean first, so only the spread is tested, then the
pooled values are dealt to the two sides at random ``--draws`` times: ``p`` is the share of
deals whose std ratio is at least the observed one. Reads the ``rows`` of
`benchmarks/peer_accuracy.py`'s JSON files (``lucid_seeds`` and ``ultralytics_seeds``):

    python3 benchmarks/seed_spread.py docs/benchmarks/peer-accuracy/RUN.json ...
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np


def spread_p(ours: list[float], theirs: list[float], draws: int, seed: int = 0) -> float:
    """The one-sided permutation p of std(ours) / std(theirs) being at least as observed."""
    a = np.asarray(ours) - statistics.fmean(ours)
    b = np.asarray(theirs) - statistics.fmean(theirs)
    observed = a.std(ddof=1) / b.std(ddof=1)
    pool, k = np.concatenate([a, b]), len(a)
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(draws):
        rng.shuffle(pool)
        hits += pool[:k].std(ddof=1) / pool[k:].std(ddof=1) >= observed
    return hits / draws


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="peer_accuracy.py JSON files")
    parser.add_argument("--draws", type=int, default=20000)
    args = parser.parse_args()
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
