"""lucid-capture on other people's models: bitwise parity with eager, reason codes and speed.

    CUBLAS_WORKSPACE_CONFIG=:4096:8 PYTHONPATH=$(ls -d packages/*/src | paste -sd:):tests/support \\
        python3 benchmarks/capture_zoo.py --out docs/benchmarks

For every model of ``lucid_testing.zoo.ZOO`` (torchvision, timm, ``torch.nn``), precision
(32-true with TF32 off, 16-mixed with GradScaler, bf16-mixed) and accumulation (1, 2): a plain
PyTorch loop of six batches, the last one partial, trained eager and then through the recorders
from the same weights and data. Weights, gradients, optimizer state, buffers, losses and the
GradScaler's scale are compared bit for bit before every optimizer step and at the end.

A case's outcome is ``replayed, bitwise``; ``eager (<reason>), bitwise`` where the recorder
refused the model and said why; or, where the bits differ, a second eager run tells whether eager
itself is reproducible (``eager not reproducible``) or the capture diverged (``DIVERGED``: a
lucid-capture bug). Then, for every model and precision whose accumulation-1 case replayed
bitwise, the step time eager and replayed at batch 16 and 64 (median of ``--steps`` steps, CUDA
events), the first replayed step's wall time (recording: warm-up, capture, first backward
recording) and each arm's peak memory. ``capture-zoo.json`` and ``capture-zoo.md`` are rewritten
after every case, so a run cut short keeps what it measured. Each model's parity cases run in a
process of their own: a model that crashes the interpreter (a segfault in a kernel) leaves its
remaining cases as ``crashed (<signal>)`` rows, with the Python stack faulthandler printed, and
the zoo goes on.
"""

from __future__ import annotations

import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # before CUDA starts: cuBLAS reads it

import argparse
import contextlib
import faulthandler
import gc
import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

import torch
from step_timing import median_step_ms

from lucid_capture import CaptureWarning, Reason
from lucid_testing.zoo import (
    ZOO,
    ZooModel,
    autocast,
    differences,
    objective,
    to_device,
    train,
    wrap,
)

PRECISIONS = ("32-true", "16-mixed", "bf16-mixed")
ACCUMULATIONS = (1, 2)
SPEED_BATCHES = (16, 64)


def outcome(eager: dict[str, int], replays: int, diffs: list[str], control: list[str]) -> str:
    reasons = ", ".join(sorted(r for r in eager if r != Reason.SHAPE.value))
    if not diffs:
        return "replayed, bitwise" if replays and not reasons else f"eager ({reasons}), bitwise"
    if control:
        return "eager not reproducible"
    return "DIVERGED" if replays else f"eager ({reasons}), not bitwise"


def parity_case(
    entry: ZooModel, precision: str, accumulate: int, device: str = "cuda"
) -> dict[str, Any]:
    start = time.perf_counter()
    row: dict[str, Any] = {
        "model": entry.name,
        "library": entry.library,
        "precision": precision,
        "accumulate": accumulate,
        "note": entry.note,
    }
    math_attention = False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CaptureWarning)
        case = {"precision": precision, "accumulate": accumulate, "device": device}
        eager = train(entry, capture=False, **case)  # type: ignore[arg-type]
        replay = train(entry, capture=True, **case)  # type: ignore[arg-type]
        diffs = differences(eager, replay)
        control: list[str] = []
        if diffs:  # is eager itself reproducible here?
            again = train(entry, capture=False, **case)  # type: ignore[arg-type]
            control = differences(eager, again)
            if control:  # a fused attention backward may add in any order: try the math kernel
                math_attention = True
                kw = case | {"math_attention": True}
                eager = train(entry, capture=False, **kw)  # type: ignore[arg-type]
                replay = train(entry, capture=True, **kw)  # type: ignore[arg-type]
                diffs = differences(eager, replay)
                control = []
                if diffs:
                    control = differences(eager, train(entry, capture=False, **kw))  # type: ignore[arg-type]
    row.update(
        outcome=outcome(replay.eager, replay.replays, diffs, control),
        bitwise=not diffs,
        replays=replay.replays,
        eager_calls=replay.eager,
        summaries=replay.summaries,
        differences=diffs[:8],
        eager_differences=control[:8],
        math_attention=math_attention,
        expected=entry.expect.value if entry.expect else "replay",
        warnings=sorted({str(w.message)[:300] for w in caught if w.category is CaptureWarning}),
        nondeterministic_ops=sorted(
            {str(w.message)[:160] for w in caught if "deterministic" in str(w.message)}
        ),
        seconds=round(time.perf_counter() - start, 2),
    )
    expected_reason = entry.expect.value if entry.expect else None
    got = {r for r in replay.eager if r != Reason.SHAPE.value}
    row["as_expected"] = (got == {expected_reason}) if expected_reason else (not got)
    return row


