"""A ``lucid fit`` stopped for real, as a user's run is (a fresh interpreter per run, SIGTERM and
SIGKILL mid-epoch), resumes with ``--ckpt_path`` to the end state of an uninterrupted run, bit for
bit, with every epoch in ``metrics.csv`` once.

One chain per device: an uninterrupted run of 3 epochs, and a run that gets SIGTERM during epoch
1, is resumed, gets SIGKILL during epoch 2 and is resumed to the end. Each stopped run is held
inside the read of its epoch's 21st sample (`lucid_testing.recorded_fit`'s hold) until the
epoch start's last.ckpt is on the disk (it is written in the background while the epoch's first
batches train, `lucid_train.run.last_checkpoint`), then signalled and let go: the stop lands in that
epoch's sixth batch on a fast GPU and on a loaded CI machine alike, and the last.ckpt it leaves
must be the epoch start's. The GPU chain runs the same with capture on and 16-mixed (the GPU
session).
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

import lucid_testing
from lucid_testing.recorded_fit import held, release
from lucid_testing.trainer_fits import flat_state, same
from lucid_train.data.builtin_sets.synthetic import SyntheticSpec, synthetic_dataset
from lucid_train.run.trainer import LOG_INTERVAL

EPOCHS = 3
BATCHES = 10  # per epoch: 40 images, batch 4
# The stopped runs wait inside this read of their epoch for the signal: the sixth batch's, two
# after `RELEASE_AFTER` lets the epoch-start write go, so a loader reading a batch ahead still
# holds after it.
HOLD_POSITION = 20
CPU_FLAGS = ("--trainer.accelerator", "cpu", "--trainer.deterministic")
# No --trainer.deterministic on CUDA: torch refuses ops without a deterministic kernel there;
# the capture parity suite holds the same kernels bitwise run to run without it.
GPU_FLAGS = ("--trainer.accelerator", "gpu", "--trainer.precision", "16-mixed",
             "--model.capture", "on")  # fmt: skip


@dataclass
class Run:
    """One ``lucid fit`` process: its folder, sampler record and output."""

    cwd: Path
    order_log: Path
    returncode: int | None = None
    stderr: str = ""

    @property
    def run_dir(self) -> Path:
        return self.cwd / "runs" / "detect" / "train"

    @property
    def last(self) -> Path:
        return self.run_dir / "checkpoints" / "last.ckpt"


def _fit_args(data: Path, device_flags: tuple[str, ...]) -> list[str]:
    return [
        "fit", "--data.root", str(data), "--data.img_size", "64", "--data.batch_size", "4",
        "--data.num_workers", "0", "--trainer.max_epochs", str(EPOCHS),
        "--trainer.limit_val_batches", "1", *device_flags,
    ]  # fmt: skip


def _start(run: Run, args: list[str], hold_in_epoch: int | None = None) -> subprocess.Popen[str]:
    support = str(Path(lucid_testing.__file__).parent.parent)  # tests/support
    path = os.pathsep.join(p for p in (support, os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}
    env.pop("LUCID_TEST_HOLD_AT", None)
    if hold_in_epoch is not None:
        env["LUCID_TEST_HOLD_AT"] = f"{hold_in_epoch} {HOLD_POSITION}"
    run.cwd.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "lucid_testing.recorded_fit", str(run.order_log), *args]
    return subprocess.Popen(
        cmd, cwd=run.cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )


def _finish(run: Run, proc: subprocess.Popen[str], timeout: float = 600) -> Run:
    _, run.stderr = proc.communicate(timeout=timeout)
    run.returncode = proc.returncode
    return run


def _read_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _written_epoch(path: Path) -> int | None:
    """The ``epoch`` of the last.ckpt on the disk now (it is replaced whole, never rewritten)."""
    if not path.exists():
        return None
    epoch = torch.load(path, map_location="cpu", weights_only=True, mmap=True)["epoch"]
    return int(epoch)


def _stop_in_epoch(run: Run, proc: subprocess.Popen[str], epoch: int, sig: int) -> Run:
    """Once the run (started with ``hold_in_epoch=epoch``) waits inside its held read and the
    epoch start's last.ckpt is on the disk, send ``sig``, let the read go on and wait for the
    process to end."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        waiting = held(run.order_log).exists() and _written_epoch(run.last) == epoch
        if proc.poll() is not None or waiting:
            break
        time.sleep(0.01)
    assert proc.poll() is None, f"the run ended before its hold in epoch {epoch}: {proc.stderr}"
    assert held(run.order_log).exists(), f"no held read in epoch {epoch} within 600 s"
    proc.send_signal(sig)
    release(run.order_log).touch()
    return _finish(run, proc)


def _checkpoint(path: Path) -> dict[str, Any]:
    ckpt: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    return ckpt


def _order(run: Run) -> dict[int, list[str]]:
    by_epoch: dict[int, list[str]] = {}
    for line in _read_lines(run.order_log):
        by_epoch.setdefault(int(line.split()[0]), []).append(line)
    return by_epoch


def _metric_rows(run: Run) -> list[dict[str, str]]:
    with (run.run_dir / "metrics.csv").open(newline="") as f:
        # wall time differs between runs by nature; everything else must not
        return [
            {k: v for k, v in row.items() if not k.startswith("time/")} for row in csv.DictReader(f)
        ]


@dataclass
class Chain:
    straight: Run
    sigterm: Run
    ckpt_after_sigterm: dict[str, Any]
    sigkill: Run
    ckpt_after_sigkill: dict[str, Any]
    resumed: Run  # the final run, to the end
    resumed_orders: list[dict[int, list[str]]]


