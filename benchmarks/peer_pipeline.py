"""Our training pipeline against the authors' (Ultralytics 8.4.190), in distribution, for both of
our renderers and both mosaic partner pools (issue 37, rung f).

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:):tests/support YOLO_OFFLINE=1 \\
        python benchmarks/peer_pipeline.py --out docs/benchmarks

Writes ``OUT/peer-pipeline.json`` and ``OUT/peer-pipeline.md``. The sets, the samplers and the
distances are `lucid_testing.peer_pipeline`'s. Sections:

* ``small``: a set of many small objects, mosaic on and off (their ``close_mosaic`` settings):
  label and geometry statistics (the same bits for both our renderers) and per-channel pixels,
  each renderer against theirs, and our two renderers against each other;
* ``pattern``: the high-frequency energy of a binary-noise pattern after the warp (HSV off);
* ``flat``: the spread of a flat orange after HSV (all three gains) and of a flat grey (the
  value gain alone), mosaic off;
* ``pool``: distinct source images per batch with ``--data.mosaic_pool batch`` (labels only).

Our device renderer runs on CPU tensors here (`PixelBatch.render` on whatever device the batch
is), from JPEGs decoded by Pillow in both renderers: the nvJPEG decode is bounded separately
(``tests/lucid-train/test_data_render_gpu.py``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lucid_testing import peer_pipeline as pp

HERE = Path(__file__).resolve().parent


def _rows(section: str, pair: str, rows: list[pp.Row]) -> list[dict[str, Any]]:
    return [{"section": section, "pair": pair, **r.as_dict()} for r in rows]


def run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    th, s, b = pp.Thresholds(), args.size, args.batch
    small = pp.write_set(tmp / "small", "small", args.images, seed=0)
    pattern = pp.write_set(tmp / "pattern", "pattern", 64, seed=1)
    flat = pp.write_set(tmp / "flat", "flat", 32, seed=2)
    grey = pp.write_set(tmp / "grey", "grey", 32, seed=3)
    rows: list[dict[str, Any]] = []
    timing: dict[str, float] = {}

    def timed(name: str, fn: Any, *a: Any, **k: Any) -> Any:
        t0 = time.perf_counter()
        out = fn(*a, **k)
        timing[name] = round(time.perf_counter() - t0, 1)
        print(f"{name}: {timing[name]} s", flush=True)
        return out

    for mosaic in (True, False):
        section = f"small, mosaic {'on' if mosaic else 'off (close_mosaic)'}"
        key = "on" if mosaic else "off"
        t = timed(f"theirs small {key}", pp.theirs, small, args.samples, size=s, mosaic=mosaic,
                  seed=0, batch=b)  # fmt: skip
        o = timed(f"ours small {key}", pp.ours, small, args.samples, size=s, mosaic=mosaic,
                  seed=0, batch=b)  # fmt: skip
        rows += _rows(section, "ours vs theirs", pp.compare_labels(o["cpu"], t, s, th, batch=b))
        rows += _rows(section, "CPU renderer vs theirs", pp.compare_pixels(o["cpu"], t, th))
        rows += _rows(section, "device renderer vs theirs", pp.compare_pixels(o["device"], t, th))
        rows += _rows(section, "device vs CPU renderer",
                      pp.compare_pixels(o["device"], o["cpu"], th))  # fmt: skip
        if mosaic:
            batch_pool = timed("ours small on, batch pool", pp.ours, small, args.samples, size=s,
                               mosaic=True, seed=0, batch=b, pool="batch",
                               renderers=("labels",))  # fmt: skip
            rows += _rows("pool", "ours (mosaic_pool batch) vs theirs",
                          [r for r in pp.compare_labels(batch_pool["labels"], t, s, th, batch=b)
                           if r.stat.startswith("distinct")])  # fmt: skip
    n_small = args.probe_samples
    for mosaic in (True, False):
        key = "on" if mosaic else "off"
        section = f"pattern, mosaic {key}, HSV off"
        t = timed(f"theirs pattern {key}", pp.theirs, pattern, n_small, size=s, mosaic=mosaic,
                  seed=0, batch=b, hsv=False, pixels="sharpness")  # fmt: skip
        o = timed(f"ours pattern {key}", pp.ours, pattern, n_small, size=s, mosaic=mosaic,
                  seed=0, batch=b, hsv=False, pixels="sharpness")  # fmt: skip
        for name in ("cpu", "device"):
            label = "CPU" if name == "cpu" else "device"
            rows += _rows(section, f"{label} renderer vs theirs",
                          pp.compare_pixels(o[name], t, th, sharpness=True))  # fmt: skip
        o = timed(f"ours pattern {key}, load_resize", pp.ours, pattern, n_small, size=s,
                  mosaic=mosaic, seed=0, batch=b, hsv=False, pixels="sharpness",
                  load_resize=True)  # fmt: skip
        for name in ("cpu", "device"):
            label = "CPU" if name == "cpu" else "device"
            rows += _rows(section, f"{label} renderer with load_resize vs theirs",
                          pp.compare_pixels(o[name], t, th, sharpness=True))  # fmt: skip
    for root, colour in ((flat, "flat orange"), (grey, "flat grey")):
        t = timed(f"theirs {colour}", pp.theirs, root, n_small, size=s, mosaic=False, seed=0,
                  batch=b, pixels="painted")  # fmt: skip
        o = timed(f"ours {colour}", pp.ours, root, n_small, size=s, mosaic=False, seed=0,
                  batch=b, pixels="painted")  # fmt: skip
        for name in ("cpu", "device"):
            label = "CPU" if name == "cpu" else "device"
            rows += _rows(f"{colour}, mosaic off", f"{label} renderer vs theirs",
                          pp.compare_hsv(o[name], t, th, colour))  # fmt: skip
    return {"rows": rows, "seconds": timing}


def _markdown(doc: dict[str, Any]) -> str:
    lines = [
        "# Training pipeline against the authors' (Ultralytics 8.4.190), in distribution",
        "",
        f"Date {doc['date']}, commit `{doc['commit']}`, command `{doc['command']}`; "
        f"{doc['samples']} samples a side on the small-object set ({doc['images']} sources, "
        f"{doc['size']} px, batch {doc['batch']}), {doc['probe_samples']} on the pattern and "
        "flat sets; "
        f"{doc['passed']} of {len(doc['rows'])} statistics pass. Generated by "
        "`benchmarks/peer_pipeline.py` (the sets and distances: "
        "`tests/support/lucid_testing/peer_pipeline.py`). Ours: `TrainDataset` with the default "
        "`AugmentConfig` and `mosaic_pool` buffer; theirs: `build_yolo_dataset` with their default "
        "hyp, `augment=True`, read in shuffled epochs by one process. KS: the two-sample "
        "Kolmogorov-Smirnov statistic; relative: ours / theirs - 1; difference: ours - theirs.",
        "",
    ]
    section = None
    for r in doc["rows"]:
        if r["section"] != section:
            section = r["section"]
            lines += ["", f"## {section}", "",
                      "| pair | statistic | distance | value | threshold | ours | theirs | |",
                      "| --- | --- | --- | ---: | ---: | ---: | ---: | --- |"]  # fmt: skip

        def f(v: Any) -> str:
            return "" if v is None else f"{v:.4g}"

        lines.append(
            f"| {r['pair']} | {r['stat']} | {r['distance']} | {f(r['value'])} | "
            f"{r['threshold']} | {f(r['ours'])} | {f(r['theirs'])} | "
            f"{'PASS' if r['pass'] else '**FAIL**'} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for the md and json")
    parser.add_argument("--samples", type=int, default=2000, help="samples a side and mode")
    parser.add_argument("--probe-samples", type=int, default=500, help="on the pattern, flat sets")
    parser.add_argument("--images", type=int, default=200, help="source images in the set")
    parser.add_argument("--size", type=int, default=320)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args(argv)
    os.environ.setdefault("YOLO_OFFLINE", "1")
    with tempfile.TemporaryDirectory() as tmp:
        result = run(args, Path(tmp))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=HERE).stdout.strip()  # fmt: skip
    import ultralytics

    doc = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit,
        "command": " ".join(["python", "benchmarks/peer_pipeline.py", *(argv or sys.argv[1:])]),
        "samples": args.samples, "probe_samples": args.probe_samples, "images": args.images,
        "size": args.size, "batch": args.batch,
        "ultralytics": ultralytics.__version__, "python": platform.python_version(),
        "passed": sum(r["pass"] for r in result["rows"]), **result,
    }  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "peer-pipeline.json").write_text(json.dumps(doc, indent=1) + "\n")
    (args.out / "peer-pipeline.md").write_text(_markdown(doc))
    print(_markdown(doc))


if __name__ == "__main__":
    main()
