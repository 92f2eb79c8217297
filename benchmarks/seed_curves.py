"""Both trainers' learning curves over seeds, from a folder of `peer_detect.py` results.

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) python3 benchmarks/seed_curves.py \\
        docs/benchmarks/peer-accuracy/gpu-2026-12-06-heldout-detect-skimage-curves --out FILE.png

Reads ``seedN/peer_detect.json`` of each seed: our NMS box mAP50-95 after every epoch
(pycocotools, ``ours_arms.<arm>.epoch_log``) and the authors' (their validator's NMS curve,
``peer.epoch_log``). Draws each seed thin and the mean over seeds thick, ours in blue and
theirs in orange, and prints the mean and std of each side at every epoch.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from lucid_train.report.charts import Series, line_chart

OURS, THEIRS = (40, 90, 200), (230, 120, 20)
OURS_SEED, THEIRS_SEED = (160, 185, 235), (245, 200, 160)


def curves(
    folder: Path, arm: str = "auto"
) -> tuple[dict[int, list[float]], dict[int, list[float]]]:
    """``({seed: ours by epoch}, {seed: theirs by epoch})``, epochs 1.. in order."""
    ours, theirs = {}, {}
    for path in sorted(folder.glob("seed*/peer_detect.json")):
        seed = int(path.parent.name.removeprefix("seed"))
        doc = json.loads(path.read_text())
        ours[seed] = [e["nms_box"] for e in doc["ours_arms"][arm]["epoch_log"] if e["epoch"] > 0]
        theirs[seed] = [e["nms_box"] for e in doc["peer"]["epoch_log"] if e["epoch"] > 0]
    if not ours:
        raise SystemExit(f"{folder}: no seed*/peer_detect.json")
    return ours, theirs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--out", type=Path, required=True, help="the PNG to write")
    parser.add_argument("--arm", default="auto", help="our arm in the results (default auto)")
    args = parser.parse_args(argv)
    ours, theirs = curves(args.folder, args.arm)
    series = []
    for side, colour in ((ours, OURS_SEED), (theirs, THEIRS_SEED)):
        for values in side.values():
            series.append(Series(range(1, len(values) + 1), values, None, colour, width=1))
    for name, side, colour in (("lucid", ours, OURS), ("Ultralytics", theirs, THEIRS)):
        epochs = min(len(v) for v in side.values())
        mean = [statistics.mean(v[e] for v in side.values()) for e in range(epochs)]
        series.append(Series(range(1, epochs + 1), mean, f"{name}, mean", colour, width=3))
        spread = [statistics.stdev(v[e] for v in side.values()) for e in range(epochs)]
        print(name, "mean", [round(m, 3) for m in mean])
        print(name, "std ", [round(s, 3) for s in spread])
    chart = line_chart(
        series,
        size=(900, 560),
        title=f"NMS box mAP50-95 after each epoch, {len(ours)} seeds a side",
        xlabel="epoch",
        ylabel="mAP50-95",
        legend="upper left",
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    chart.save(args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
