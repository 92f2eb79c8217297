"""Data-parallel fits on CUDA with capture on every rank (assumptions.md T85-T88).

Each fit is `lucid_testing.ddp_fit` in a fresh interpreter (Lightning's ``ddp`` launcher starts
rank 1 by running the same command; torch warns once per process, so the stream check needs its
own interpreters too). yolo26n at 64 px on the small synthetic set, 2 epochs, TF32 off,
deterministic algorithms; every rank saves its end state.

- one GPU, `DataParallelStrategy` at world size 1: replay against eager, bitwise;
- two GPUs (skipped with fewer): DDP-eager against DDP-replay, bitwise, detect and segment at
  fp16 and bf16, accumulation 1 and 2 (the gate); and two GPUs against one GPU accumulating 2;
- no run of ours prints torch's "AccumulateGrad node's stream does not match" warning, while
  Lightning's own DDP wrapper with capture does (the control).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from lucid_testing.trainer_fits import differences, same
from lucid_train.data.records import Task

pytestmark = [pytest.mark.gpu, pytest.mark.heavy(3)]  # two fresh interpreters a test

SUPPORT = Path(__file__).resolve().parents[1] / "support"
STREAM_WARNING = "AccumulateGrad node's stream does not match"
BATCH_COUNTERS = ("global_step", "schedule/last_epoch", "schedule/_step_count", "schedule/schedule")
# 12 training images, global batch 4: 3 batches per epoch and rank, 2 epochs
TRAIN_BATCHES = 6

two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")


def fit(root: Path, out: Path, *args: str) -> tuple[list[dict[str, Any]], str]:
    """Every rank's saved state and the fit's console output."""
    env = dict(os.environ, PYTHONWARNINGS="always")
    env["PYTHONPATH"] = os.pathsep.join([str(SUPPORT), *sys.path])
    cmd = [sys.executable, "-m", "lucid_testing.ddp_fit", "--root", str(root), "--out", str(out)]
    cmd += ["--accelerator", "cuda", *args]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    text = done.stdout + done.stderr
    assert done.returncode == 0, text[-4000:]
    ranks = [torch.load(p, weights_only=False) for p in sorted(out.glob("rank*.pt"))]
    return ranks, text


def _warned(saved: list[dict[str, Any]], text: str) -> bool:
    return STREAM_WARNING in text or any(STREAM_WARNING in w for r in saved for w in r["warnings"])


def _assert_replayed(saved: dict[str, Any], batches: int) -> None:
    """Every training batch replayed both recorders; only validation ran eager."""
    for name, counts in saved["recorders"].items():
        assert counts["recordings"] == 1 and counts["retirements"] == 0, (name, counts)
        assert counts["replays"] == batches, (name, counts)
        assert set(counts["eager"]) <= {"inference"}, (name, counts)


def _assert_ranks_agree(ranks: list[dict[str, Any]]) -> None:
    r0 = ranks[0]["state"]
    for other in ranks[1:]:
        shared = [k for k in r0 if not k.startswith(("logged/", "metric/train/"))]
        assert [k for k in shared if not same(r0[k], other["state"][k])] == []


# With the GradScaler (16-mixed, whose verdict the ranks agree on), without it (bf16) and fp32.
@pytest.mark.parametrize(
    ("precision", "accumulate"), [("16-mixed", "2"), ("bf16-mixed", "1"), ("32-true", "1")]
)
def test_world_size_one_ddp_replay_matches_eager_bitwise(
    small_synthetic: Callable[[Task], Path], tmp_path: Path, precision: str, accumulate: str
) -> None:
    root = small_synthetic("detect")
    common = ("--ddp", "--devices", "1", "--batch", "2", "--precision", precision)
    common += ("--accumulate", accumulate)
    (eager,), _ = fit(root, tmp_path / "off", *common, "--capture", "off")
    (replay,), text = fit(root, tmp_path / "on", *common, "--capture", "on")
    assert replay["world_size"] == 1
    _assert_replayed(replay, 2 * TRAIN_BATCHES)
    assert differences(eager["state"], replay["state"]) == []
    assert not _warned([replay], text)


@two_gpus
@pytest.mark.parametrize("accumulate", [1, 2])
@pytest.mark.parametrize("precision", ["16-mixed", "bf16-mixed"])
@pytest.mark.parametrize("task", ["detect", "segment"])
def test_two_gpu_ddp_replay_matches_ddp_eager_bitwise(
    small_synthetic: Callable[[Task], Path],
    tmp_path: Path,
    task: Task,
    precision: str,
    accumulate: int,
) -> None:
    """The gate: every rank's end state, logged losses included, bit for bit."""
    root = small_synthetic(task)
    common = ("--task", task, "--devices", "2", "--batch", "4", "--precision", precision)
    common += ("--accumulate", str(accumulate))
    eager, _ = fit(root, tmp_path / "off", *common, "--capture", "off")
    replay, text = fit(root, tmp_path / "on", *common, "--capture", "on")
    assert [r["world_size"] for r in replay] == [2, 2]
    for e, r in zip(eager, replay, strict=True):
        _assert_replayed(r, TRAIN_BATCHES)
        assert differences(e["state"], r["state"]) == []
    _assert_ranks_agree(eager)
    _assert_ranks_agree(replay)
    assert not _warned(replay, text)


