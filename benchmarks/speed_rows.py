"""The peer-speed rows' bookkeeping (`peer_speed`), free of any run: a row's summary fields from
its sides, rows merged into an existing ``peer-speed.json`` keyed by (task, scale, batch), the
batch fallback's rule, and the markdown table rebuilt from every row.

A row's ``batch`` is the batch asked for (its key); ``batch_used`` is the one its sides ran at.
The fallback is a try, not a rule of thumb: the row runs at the asked batch, and when one of its
sides ran out of device memory (its log says so) the whole row runs again at half the batch,
down to `MIN_BATCH`, so that every side of a row shares one batch. The peer's own first-epoch
halving (its trainer retries at half the batch after an out-of-memory error) is read from its
log into ``peer.batch_reduced_to``.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

MIN_BATCH = 8  # the fallback halves the batch down to this, then gives up
SIDES = ("peer", "lucid", "lucid_eager")
OOM_MARKERS = ("out of memory", "CUBLAS_STATUS_ALLOC_FAILED")
_PEER_REDUCED = re.compile(r"Reducing to batch=(\d+)")
_PIPELINE = "lucid data: training samples "


def row_key(row: dict[str, Any]) -> tuple[str, str, int]:
    """(task, scale, batch asked for); rows from before scales existed are scale ``n``."""
    return str(row["task"]), str(row.get("scale", "n")), int(row["batch"])


def merge_rows(
    old: Iterable[dict[str, Any]], new: Iterable[dict[str, Any]]
) -> list[dict[str, Any]]:
    """``old`` with each of ``new`` replacing the row of its key or appended, in first-seen order;
    old rows gain ``scale: "n"`` where they had none (the only scale measured before)."""
    merged: dict[tuple[str, str, int], dict[str, Any]] = {}
    for row in old:
        merged[row_key(row)] = {**row, "scale": row.get("scale", "n")}
    for row in new:
        merged[row_key(row)] = row
    return list(merged.values())


def ran_out_of_memory(log: Path) -> bool:
    """Whether a side's log shows a device out-of-memory error."""
    if not log.is_file():
        return False
    text = log.read_text(errors="replace")
    return any(marker in text for marker in OOM_MARKERS)


def peer_reduced_batch(log: Path) -> int | None:
    """The batch the peer's trainer fell back to on its own (None: it kept the asked one)."""
    if not log.is_file():
        return None
    found = _PEER_REDUCED.findall(log.read_text(errors="replace"))
    return int(found[-1]) if found else None


def pipeline_line(log: Path) -> str | None:
    """Where our side's training samples were made, as its fit's log says it (`lucid data:
    training samples ...`, with what ``--data.render auto`` took and why); None: no such line."""
    if not log.is_file():
        return None
    found = [x for x in log.read_text(errors="replace").splitlines() if x.startswith(_PIPELINE)]
    return found[-1][len("lucid data: ") :] if found else None


def next_batch(batch: int) -> int | None:
    """The batch the fallback tries after ``batch`` ran out of memory (None: give up)."""
    half = batch // 2
    return half if half >= MIN_BATCH else None


def _median(values: list[Any]) -> float | None:
    kept = [float(v) for v in values if v is not None]
    return round(statistics.median(kept), 1) if kept else None


def summarise_row(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` (its sides' results under ``peer``, ``lucid``, ``lucid_eager``) with the summary
    fields the table reads: each side's img/s, the GPU utilisation per side and the ratio.

    A row run ``--repeats`` times (``repeats``: each side's results in the order run, the sides
    alternating) reads each side's median img/s and utilisation, the ratio of the medians, and
    in ``ratio_runs`` the ratio of each repeat's own pair: the authors' side moves 5-18 % from
    call to call, so one pair is one draw."""
    out = dict(row)
    out.setdefault("loader_img_s", None)
    repeats = row.get("repeats")
    if repeats:
        img = {k: _median([r.get("img_s") for r in repeats.get(k, [])]) for k in SIDES}
        util = {k: _median([r.get("gpu_util") for r in repeats.get(k, [])]) for k in SIDES}
        pairs = zip(repeats.get("lucid", []), repeats.get("peer", []), strict=False)
        out["ratio_runs"] = [
            round(a["img_s"] / b["img_s"], 2) if a.get("img_s") and b.get("img_s") else None
            for a, b in pairs
        ]
    else:
        img = {k: row.get(k, {}).get("img_s") for k in SIDES}
        util = {k: row.get(k, {}).get("gpu_util") for k in SIDES}
    out["ultralytics_img_s"] = img["peer"]
    out["lucid_img_s"] = img["lucid"]
    out["lucid_eager_img_s"] = img["lucid_eager"]
    out["gpu_util"] = util
    a, b = out["lucid_img_s"], out["ultralytics_img_s"]
    out["ratio"] = round(a / b, 2) if a and b else None
    return out


HEAD = ["task", "scale", "batch", "Ultralytics img/s", "lucid img/s (capture)", "lucid eager",
        "loader alone", "ratio", "GPU util % (peer / lucid / eager)"]  # fmt: skip
ORDER = {"n": 0, "s": 1, "m": 2, "l": 3, "x": 4}


def _batch_cell(row: dict[str, Any]) -> str:
    used = row.get("batch_used", row["batch"])
    cell = str(row["batch"]) if used == row["batch"] else f"{row['batch']} (ran {used}: memory)"
    reduced = row.get("peer", {}).get("batch_reduced_to")
    return cell + (f", peer fell back to {reduced}" if reduced else "")


def _ratio_cell(row: dict[str, Any]) -> str:
    runs = [r for r in row.get("ratio_runs") or [] if r is not None]
    if len(runs) < 2:
        return str(row.get("ratio"))
    return f"{row.get('ratio')} ({min(runs)}-{max(runs)}, {len(runs)} pairs)"


def table(runs: list[dict[str, Any]]) -> str:
    """The markdown table of every row, by task, scale (n to x) and batch."""
    lines = ["| " + " | ".join(HEAD) + " |", "|" + " --- |" * len(HEAD)]
    rows = sorted(
        runs, key=lambda r: (r["task"], ORDER.get(r.get("scale", "n"), 9), int(r["batch"]))
    )
    for r in rows:
        u = r.get("gpu_util") or {}
        cells = [r["task"], r.get("scale", "n"), _batch_cell(r), r.get("ultralytics_img_s"),
                 r.get("lucid_img_s"), r.get("lucid_eager_img_s"), r.get("loader_img_s"),
                 _ratio_cell(r),
                 f"{u.get('peer')} / {u.get('lucid')} / {u.get('lucid_eager')}"]  # fmt: skip
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"
