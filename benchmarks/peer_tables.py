"""A finished comparison's markdown table, its ``peer-accuracy.json`` rows and its verdict."""

from __future__ import annotations

from typing import Any

from peer_common import CONF_NOTE, PATHS, _metric_prefixes


def _fmt(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, float) else "n/a"


def _kinds(task: str) -> list[str]:
    return list(_metric_prefixes(task))


def _key(kind: str, source: str) -> str:
    return ("" if kind == "box" else f"{kind}_") + f"{source}_mAP50-95"


def table(report: dict[str, Any]) -> str:
    """The markdown table of every side and both decode paths."""
    s, d = report["settings"], report["data"]
    lines = [
        f"yolo26n {d['task']}, {d['set']}: {d['train_images']} train / {d['val_images']} val "
        f"images, {d['val_instances']} val instances; imgsz {s['imgsz']}, batch {s['batch']}, "
        f"{s['epochs']} epochs, device {s['device']}; last-epoch EMA weights.",
        "",
        "| side | decode path | metric | mAP50-95 (pycocotools) | mAP50-95 (Ultralytics metric) "
        "| side wall s |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    sides = [(f"lucid, accumulate {a}", r) for a, r in report.get("ours_arms", {}).items()]
    for a, r in report.get("ours_arms", {}).items():
        if "e2e" in r.get("ultralytics_validation", {}):
            sides.append(
                (
                    f"lucid weights (accumulate {a}), Ultralytics validation",
                    r["ultralytics_validation"],
                )
            )
    if "peer" in report:
        ver = report["peer"].get("versions", {}).get("ultralytics", "")
        sides.append((f"Ultralytics {ver}".strip(), report["peer"]))
        if "e2e_rect" in report["peer"]:
            rect = {p: report["peer"][f"{p}_rect"] for p in PATHS if f"{p}_rect" in report["peer"]}
            sides.append(
                (f"Ultralytics {ver}, its rectangular val batches", {**rect, "wall_s": ""})
            )
        if "e2e" in report["peer"].get("lucid_validation", {}):
            sides.append(
                (f"Ultralytics {ver} weights, lucid validation", report["peer"]["lucid_validation"])
            )
    for name, r in sides:
        for path in PATHS:
            p = r.get(path, {})
            for kind in _kinds(d["task"]):
                lines.append(
                    f"| {name} | {path} ({CONF_NOTE[path]}) | {kind} "
                    f"| {_fmt(p.get(_key(kind, 'pycocotools')))} "
                    f"| {_fmt(p.get(_key(kind, 'ultralytics')))} | {r.get('wall_s', 'n/a')} |"
                )
    peer = report.get("peer", {})
    if "decode_paths_checked" in peer:
        ok = "yes" if peer["decode_paths_checked"] else "NO"
        lines += ["", f"Ultralytics validator ran end2end for e2e and not for nms: {ok}."]
    if "verdict" in report:
        lines += ["", report["verdict"]]
    return "\n".join(lines)


def accuracy_rows(report: dict[str, Any], arm: str) -> list[dict[str, Any]]:
    """``peer-accuracy.json`` rows: one per decode path and metric, ours (arm ``arm``) beside
    Ultralytics, both scored by one scorer (pycocotools; obb: our DOTA-protocol evaluator, whose
    mAP50 is the DOTA-style row)."""
    d, rows = report["data"], []
    ours, peer = report.get("ours_arms", {}).get(arm, {}), report.get("peer", {})
    lucid_val = peer.get("lucid_validation") or {}
    metrics = [(kind, "mAP50-95") for kind in _kinds(d["task"])]
    if d["task"] == "obb":
        metrics.append(("box", "mAP50"))
    for path in PATHS:
        for kind, stat in metrics:
            key = _key(kind, "pycocotools").replace("mAP50-95", stat)
            name = {"box": "rotated " if d["task"] == "obb" else ""}.get(kind, f"{kind} ")
            rows.append(
                {
                    "task": d["task"],
                    "set": d["set"],
                    "path": path,
                    "metric": f"{name}{stat}",
                    "lucid": ours.get(path, {}).get(key),
                    "ultralytics": peer.get(path, {}).get(key),
                    "ultralytics_lucid_validation": lucid_val.get(path, {}).get(key),
                    "ultralytics_rect_batches": peer.get(f"{path}_rect", {}).get(key),
                    "lucid_ultralytics_validation": ours.get("ultralytics_validation", {})
                    .get(path, {})
                    .get(key),
                    "lucid_accumulate": arm,
                    "seed": report["settings"].get("seed", 0),
                    "epochs": report["settings"].get("epochs"),
                    **_sizes(ours, peer, path, key, stat),
                    **_time_to_accuracy(ours, peer, path, kind, key, stat),
                }
            )
    return rows


def _sizes(
    ours: dict[str, Any], peer: dict[str, Any], path: str, key: str, stat: str
) -> dict[str, Any]:
    """Both sides' AP50-95 of pycocotools' size buckets, where the run has them."""
    out: dict[str, Any] = {}
    if stat != "mAP50-95":
        return out
    for size in ("small", "medium", "large"):
        k = key.replace("mAP50-95", f"AP_{size}")
        a, b = ours.get(path, {}).get(k), peer.get(path, {}).get(k)
        if a is not None or b is not None:
            out[f"lucid_AP_{size}"], out[f"ultralytics_AP_{size}"] = a, b
    return out


def _first_at(log: list[dict[str, Any]], column: str, target: float) -> float | None:
    """Seconds from launch to the first validated epoch of ``log`` at or above ``target``."""
    for entry in log:
        value = entry.get(column)
        if value is not None and value >= target - 1e-12 and entry.get("t_s") is not None:
            return float(entry["t_s"])
    return None


def _time_to_accuracy(
    ours: dict[str, Any], peer: dict[str, Any], path: str, kind: str, key: str, stat: str
) -> dict[str, Any]:
    """Wall seconds from each side's launch to the first epoch whose validation reaches the
    peer's final mAP50-95: ours on its own per-epoch curve (pycocotools) against the peer's final
    score by the same scorer; the peer on its per-epoch curve (its validator, NMS: the path its
    training validates) against that curve's last epoch. The peer has no e2e curve."""
    if stat != "mAP50-95" or not ours.get("epoch_log"):
        return {}
    column = f"{path}_{kind}"
    target = peer.get(path, {}).get(key)
    out: dict[str, Any] = {
        "lucid_tta_s": None if target is None else _first_at(ours["epoch_log"], column, target)
    }
    peer_log = [e for e in peer.get("epoch_log", []) if e.get("epoch", 0) > 0]
    if path == "nms" and peer_log and peer_log[-1].get(column) is not None:
        out["ultralytics_tta_s"] = _first_at(peer_log, column, peer_log[-1][column])
    out["lucid_wall_s"], out["ultralytics_wall_s"] = ours.get("wall_s"), peer.get("wall_s")
    return out


def verdict(report: dict[str, Any], arm: str, bar: float | None = None) -> str | None:
    """Ours (arm ``arm``) >= Ultralytics - ``bar`` on every decode path and metric; the issue's
    bars: 0.01 for detect and segment, 0.02 for pose and obb."""
    if bar is None:
        bar = 0.02 if report["data"]["task"] in ("pose", "obb") else 0.01
    parts, ok = [], True
    for row in accuracy_rows(report, arm):
        a, b = row["lucid"], row["ultralytics"]
        if a is None or b is None:
            return None
        ok &= a - b >= -bar
        parts.append(f"{row['path']} {row['metric']}: ours - Ultralytics = {a - b:+.4f}")
    head = "PASS" if ok else "FAIL"
    return f"{head} (ours, accumulate {arm}, >= Ultralytics - {bar}): " + "; ".join(parts)