@two_gpus
def test_two_gpus_end_where_one_gpu_accumulating_two_ends(
    small_synthetic: Callable[[Task], Path], tmp_path: Path
) -> None:
    """Two GPUs at a global batch of 4 against one GPU at 2 accumulating 2, capture on in both.

    The sum of two gradients is one addition whichever rank makes it, so the trained weights,
    the optimizer and the EMA of the weights are bitwise equal to the one-GPU run. The BatchNorm
    statistics differ by construction (the ranks keep rank 0's, T85): against a one-GPU run that
    keeps the statistics of its even batches only, they are equal too."""
    root = small_synthetic("detect")
    # no clipping, which would rescale a wrongly averaged gradient back to the same bits
    common = ("--precision", "16-mixed", "--capture", "on", "--gradient-clip", "0")
    two, _ = fit(root, tmp_path / "two", "--devices", "2", "--batch", "4", *common)
    one_args = ("--devices", "1", "--batch", "2", "--accumulate", "2", *common)
    (kept,), _ = fit(root, tmp_path / "kept", *one_args, "--keep-statistics-every", "2")
    (plain,), _ = fit(root, tmp_path / "plain", *one_args)
    r0 = two[0]["state"]
    _assert_ranks_agree(two)
    shared = {
        k: v
        for k, v in r0.items()
        if not k.startswith(("logged/", "metric/train/")) and k not in BATCH_COUNTERS
    }
    assert differences(shared, {k: kept["state"][k] for k in shared}) == []
    statistics = ("running_mean", "running_var", "num_batches_tracked")
    trained = {
        k: v
        for k, v in shared.items()
        if k.startswith(("model/", "optim/", "ema/")) and not k.endswith(statistics)
    }
    assert differences(trained, {k: plain["state"][k] for k in trained}) == []


def test_lightning_ddp_wrapper_with_capture_warns_of_the_accumulator_stream(
    small_synthetic: Callable[[Task], Path], tmp_path: Path
) -> None:
    """The control: DDP's reducer makes the AccumulateGrad nodes at its construction, on the
    side stream Lightning builds it on, so a recorder's backward hands them gradients from its
    own stream and torch warns. The runs above use the same check and must not see it."""
    root = small_synthetic("detect")
    saved, text = fit(
        root, tmp_path / "wrapped", "--lightning-ddp", "--devices", "1", "--batch", "2",
        "--precision", "16-mixed", "--capture", "on", "--epochs", "1",
    )  # fmt: skip
    assert saved[0]["recorders"]["network"]["replays"] > 0
    assert _warned(saved, text)


def test_on_a_gpu_the_agreed_verdict_is_read_max_lag_batches_later_on_every_rank() -> None:
    """The staged route of T88 in one process, the other rank played by the sum: the verdict
    lands at once, yet it is read exactly MAX_LAG batches after the step (the same batch on every
    rank), never earlier because it happened to land."""
    from lucid_train.tasks.nonfinite import MAX_LAG, FiniteLossGuard, NonFiniteLossError

    cuda = torch.device("cuda")
    guard = FiniteLossGuard()
    guard.configure(2, lambda t: t.add_(1.0), cuda)  # the other rank was flagged

    def observe(step: int) -> None:
        value = torch.tensor(1.0, device=cuda)
        guard.observe(step, value, torch.stack([value, value]), ("box", "cls"))

    observe(0)
    guard.agree(0)
    torch.cuda.synchronize()  # landed
    for step in range(1, MAX_LAG):
        observe(step)  # read only when MAX_LAG batches old
    assert guard.flag is not None and bool(guard.flag)  # every later step is gated
    with pytest.raises(NonFiniteLossError, match="global step 0: on another rank"):
        observe(MAX_LAG)