def speed_cases(entry: ZooModel, precision: str, steps: int) -> list[dict[str, Any]]:
    """Eager and replayed step time at each of ``SPEED_BATCHES``, on one model and optimizer
    (the state a timed step trains into does not change its time): eager, then a fresh
    recorder for the replayed arm, released before the next batch size."""
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = entry.build(entry.speed_size).cuda().train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    scaler = torch.amp.GradScaler("cuda") if precision == "16-mixed" else None
    results = []
    for batch in SPEED_BATCHES:
        g = torch.Generator().manual_seed(0)
        data = to_device(entry.batch(batch, entry.speed_size, g), "cuda")
        arms: dict[bool, dict[str, Any]] = {}
        for capture in (False, True):
            wrapped = wrap(entry, model, capture)

            def step(wrapped: Any = wrapped, data: Any = data) -> None:
                with autocast(precision):
                    loss = objective(wrapped, data)
                (scaler.scale(loss) if scaler is not None else loss).backward()
                if scaler is not None:
                    scaler.step(optimizer)
                    scaler.update()
                else:
                    optimizer.step()
                optimizer.zero_grad(set_to_none=True)

            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            begin = time.perf_counter()
            step()  # the recording, in the replayed arm
            torch.cuda.synchronize()
            first_s = time.perf_counter() - begin
            for _ in range(2):
                step()
            arms[capture] = {
                "ms": median_step_ms(step, steps),
                "first_step_s": first_s,
                "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
                "replays": sum(r.stats.replays for r in wrapped.recorders),
                "eager_calls": sum(r.stats.eager_calls for r in wrapped.recorders),
            }
            for recorder in wrapped.recorders:
                recorder.release()
            del wrapped, step
            gc.collect()
        eager, replay = arms[False], arms[True]
        results.append(
            {
                "model": entry.name,
                "precision": precision,
                "batch": batch,
                "input": entry.speed_size,
                "eager_ms": eager["ms"],
                "replay_ms": replay["ms"],
                "speedup": eager["ms"] / replay["ms"],
                "recording_s": replay["first_step_s"],
                "eager_first_step_s": eager["first_step_s"],
                "eager_peak_gib": eager["peak_gib"],
                "replay_peak_gib": replay["peak_gib"],
                "all_replayed": replay["eager_calls"] == 0 and replay["replays"] > 0,
            }
        )
        del data
    return results  # the caller frees the model (gc, empty_cache)


# -- the report ------------------------------------------------------------------------------


def _reasons(calls: dict[str, int]) -> str:
    return ", ".join(f"{k}: {v}" for k, v in sorted(calls.items())) or "none"


def _speed_cell(speeds: list[dict[str, Any]], model: str, precision: str, batch: int) -> str:
    for s in speeds:
        if (s["model"], s["precision"], s["batch"]) == (model, precision, batch):
            return f"{s['eager_ms']:.1f} / {s['replay_ms']:.1f} ({s['speedup']:.2f}x)"
    return "-"


