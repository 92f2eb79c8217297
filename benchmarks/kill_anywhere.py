"""Kill a small CPU ``lucid fit`` anywhere with SIGKILL, resume it, and compare bit for bit.

    python benchmarks/kill_anywhere.py [--points 24] [--seed 0] [--out FILE.md]

A benchmark, not a CI test (it runs one uninterrupted fit and then two or more fits per point).
The fit is `tests/e2e/test_killed_fit_resumes.py`'s: yolo26n detect, 3 epochs of 10 batches of 4
synthetic 64-px images, one validation batch per epoch, ``--trainer.deterministic``, loader in
the process. Each point starts a fresh fit in its own folder and SIGKILLs it at one of:

* ``train E P``: inside the read of training sample ``P`` of epoch ``E`` (the run is held there
  by `lucid_testing.recorded_fit`, so the point lands whatever the machine's load); positions
  0-3 are the epoch's first batch, 36-39 its last;
* ``val N``: inside the ``N``-th validation sample read (`lucid_testing.kill_points`);
* ``write K``: the training process, while the ``K``-th checkpoint file of the run is being
  written (its temporary file is on the disk: the writer process has it open);
* ``writer K``: the writer process itself (`lucid_train.checkpoint_process`), at the same moment;
  the fit then goes on or ends as it does, and is resumed when it did not finish;
* ``time T``: the training process, ``T`` seconds after it started.

A killed fit is resumed with ``--ckpt_path .../last.ckpt`` (started again when it left none),
after its writer process has ended, until a run exits 0. Then the final last.ckpt (every entry
but Lightning's per-process loop counters and the callbacks' file paths, as the e2e test) and
metrics.csv (all but the ``time/`` columns) are compared with the uninterrupted run's, bitwise.
The table goes to ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests" / "support")]

import torch  # noqa: E402

from lucid_testing.recorded_fit import held  # noqa: E402
from lucid_testing.trainer_fits import flat_state, same  # noqa: E402

EPOCHS, BATCHES, BATCH = 3, 10, 4
IMAGES = BATCHES * BATCH
VAL_READS = BATCH  # one validation batch per epoch


def fit_args(data: Path) -> list[str]:
    return [
        "fit", "--data.root", str(data), "--data.img_size", "64", "--data.batch_size",
        str(BATCH), "--data.num_workers", "0", "--trainer.max_epochs", str(EPOCHS),
        "--trainer.limit_val_batches", "1", "--trainer.accelerator", "cpu",
        "--trainer.deterministic",
    ]  # fmt: skip


@dataclass
class Point:
    kind: str  # train | val | write | writer | time
    where: tuple[float, ...]

    @property
    def label(self) -> str:
        return f"{self.kind} " + " ".join(f"{v:g}" for v in self.where)


@dataclass
class Outcome:
    point: Point
    landed: str
    runs: int
    weights_equal: bool
    metrics_equal: bool
    differ: str
    wall_s: float


def _env(extra: dict[str, str]) -> dict[str, str]:
    support = str(ROOT / "tests" / "support")
    path = os.pathsep.join(p for p in (support, os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}
    for key in ("LUCID_TEST_HOLD_AT", "LUCID_TEST_HOLD_VAL"):
        env.pop(key, None)
    return {**env, **extra}


def _start(cwd: Path, log: Path, args: list[str], extra: dict[str, str]) -> subprocess.Popen[str]:
    cwd.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "lucid_testing.kill_points", str(log), *args]
    return subprocess.Popen(
        cmd, cwd=cwd, env=_env(extra), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip


def _children(pid: int) -> list[int]:
    out: list[int] = []
    task_dir = Path(f"/proc/{pid}/task")
    for task in task_dir.glob("*") if task_dir.is_dir() else []:
        with contextlib.suppress(OSError):
            out += [int(c) for c in (task / "children").read_text().split()]
    return out


def _writer_pids(pid: int) -> list[int]:
    found = []
    for child in _children(pid):
        try:
            cmd = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"lucid_train.checkpoint_process" in cmd:
            found.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1]
    except OSError:
        return False
    return state != "Z"


def _temporaries(folder: Path) -> set[str]:
    try:
        return {e.name for e in os.scandir(folder) if ".tmp" in e.name}
    except OSError:
        return set()


def _kill_at(point: Point, proc: subprocess.Popen[str], cwd: Path, log: Path) -> str:
    """Wait for the point, SIGKILL there; what was killed and when, in words."""
    start = time.monotonic()
    ckpts = cwd / "runs" / "detect" / "train" / "checkpoints"
    seen: set[str] = set()
    writers: list[int] = []
    while proc.poll() is None:
        if time.monotonic() - start > 1200:
            proc.kill()
            return "never reached (timeout)"
        writers = _writer_pids(proc.pid) or writers
        if point.kind in ("train", "val") and held(log).exists():
            proc.kill()
            return f"held read, {time.monotonic() - start:.1f} s"
        if point.kind == "time" and time.monotonic() - start >= point.where[0]:
            proc.kill()
            return f"{time.monotonic() - start:.1f} s"
        if point.kind in ("write", "writer"):
            now = _temporaries(ckpts)
            seen |= now
            if now and len(seen) >= point.where[0]:
                victims = _writer_pids(proc.pid) if point.kind == "writer" else [proc.pid]
                for pid in victims:
                    os.kill(pid, signal.SIGKILL)
                name = sorted(now)[0].split(".tmp")[0].lstrip(".")
                who = "writer process" if point.kind == "writer" else "training process"
                file = name.rsplit(".", 1)[0]
                return f"{who} while writing {file}, {time.monotonic() - start:.1f} s"
        time.sleep(0.0005 if point.kind in ("write", "writer") else 0.01)
    return f"ended first (exit {proc.returncode})"


def _wait_gone(pids: list[int], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return (lines[-1][:160] if lines else "").replace("|", "/")


def _checkpoint(path: Path) -> dict[str, Any]:
    ckpt: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    return ckpt


def _state(path: Path) -> dict[str, Any]:
    flat = flat_state(_checkpoint(path))
    return {
        k: v for k, v in flat.items() if ".current." not in k and not k.startswith("callbacks.")
    }


def _metric_rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics.csv").open(newline="") as f:
        return [
            {k: v for k, v in r.items() if not k.startswith("time/")} for r in csv.DictReader(f)
        ]


def run_point(point: Point, base: Path, data: Path, straight: Path) -> Outcome:
    t0 = time.monotonic()
    cwd = base / point.label.replace(" ", "_").replace(".", "p")
    run_dir = cwd / "runs" / "detect" / "train"
    last = run_dir / "checkpoints" / "last.ckpt"
    args = fit_args(data)
    extra: dict[str, str] = {}
    if point.kind == "train":
        extra["LUCID_TEST_HOLD_AT"] = f"{int(point.where[0])} {int(point.where[1])}"
    if point.kind == "val":
        extra["LUCID_TEST_HOLD_VAL"] = str(int(point.where[0]))
    log = cwd.parent / f"{cwd.name}.0.order"
    proc = _start(cwd, log, args, extra)
    landed = _kill_at(point, proc, cwd, log)
    writers = _writer_pids(proc.pid)
    _, err = proc.communicate()
    rc = proc.returncode
    if rc > 0:  # the fit ended itself (a writer killed under it): its last line
        landed += f"; exit {rc}: {_last_line(err)}"
    runs = 1
    _wait_gone(writers)
    while rc != 0 and runs < 6:
        if not last.exists():
            shutil.rmtree(run_dir, ignore_errors=True)
            resume = args
        else:
            resume = [*args, "--ckpt_path", str(last)]
            landed += f"; resumed from epoch {int(_checkpoint(last)['epoch'])}"
        again = _start(cwd, cwd.parent / f"{cwd.name}.{runs}.order", resume, {})
        _, err = again.communicate()
        rc, runs = again.returncode, runs + 1
        if rc != 0:
            landed += f"; run {runs} exit {rc}: {_last_line(err)}"
    if rc != 0:
        return Outcome(point, landed, runs, False, False, "never finished", time.monotonic() - t0)
    a, b = _state(straight / "checkpoints" / "last.ckpt"), _state(last)
    differ = sorted(
        k for k in a.keys() | b.keys() if k not in a or k not in b or not same(a[k], b[k])
    )
    metrics_equal = _metric_rows(straight) == _metric_rows(run_dir)
    shutil.rmtree(cwd, ignore_errors=True)
    return Outcome(
        point, landed, runs, not differ, metrics_equal, ", ".join(differ[:4]), time.monotonic() - t0
    )


def points(count: int, seed: int, straight_s: float) -> list[Point]:
    rng = random.Random(seed)
    fixed = [
        Point("train", (0, rng.randrange(0, BATCH))),  # first batch of the first epoch
        Point("train", (1, rng.randrange(0, BATCH))),
        Point("train", (2, rng.randrange(0, BATCH))),
        Point("train", (0, rng.randrange(IMAGES - BATCH, IMAGES))),  # last batch
        Point("train", (1, rng.randrange(IMAGES - BATCH, IMAGES))),
        Point("train", (2, rng.randrange(IMAGES - BATCH, IMAGES))),
        Point("val", (rng.randrange(1, VAL_READS + 1),)),  # epoch 0's validation
        Point("val", (VAL_READS + rng.randrange(1, VAL_READS + 1),)),  # epoch 1's
        Point("val", (2 * VAL_READS + rng.randrange(1, VAL_READS + 1),)),  # epoch 2's
        Point("write", (1,)),
        Point("write", (2,)),
        Point("write", (rng.randrange(3, 6),)),
        Point("writer", (1,)),
        Point("writer", (2,)),
        Point("writer", (rng.randrange(3, 6),)),
    ]
    out = list(fixed)
    while len(out) < count:
        if len(out) % 2:
            out.append(Point("time", (round(rng.uniform(3, straight_s * 0.95), 1),)))
        else:
            epoch, pos = rng.randrange(EPOCHS), rng.randrange(BATCH, IMAGES - BATCH)
            out.append(Point("train", (epoch, pos)))
    return out


def _table(outcomes: list[Outcome], straight_s: float, seed: int) -> str:
    ok = sum(o.weights_equal and o.metrics_equal for o in outcomes)
    lines = [
        "# Kill anywhere, resume bitwise (CPU)",
        "",
        f"`python benchmarks/kill_anywhere.py --points {len(outcomes)} --seed {seed}` on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, torch {torch.__version__}. "
        f"The fit and the points are described in the script's docstring; the uninterrupted "
        f"fit took {straight_s:.0f} s. **{ok} / {len(outcomes)} points resume to the "
        "uninterrupted run's final last.ckpt and metrics.csv, bit for bit.**",
        "",
        "| # | point | where the kill landed; resumes | runs | state bitwise | metrics.csv equal |",
        "|---|---|---|---|---|---|",
    ]
    for i, o in enumerate(outcomes, 1):
        state = "yes" if o.weights_equal else f"**no** ({o.differ})"
        lines.append(
            f"| {i} | `{o.point.label}` | {o.landed} | {o.runs} | {state} | "
            f"{'yes' if o.metrics_equal else '**no**'} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=ROOT / "docs/benchmarks/kill-anywhere.md")
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument(
        "--random-only", action="store_true", help="only the random points after the fixed 15"
    )
    opts = parser.parse_args()
    from lucid_train.data.builtin_sets.synthetic import SyntheticSpec, synthetic_dataset

    base = opts.work or Path(tempfile.mkdtemp(prefix="kill-anywhere-"))
    data = synthetic_dataset(
        "detect", cache_dir=base / "data", spec=SyntheticSpec(IMAGES, 4, 96, 128)
    )
    t0 = time.monotonic()
    straight_cwd = base / "straight"
    proc = _start(straight_cwd, base / "straight.order", fit_args(data), {})
    _, err = proc.communicate()
    if proc.returncode != 0:
        print(err[-3000:], file=sys.stderr)
        return 1
    straight_s = time.monotonic() - t0
    straight = straight_cwd / "runs" / "detect" / "train"
    print(f"uninterrupted fit: {straight_s:.0f} s", flush=True)
    outcomes = []
    chosen = points(opts.points, opts.seed, straight_s)
    for point in chosen[15:] if opts.random_only else chosen:
        outcome = run_point(point, base, data, straight)
        outcomes.append(outcome)
        print(
            f"{point.label}: {outcome.landed}; runs {outcome.runs}; state "
            f"{outcome.weights_equal}; metrics {outcome.metrics_equal} ({outcome.wall_s:.0f} s)",
            flush=True,
        )
        opts.out.write_text(_table(outcomes, straight_s, opts.seed))
    bad = [o for o in outcomes if not (o.weights_equal and o.metrics_equal)]
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
