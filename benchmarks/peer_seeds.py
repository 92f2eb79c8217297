"""Per-seed comparison rows folded into one row per (task, set, path, metric) over the seeds:
seed means a side, ours − theirs as mean and std, each seed's values kept, the size buckets and
the time to accuracy; and their markdown table."""

from __future__ import annotations

import statistics
from typing import Any

SIZES = ("small", "medium", "large")


def _mean(values: list[float | None]) -> float | None:
    """The mean, or None unless every seed has a value (a missing seed is not averaged away)."""
    if not values or any(v is None for v in values):
        return None
    return statistics.fmean(v for v in values if v is not None)


def _std(values: list[float]) -> float | None:
    return statistics.stdev(values) if len(values) > 1 else None


def seed_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (task, set, path, metric, arm, epochs) of the per-seed ``rows``
    (`peer_tables.accuracy_rows`): ``lucid`` / ``ultralytics`` are the seed means (also as
    ``lucid_mean`` / ``ultralytics_mean``), ``diff_mean`` / ``diff_std`` ours − theirs over the
    seeds, and ``lucid_seeds`` / ``ultralytics_seeds`` / ``diff_seeds`` each seed's values."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in rows:
        key = (row["task"], row["set"], row["path"], row["metric"], row.get("lucid_accumulate"),
               row.get("epochs"))  # fmt: skip
        groups.setdefault(key, []).append(row)
    out = []
    for (task, set_, path, metric, arm, epochs), group in groups.items():
        group = sorted(group, key=lambda r: int(r.get("seed", 0)))
        both = [r for r in group if r["lucid"] is not None and r["ultralytics"] is not None]
        lucid = [float(r["lucid"]) for r in both]
        peer = [float(r["ultralytics"]) for r in both]
        diff = [a - b for a, b in zip(lucid, peer, strict=True)]
        row: dict[str, Any] = {
            "task": task, "set": set_, "path": path, "metric": metric,
            "seeds": [int(r.get("seed", 0)) for r in both], "epochs": epochs,
            "lucid_mean": _mean(list(lucid)), "ultralytics_mean": _mean(list(peer)),
            "diff_mean": _mean(list(diff)), "diff_std": _std(diff),
            "diff_min": min(diff) if diff else None,
        }  # fmt: skip
        row["lucid"], row["ultralytics"] = row["lucid_mean"], row["ultralytics_mean"]
        row.update(lucid_seeds=lucid, ultralytics_seeds=peer, diff_seeds=diff)
        row["lucid_accumulate"] = arm
        for extra in ("ultralytics_lucid_validation", "lucid_ultralytics_validation"):
            vals = [r.get(extra) for r in both]
            row[f"{extra}_mean"] = _mean(vals)
        for size in SIZES:
            a = [r.get(f"lucid_AP_{size}") for r in both]
            b = [r.get(f"ultralytics_AP_{size}") for r in both]
            if any(v is not None for v in a + b):
                row[f"lucid_AP_{size}"], row[f"ultralytics_AP_{size}"] = _mean(a), _mean(b)
                row[f"lucid_AP_{size}_seeds"], row[f"ultralytics_AP_{size}_seeds"] = a, b
        for side in ("lucid", "ultralytics"):
            tta = [r.get(f"{side}_tta_s") for r in both]
            if any(f"{side}_tta_s" in r for r in both):
                row[f"{side}_tta_s"] = _mean(tta)  # None if any seed never reached it
                row[f"{side}_tta_s_seeds"] = tta
                row[f"{side}_wall_s_seeds"] = [r.get(f"{side}_wall_s") for r in both]
        if row.get("lucid_tta_s") and row.get("ultralytics_tta_s"):
            row["tta_ratio"] = row["lucid_tta_s"] / row["ultralytics_tta_s"]
        out.append(row)
    return out


def set_name(label: str) -> str:
    """A row's set without its build tag (``skimage-shapes (skimage-shapes-s0-v2; ...)``)."""
    return label.split(" (")[0]


def _f(value: Any, fmt: str = "+.4f") -> str:
    return "n/a" if value is None else format(value, fmt)


def seed_table(rows: list[dict[str, Any]]) -> str:
    """The markdown table of `seed_rows`: seed means, ours − theirs (mean ± std, worst seed),
    the size buckets' differences and the time to accuracy."""
    lines = [
        "| task | set | path | metric | seeds | epochs | ours | theirs | ours - theirs (mean ± "
        "std) | worst seed | diff AP small / medium / large "
        "| time to their final: ours / theirs s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        sizes = " / ".join(
            _f(None if r.get(f"lucid_AP_{s}") is None or r.get(f"ultralytics_AP_{s}") is None
               else r[f"lucid_AP_{s}"] - r[f"ultralytics_AP_{s}"])
            for s in SIZES
        )  # fmt: skip
        tta = ""
        if "lucid_tta_s_seeds" in r:
            ours = ", ".join(_f(v, ".0f") for v in r["lucid_tta_s_seeds"])
            theirs = ", ".join(_f(v, ".0f") for v in r.get("ultralytics_tta_s_seeds", []))
            tta = f"{ours} / {theirs or '—'}"
        arm = r.get("lucid_accumulate")
        task = f"{r['task']} (ours: {arm})" if arm and arm != "auto" else r["task"]
        lines.append(
            f"| {task} | {set_name(r['set'])} | {r['path']} | {r['metric']} "
            f"| {len(r['seeds'])} | {r['epochs']} | {_f(r['lucid_mean'], '.4f')} "
            f"| {_f(r['ultralytics_mean'], '.4f')} | {_f(r['diff_mean'])} ± "
            f"{_f(r['diff_std'], '.4f')} | {_f(r['diff_min'])} | {sizes} | {tta} |"
        )
    return "\n".join(lines)