# The GPU chain's tests share one worker (loadgroup) and start first: the chain is five fits.
GPU_CHAIN = (pytest.mark.gpu, pytest.mark.heavy(5), pytest.mark.xdist_group("killed-fit-gpu"))


@pytest.fixture(scope="module", params=["cpu", pytest.param("gpu", marks=GPU_CHAIN)])
def chain(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Chain:
    flags = CPU_FLAGS if request.param == "cpu" else GPU_FLAGS
    base = tmp_path_factory.mktemp(f"killed-{request.param}")
    data = synthetic_dataset(
        "detect", cache_dir=base / "data", spec=SyntheticSpec(4 * BATCHES, 4, 96, 128)
    )
    args = _fit_args(data, flags)
    straight = Run(base / "straight", base / "straight.order")
    proc = _start(straight, args)
    interrupted = Run(base / "interrupted", base / "first.order")
    stopped = _start(interrupted, args, hold_in_epoch=1)  # the two first runs side by side
    sigterm = _stop_in_epoch(interrupted, stopped, 1, signal.SIGTERM)
    _finish(straight, proc)
    assert straight.returncode == 0, straight.stderr[-3000:]
    after_sigterm = _checkpoint(interrupted.last)
    resume = [*args, "--ckpt_path", str(interrupted.last)]
    sigkill = Run(interrupted.cwd, base / "second.order")
    sigkill = _stop_in_epoch(sigkill, _start(sigkill, resume, hold_in_epoch=2), 2, signal.SIGKILL)
    after_sigkill = _checkpoint(interrupted.last)
    resumed = _finish(Run(interrupted.cwd, base / "third.order"), _start(
        Run(interrupted.cwd, base / "third.order"), resume))  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    orders = [_order(r) for r in (sigterm, sigkill, resumed)]
    return Chain(straight, sigterm, after_sigterm, sigkill, after_sigkill, resumed, orders)


@pytest.mark.slow
def test_sigterm_stops_cleanly_and_leaves_the_epoch_start_checkpoint(chain: Chain) -> None:
    assert chain.sigterm.returncode == 0, chain.sigterm.stderr[-3000:]
    assert "Traceback" not in chain.sigterm.stderr
    assert "lucid fit: stopped by SIGTERM in epoch 1" in chain.sigterm.stderr
    assert str(chain.sigterm.last) in chain.sigterm.stderr
    assert chain.ckpt_after_sigterm["epoch"] == 1  # written at epoch 1's start


@pytest.mark.slow
def test_sigkill_mid_epoch_leaves_a_whole_epoch_start_checkpoint(chain: Chain) -> None:
    assert chain.sigkill.returncode == -signal.SIGKILL
    assert chain.ckpt_after_sigkill["epoch"] == 2
    leftovers = [p.name for p in chain.sigkill.last.parent.iterdir() if ".tmp" in p.name]
    assert not leftovers


@pytest.mark.slow
def test_resumed_run_ends_bitwise_where_the_uninterrupted_one_ends(chain: Chain) -> None:
    """Weights, optimizer, scaler (GPU), EMA, schedule, pending accumulation, loop counters:
    every entry of the final last.ckpt but the callbacks' file paths."""
    straight = _checkpoint(chain.straight.last)
    resumed = _checkpoint(chain.resumed.last)
    assert straight["epoch"] == resumed["epoch"] == EPOCHS
    # Lightning's ``current`` loop counters count what this process ran, not training state.
    a = {k: v for k, v in flat_state(straight).items() if ".current." not in k}
    b = {k: v for k, v in flat_state(resumed).items() if ".current." not in k}
    a = {k: v for k, v in a.items() if not k.startswith("callbacks.")}
    b = {k: v for k, v in b.items() if not k.startswith("callbacks.")}
    assert a.keys() == b.keys()
    differ = [k for k in a if not same(a[k], b[k])]
    assert not differ, f"resumed state differs at {differ[:8]}"
    scores = [
        [v.get("best_model_score") for v in c["callbacks"].values()] for c in (straight, resumed)
    ]
    assert all(same(x, y) for x, y in zip(*scores, strict=True))


@pytest.mark.slow
def test_each_epoch_reads_its_own_order_in_the_resumed_runs(chain: Chain) -> None:
    straight = _order(chain.straight)
    assert sorted(straight) == list(range(EPOCHS))
    assert straight[0] != straight[1]  # the order does change with the epoch
    first, second, third = chain.resumed_orders
    # each stop cut an epoch short; the next run read that epoch again from its first sample
    assert first[0] == straight[0] and first[1] == straight[1][: len(first[1])]
    assert sorted(second) == [1, 2] and second[1] == straight[1]
    assert second[2] == straight[2][: len(second[2])]
    assert sorted(third) == [2] and third[2] == straight[2]


@pytest.mark.slow
def test_metrics_csv_holds_every_epoch_once_as_the_uninterrupted_run(chain: Chain) -> None:
    rows = _metric_rows(chain.resumed)
    epoch_rows = [r for r in rows if r.get("train/loss")]
    assert [r["epoch"] for r in epoch_rows] == [str(e) for e in range(EPOCHS)]
    steps = [r["step"] for r in rows if r.get("train/o2o_box_step")]
    # step values are logged every LOG_INTERVAL batches (assumptions T65)
    every = [s for s in range(EPOCHS * BATCHES) if (s + 1) % LOG_INTERVAL == 0]
    assert steps == [str(s) for s in every]
    assert rows == _metric_rows(chain.straight)