def render(meta: dict[str, Any], rows: list[dict[str, Any]], speeds: list[dict[str, Any]]) -> str:
    models = {r["model"] for r in rows}
    libraries = sorted({r["library"] for r in rows})
    bitwise = sum(r["bitwise"] for r in rows)
    diverged = [r for r in rows if r["outcome"] == "DIVERGED"]
    lines = [
        "# lucid-capture on other people's models",
        "",
        f"{len(models)} models from {', '.join(libraries)}; {len(rows)} cases (model x precision x"
        f" accumulation), {bitwise} bitwise equal to eager, {len(diverged)} diverged. "
        f"Measured {meta['date']} on {meta['device']}, torch {meta['torch']}, torchvision "
        f"{meta['torchvision']}, timm {meta['timm']}, commit `{meta['commit']}`"
        + (" (stopped at the deadline: some cases missing)" if meta.get("cut_short") else "")
        + ".",
        "",
        "Command (repo root, GPU machine):",
        "",
        f"    {meta['command']}",
        "",
        "Each case trains six batches (five full, the last partial) eager, then through",
        "`NetworkRecorder` (and `LossRecorder` for the BERT loss), from the same weights and data,",
        "with AdamW; weights, gradients, optimizer state, buffers, losses and the GradScaler's",
        "scale are compared bit for bit before every optimizer step and at the end. TF32 off,",
        "deterministic cuDNN and `torch.use_deterministic_algorithms(True, warn_only=True)` (eager",
        "must repeat itself before a replay can be held to its bits).",
        "",
        "**Outcome**: `replayed, bitwise` — every full batch replayed, the partial last one ran",
        "eager (`shape`), and the state equals eager's; `eager (<code>), bitwise` — the recorder",
        "refused the model with that reason code and the fit is eager's; `DIVERGED` would be a",
        "lucid-capture bug. **Speed** (batch 16 and 64, input size in the speed table): eager /",
        "replayed step in ms and the speed-up, for each precision's rows (measured once per model",
        "and precision, at accumulation 1: accumulation does not change the recorded step).",
        "",
        "| model | library | precision | accum | outcome | eager calls (reason: count) "
        "| b16 eager / replay ms | b64 eager / replay ms | notes |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        note = r["note"] + ("; math attention" if r.get("math_attention") else "")
        if r.get("error"):
            note += f"; raised: {r['error']}"
        if r["differences"]:
            note += f"; differs: {', '.join(r['differences'][:3])}"
        lines.append(
            f"| {r['model']} | {r['library']} | {r['precision']} | {r['accumulate']} | "
            f"{r['outcome']} | {_reasons(r['eager_calls'])} | "
            f"{_speed_cell(speeds, r['model'], r['precision'], 16)} | "
            f"{_speed_cell(speeds, r['model'], r['precision'], 64)} | {note} |"
        )
    if speeds:
        lines += [
            "",
            "## Step time, recording time and memory",
            "",
            "One step: forward under autocast, loss, (scaled) backward, AdamW step, `zero_grad`; "
            f"median of {meta['steps']} steps after three untimed ones (the first records). "
            "Both arms train the same model in turn. *Recording* is the first replayed step's wall "
            "time (three warm-up passes, the forward capture, the first "
            "backward's capture); *peak* is `max_memory_allocated` over the arm, weights and "
            "optimizer state included. TF32 off, cuDNN defaults.",
            "",
            "| model | precision | batch | input | eager ms | replay ms | speed-up | recording s "
            "| eager peak GiB | replay peak GiB |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for s in speeds:
            lines.append(
                f"| {s['model']} | {s['precision']} | {s['batch']} | {s['input']} | "
                f"{s['eager_ms']:.2f} | {s['replay_ms']:.2f} | {s['speedup']:.2f}x | "
                f"{s['recording_s']:.2f} | {s['eager_peak_gib']:.2f} | {s['replay_peak_gib']:.2f} |"
            )
    if meta.get("notes"):
        lines += ["", "## What this run did not finish", "", meta["notes"].strip()]
    lines += ["", "## Reason codes met", ""]
    met = sorted({k for r in rows for k in r["eager_calls"]})
    for code in met:
        reason = Reason(code)
        fix = f" Fix: {reason.fix}." if reason.fix else ""
        lines.append(f"- `{code}`: {reason.explanation}.{fix}")
    return "\n".join(lines) + "\n"


def write(
    out: Path, meta: dict[str, Any], rows: list[dict[str, Any]], speeds: list[dict[str, Any]]
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    payload = {"meta": meta, "cases": rows, "speed": speeds}
    (out / "capture-zoo.json").write_text(json.dumps(payload, indent=1, default=str) + "\n")
    (out / "capture-zoo.md").write_text(render(meta, rows, speeds))


def parity_in_child(name: str, args: argparse.Namespace, seconds: float) -> list[dict[str, Any]]:
    """``name``'s parity cases in a child process. A crash costs only the case it happened in:
    that case becomes a ``crashed (<signal>)`` row with the child's fatal-error stack, and the
    cases after it run in a fresh child."""
    entry, start = ZOO[name], time.perf_counter()
    todo = [(p, a) for p in PRECISIONS for a in ACCUMULATIONS]
    rows: list[dict[str, Any]] = []
    while todo:
        left = seconds - (time.perf_counter() - start)
        with tempfile.TemporaryDirectory() as out:
            command = [sys.executable, __file__, "--phase", "parity", "--in-process"]
            command += ["--models", name, "--out", out, "--commit", args.commit]
            command += ["--deadline", str(max(left, 0.0)), "--device", args.device]
            command += ["--cases", *(f"{p}/{a}" for p, a in todo)]
            child = subprocess.run(command, stderr=subprocess.PIPE, text=True, check=False)
            found = Path(out) / "capture-zoo.json"
            ran = json.loads(found.read_text())["cases"] if found.exists() else []
        rows += ran
        done = {(r["precision"], r["accumulate"]) for r in ran}
        todo = [case for case in todo if case not in done]
        if child.returncode == 0 or not todo:
            break
        code = child.returncode
        why = f"crashed ({signal.Signals(-code).name})" if code < 0 else f"exited {code}"
        precision, accumulate = todo.pop(0)  # the case the child was in when it died
        rows.append(
            {
                "model": name, "library": entry.library, "precision": precision,
                "accumulate": accumulate, "note": entry.note, "outcome": why, "bitwise": False,
                "replays": 0, "eager_calls": {}, "differences": [],
                "traceback": child.stderr[child.stderr.find("Fatal Python error") :][:3000],
            }
        )  # fmt: skip
        print(f"{name} {precision} acc{accumulate}: {why}", flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for capture-zoo.md/json")
    parser.add_argument("--models", nargs="+", default=list(ZOO), choices=list(ZOO))
    parser.add_argument("--steps", type=int, default=10, help="timed steps per speed arm")
    parser.add_argument(
        "--deadline", type=float, default=1e9, help="seconds; stop starting cases after"
    )
    parser.add_argument("--commit", default="unknown")
    parser.add_argument(
        "--phase",
        choices=["both", "parity", "speed", "render"],
        default="both",
        help="speed: time the bitwise rows of --models in the capture-zoo.json already in "
        "--out (the others keep their times); "
        "render: rewrite capture-zoo.md from it",
    )
    parser.add_argument(
        "--notes", type=Path, help="render: text for 'what this run did not finish'"
    )
    parser.add_argument(
        "--in-process", action="store_true", help="parity without a child per model"
    )
    parser.add_argument(
        "--device", default="cuda", help="cpu: a dry run of the harness (all eager)"
    )
    parser.add_argument(
        "--cases", nargs="+", help="with --in-process: only these PRECISION/ACCUMULATION cases"
    )
    args = parser.parse_args()
    faulthandler.enable()  # a crash in a kernel prints the Python stack that reached it
    if args.phase == "render":
        done = json.loads((args.out / "capture-zoo.json").read_text())
        meta = done["meta"] | ({"notes": args.notes.read_text()} if args.notes else {})
        (args.out / "capture-zoo.md").write_text(render(meta, done["cases"], done["speed"]))
        return
    start = time.perf_counter()
    import timm
    import torchvision

    meta: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "device": torch.cuda.get_device_name() if args.device == "cuda" else args.device,
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "timm": timm.__version__,
        "commit": args.commit,
        "steps": args.steps,
        "command": "CUBLAS_WORKSPACE_CONFIG=:4096:8 PYTHONPATH=$(ls -d packages/*/src | paste -sd:)"
        ":tests/support python3 benchmarks/capture_zoo.py --out docs/benchmarks",
    }
    rows: list[dict[str, Any]] = []
    speeds: list[dict[str, Any]] = []
    timed = set(args.models)
    if args.phase == "speed":
        # Times the bitwise rows of --models; the other models' step times are kept as they were.
        done = json.loads((args.out / "capture-zoo.json").read_text())
        rows, meta = done["cases"], done["meta"] | {"steps": args.steps}
        speeds = [s for s in done["speed"] if s["model"] not in timed]
        args.models = []

    def late() -> bool:
        if time.perf_counter() - start > args.deadline:
            meta["cut_short"] = True
            return True
        return False

    for name in args.models if not args.in_process else []:
        if late():
            break
        rows += parity_in_child(name, args, args.deadline - (time.perf_counter() - start))
        write(args.out, meta, rows, speeds)
    for name in args.models if args.in_process else []:
        entry = ZOO[name]
        for precision in PRECISIONS:
            for accumulate in ACCUMULATIONS:
                if late():
                    break
                if args.cases and f"{precision}/{accumulate}" not in args.cases:
                    continue
                try:
                    row = parity_case(entry, precision, accumulate, args.device)
                except Exception as error:  # a harness error is a row, not the end of the run
                    row = {
                        "model": name, "library": entry.library, "precision": precision,
                        "accumulate": accumulate, "note": entry.note, "outcome": "harness error",
                        "bitwise": False, "replays": 0, "eager_calls": {}, "differences": [],
                        "error": f"{type(error).__name__}: {error}"[:300],
                        "traceback": traceback.format_exc()[-2000:],
                    }  # fmt: skip
                rows.append(row)
                said = f"{row['outcome']} {row['eager_calls']} {row.get('differences', [])[:3]}"
                case = f"{name} {precision} acc{accumulate}"
                print(f"[{time.perf_counter() - start:6.1f}s] {case}: {said}", flush=True)
                write(args.out, meta, rows, speeds)
                torch.cuda.empty_cache()
    if args.phase != "parity":
        # One precision for every model first, so that a run cut short still covers them all.
        order = {p: i for i, p in enumerate(("bf16-mixed", "16-mixed", "32-true"))}
        for row in sorted(rows, key=lambda r: order.get(r["precision"], 9)):
            entry = ZOO[row["model"]]
            if not (
                entry.speed
                and row["model"] in timed
                and row["accumulate"] == 1
                and row["outcome"] == "replayed, bitwise"
            ):
                continue
            if late():
                break
            try:
                measured = speed_cases(entry, row["precision"], args.steps)
            except Exception as error:
                print(f"speed {entry.name} {row['precision']}: {error}", flush=True)
                with contextlib.suppress(Exception):
                    torch.cuda.empty_cache()
                continue
            gc.collect()
            torch.cuda.empty_cache()
            speeds += measured
            for speed in measured:
                said = f"{speed['eager_ms']:.1f} -> {speed['replay_ms']:.1f} ms"
                case = f"{entry.name} {speed['precision']} b{speed['batch']}"
                print(f"[{time.perf_counter() - start:6.1f}s] speed {case}: {said}", flush=True)
            write(args.out, meta, rows, speeds)
    if args.phase != "speed":  # a speed phase keeps the parity run's duration
        meta["seconds"] = round(time.perf_counter() - start, 1)
    meta["speedup_median"] = statistics.median([s["speedup"] for s in speeds]) if speeds else None
    write(args.out, meta, rows, speeds)


if __name__ == "__main__":
    main()
