"""The step profile's markdown (`step_profile`): per scale and task, the part table of each side
(ms a step and share), the step efficiency, the top kernels, and plainly where our eager step
spends more device time than the authors' in a part."""

from __future__ import annotations

from typing import Any

PART_ORDER = ("backbone", "neck", "head", "network", "loss", "assigner", "log", "backward",
              "optimizer", "ema", "other")  # fmt: skip
LABEL = {"ours_eager": "ours, eager", "ours_capture": "ours, replayed", "peer": "Ultralytics"}


def _ms(side: dict[str, Any], part: str) -> float | None:
    value = side.get("parts_ms", {}).get(part)
    return float(value) if value is not None else None


def _cell(side: dict[str, Any], part: str) -> str:
    ms = _ms(side, part)
    if ms is None:
        return "-"
    share = side.get("parts_share", {}).get(part)
    return f"{ms:.2f} ({100 * share:.0f} %)" if share is not None else f"{ms:.2f}"


def compare(ours: dict[str, Any], peer: dict[str, Any]) -> list[str]:
    """Sentences for each part where ours takes more device time a step than the peer's."""
    out = []
    for part in PART_ORDER:
        a, b = _ms(ours, part), _ms(peer, part)
        if a is not None and a > (b or 0.0) + 0.05:
            ratio = f", {a / b:.2f}x" if b else ""
            out.append(f"- {part}: ours {a:.2f} ms against {b or 0.0:.2f} ms{ratio}")
    return out


def host_lines(row: dict[str, Any], sides: list[str]) -> list[str]:
    """The host's side per part (span ms / launching calls a step) and the launching calls by
    API, for the sides whose profile has one."""
    sides = [s for s in sides if "host" in row[s]]
    if not sides:
        return []
    host = {s: row[s]["host"] for s in sides}
    lines = ["| part (host span ms / launches a step) | " + " | ".join(LABEL[s] for s in sides)
             + " |", "|" + " --- |" * (len(sides) + 1)]  # fmt: skip
    for part in PART_ORDER:
        cells = []
        for s in sides:
            span, n = host[s]["span_ms"].get(part), host[s]["launches"].get(part)
            cells.append("-" if span is None and n is None else f"{span or 0:.2f} / {n or 0:g}")
        if any(c != "-" for c in cells):
            lines.append(f"| {part} | " + " | ".join(cells) + " |")
    lines.append("")
    for s in sides:
        apis = ", ".join(f"`{k}` {v['calls']:g} ({v['host_ms']:.2f} ms)"
                         for k, v in host[s]["launch_api"].items())  # fmt: skip
        lines.append(f"- launching calls, {LABEL[s]}: {apis or 'none'}")
    return [*lines, ""]


def render(doc: dict[str, Any]) -> str:
    settings = doc["settings"]
    lines = [
        "# One training step, kernel by kernel (`benchmarks/step_profile.py`)",
        "",
        f"{doc['date']}, {doc['device']}, torch {doc['torch']}; batch {settings['batch']}, "
        f"{settings['size']} px, fp16 autocast, {settings['classes']} classes, our loss at "
        f"{settings['capacity']} rows an image; wall: median of {settings['steps']} steps "
        f"after {settings['warmup']}; kernels: {settings['profiled']} profiled steps; "
        f"cudnn.benchmark {'on' if settings['cudnn_benchmark'] else 'off'}.",
        "",
    ]
    for row in doc["rows"]:
        sides = [s for s in LABEL if s in row]
        lines += [f"## yolo26{row['scale']} {row['task']}", ""]
        for s in sides:
            if "error" in row[s]:
                lines.append(f"- {LABEL[s]}: failed: {row[s]['error']}")
            if row[s].get("not_replayed"):  # its figures are not a replayed step's
                lines.append(
                    f"- {LABEL[s]}: **not replayed on every measured step** (eager calls by "
                    f"recorder and reason: {row[s]['not_replayed']})"
                )
        if lines[-1] != "":
            lines.append("")  # the notes above end their list before the table
        ok = [s for s in sides if "error" not in row[s]]
        if not ok:
            continue
        lines += ["| part (device ms a step) | " + " | ".join(LABEL[s] for s in ok) + " |",
                  "|" + " --- |" * (len(ok) + 1)]  # fmt: skip
        for part in PART_ORDER:
            if any(_ms(row[s], part) is not None for s in ok):
                lines.append(f"| {part} | " + " | ".join(_cell(row[s], part) for s in ok) + " |")
        for key, label in (("device_ms", "sum of kernel times"), ("busy_ms", "device busy"),
                           ("wall_ms", "wall time a step"), ("efficiency", "step efficiency"),
                           ("kernels_per_step", "kernels a step"),
                           ("graph_kernels_per_step", "of them from graph replays"),
                           ("peak_gib", "peak GiB")):  # fmt: skip
            lines.append(f"| **{label}** | " + " | ".join(str(row[s].get(key)) for s in ok) + " |")
        moves = " | ".join(f"{row[s]['moves']['per_step']} / {row[s]['moves']['ms']}" for s in ok)
        lines.append(f"| copies, casts, transposes (n / ms) | {moves} |")
        lines.append("| optimizer | " + " | ".join(
            f"{row[s].get('optimizer')} ({row[s].get('fused')})" for s in ok) + " |")  # fmt: skip
        lines.append("")
        lines += host_lines(row, ok)
        if "ours_eager" in ok and "peer" in ok:
            more = compare(row["ours_eager"], row["peer"])
            lines.append("Where our eager step spends more device time than the authors':")
            lines += more or ["- nowhere by more than 0.05 ms"]
            lines.append("")
        for s in ok:
            lines += [f"Top kernels, {LABEL[s]} (ms a step, calls a step):", ""]
            for k in row[s].get("top_kernels", []):
                lines.append(f"- {k['ms']:.3f} ms, {k['calls']}x: `{k['name'][:100]}`")
            lines.append("")
    return "\n".join(lines) + "\n"
