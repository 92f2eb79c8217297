"""Data-parallel training on the CPU: gloo, two processes, capture on but eager (``no CUDA``).

The contract (assumptions.md T85-T88): ``W`` ranks at a global batch of ``W b`` end where one
process ends that trains the same batches of ``b`` accumulating ``W`` per step, bit for bit:
weights, optimizer state, schedule, EMA and validation metrics, and every rank holds the same
state. The one-process reference keeps the BatchNorm statistics of its batches ``W k`` only
(`lucid_testing.ddp_fit.KeepStatisticsEvery`), because the ranks keep rank 0's.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from lucid_testing.trainer_fits import differences, same
from lucid_train.data.dataset import EpochSampler
from lucid_train.data.records import Task
from lucid_train.distributed import device_batch_size, device_count
from lucid_train.tasks.nonfinite import FiniteLossGuard, NonFiniteLossError

SUPPORT = Path(__file__).resolve().parents[1] / "support"
# Counters of batches, not of optimizer steps: the reference runs W batches per step (T44).
BATCH_COUNTERS = ("global_step", "schedule/last_epoch", "schedule/_step_count", "schedule/schedule")


def run_ddp_fit(root: Path, out: Path, *args: str) -> list[dict[str, Any]]:
    """`lucid_testing.ddp_fit` in a fresh interpreter; the saved state of every rank. A
    ``LUCID_DDP_MUTATION`` in the environment reaches the fit (`lucid_testing.ddp_fit`)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SUPPORT), env.get("PYTHONPATH", "")])
    env["OMP_NUM_THREADS"] = "1"
    cmd = [sys.executable, "-m", "lucid_testing.ddp_fit", "--root", str(root), "--out", str(out)]
    done = subprocess.run([*cmd, *args], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return [torch.load(path, weights_only=False) for path in sorted(out.glob("rank*.pt"))]


def _logged_per_batch(state: dict[str, Any], per_batch: int) -> list[list[Any]]:
    values = [state[f"logged/{i}"] for i in range(len([k for k in state if "logged/" in k]))]
    return [values[i : i + per_batch] for i in range(0, len(values), per_batch)]


@pytest.mark.slow
def test_two_gloo_ranks_end_where_one_process_accumulating_their_batches_ends(
    small_synthetic: Callable[[Task], Path], tmp_path: Path
) -> None:
    root = small_synthetic("detect")  # 12 training images: 3 global batches of 4 per epoch
    # No clipping: at norm 10 it rescales the gradient to one length, so an average in place of
    # the sum trained the same bits (mutation ddp-mean passed with it on).
    common = ("--capture", "on", "--gradient-clip", "0")
    ranks = run_ddp_fit(root, tmp_path / "two", "--devices", "2", "--batch", "4", *common)
    (one,) = run_ddp_fit(
        root, tmp_path / "one", "--devices", "1", "--batch", "2", "--accumulate", "2",
        "--keep-statistics-every", "2", *common,
    )  # fmt: skip
    assert [r["world_size"] for r in ranks] == [2, 2]
    assert [r["device_batch"] for r in ranks] == [2, 2]  # --data.batch_size 4 is global
    for saved in (*ranks, one):  # capture on, every call eager for want of CUDA
        for counts in saved["recorders"].values():
            assert counts["recordings"] == counts["replays"] == 0
            assert set(counts["eager"]) == {"no CUDA"}
    r0, r1, ref = ranks[0]["state"], ranks[1]["state"], one["state"]

    # Every rank holds one state (the logged losses are each rank's own batches).
    shared = [k for k in r0 if not k.startswith(("logged/", "metric/train/"))]
    assert [k for k in shared if not same(r0[k], r1[k])] == []

    # The same end state as the one process, bit for bit; its batch counters count W per step.
    compared = {k: v for k, v in r0.items() if k in shared and k not in BATCH_COUNTERS}
    assert len([k for k in compared if k.startswith(("model/", "optim/", "ema/"))]) > 1000
    assert differences(compared, {k: ref[k] for k in compared if k in ref}) == []
    assert ref["global_step"] == 2 * r0["global_step"] == 12

    # Rank r's batch k is the one process's batch 2k + r: the losses logged for it are equal.
    per_batch = 2  # the probe keeps each batch's loss terms (one tensor), then its loss
    mine = [_logged_per_batch(r, per_batch) for r in (r0, r1)]
    theirs = _logged_per_batch(ref, per_batch)
    assert len(theirs) == 2 * len(mine[0]) == 12
    for i, batch in enumerate(theirs):
        assert all(same(a, b) for a, b in zip(batch, mine[i % 2][i // 2], strict=True)), i


def test_each_rank_takes_the_one_process_batches_of_its_turn() -> None:
    """Rank r's k-th batch is single-process batch W k + r: distinct images, the same order
    every run, whole global batches only (13 positions, 2 ranks of 3: 2 global batches)."""
    b, world = 3, 2
    ranks = [EpochSampler(13, rank=r, world_size=world, batch_size=b) for r in range(world)]
    for s in ranks:
        s.set_epoch(5)
    got = [[p for _, p in s] for s in ranks]
    assert got == [[0, 1, 2, 6, 7, 8], [3, 4, 5, 9, 10, 11]]
    assert {e for s in ranks for e, _ in s} == {5}
    assert len(set(got[0]) | set(got[1])) == len(got[0]) + len(got[1])
    assert [len(s) for s in ranks] == [6, 6]
    single = [p for _, p in EpochSampler(13, batch_size=b)]
    assert single == list(range(13))  # one process: every position, as before
    for k in range(2):
        for r in range(world):
            assert got[r][k * b : (k + 1) * b] == single[(world * k + r) * b :][:b]


def test_a_set_smaller_than_one_global_batch_still_gives_every_rank_one_batch() -> None:
    ranks = [list(EpochSampler(5, rank=r, world_size=2, batch_size=3)) for r in range(2)]
    assert [[p for _, p in s] for s in ranks] == [[0, 1, 2], [3, 4, 0]]


def test_the_batch_size_is_global_and_must_split_evenly() -> None:
    assert device_batch_size(64, 2) == 32
    assert device_batch_size(16, 1) == 16
    with pytest.raises(
        ValueError, match=r"global batch .* multiple of the 3 devices; try 15 or 18"
    ):
        device_batch_size(16, 3)


def test_the_data_module_loads_its_share_of_the_global_batch(
    small_synthetic: Callable[[Task], Path],
) -> None:
    from lucid_train.data.datamodule import LucidDataModule

    dm = LucidDataModule("detect", small_synthetic("detect"), img_size=64, batch_size=4,
                         num_workers=0)  # fmt: skip
    dm.setup("fit")

    class _Trainer:
        world_size, global_rank, max_epochs = 2, 1, 1

    dm.trainer = _Trainer()  # type: ignore[assignment]
    loader = dm.train_dataloader()
    assert loader.batch_size == 2
    sampler = loader.sampler
    assert isinstance(sampler, EpochSampler)
    assert (sampler.rank, sampler.world_size, sampler.batch_size) == (1, 2, 2)
    assert [p for _, p in sampler] == [2, 3, 6, 7, 10, 11]


def test_devices_above_one_choose_the_data_parallel_strategy() -> None:
    from lucid_train.distributed import DataParallelStrategy, fit_strategy

    assert device_count("cpu", 2) == 2
    assert device_count("gpu", [0, 1]) == 2
    assert device_count("cpu", "0,1,2") == 3
    assert isinstance(fit_strategy("cpu", 2), DataParallelStrategy)
    assert fit_strategy("cpu", 1) == "auto"
    with pytest.raises(TypeError, match="find_unused_parameters"):
        DataParallelStrategy(find_unused_parameters=True)


# -- the non-finite check across ranks (T88), the other rank simulated by the sum ------------


def _other_rank(flagged: bool) -> Callable[[torch.Tensor], None]:
    return lambda t: t.add_(float(flagged)) and None


def _observe(guard: FiniteLossGuard, step: int, value: float) -> None:
    guard.observe(step, torch.tensor(value), torch.tensor([value, 1.0]), ("box", "cls"))


def test_a_clean_rank_stops_at_the_step_where_another_rank_was_flagged() -> None:
    guard = FiniteLossGuard()
    guard.configure(2, _other_rank(True), torch.device("cpu"))
    _observe(guard, 7, 1.0)
    with pytest.raises(NonFiniteLossError, match="global step 7: on another rank") as info:
        guard.agree(7)
    assert info.value.terms == ("on another rank",)


def test_a_flagged_rank_does_not_stop_alone_and_names_its_batch_at_the_agreed_step() -> None:
    guard = FiniteLossGuard()
    guard.configure(2, _other_rank(False), torch.device("cpu"))
    _observe(guard, 3, float("nan"))  # one process would raise here; with two it waits
    _observe(guard, 4, 1.0)
    _observe(guard, 5, 1.0)
    _observe(guard, 6, 1.0)  # past MAX_LAG: still only read, not raised
    with pytest.raises(NonFiniteLossError, match="global step 3: box") as info:
        guard.agree(6)
    assert info.value.step == 3


def test_ranks_that_are_all_clean_go_on() -> None:
    guard = FiniteLossGuard()
    guard.configure(2, _other_rank(False), torch.device("cpu"))
    for step in range(4):
        _observe(guard, step, 1.0)
        guard.agree(step)
    guard.flush()
    assert guard.flag is not None and not bool(guard.flag)


def test_one_process_still_raises_at_once_on_the_host() -> None:
    guard = FiniteLossGuard()
    guard.configure(1, _other_rank(False), torch.device("cpu"))
    with pytest.raises(NonFiniteLossError, match="global step 2"):
        _observe(guard, 2, float("inf"))


def test_ranks_launched_again_take_rank_zeros_run_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lucid_train.distributed import RUN_DIR_ENV, shared_run_dir

    monkeypatch.delenv("LOCAL_RANK", raising=False)
    made = shared_run_dir(lambda: tmp_path / "train")
    assert made == tmp_path / "train" and os.environ[RUN_DIR_ENV] == str(made)
    monkeypatch.setenv("LOCAL_RANK", "1")  # what Lightning's launcher gives rank 1
    assert shared_run_dir(lambda: tmp_path / "train2") == made


@pytest.mark.slow
def test_lucid_fit_on_two_cpu_devices_writes_one_run(
    small_synthetic: Callable[[Task], Path], tmp_path: Path
) -> None:
    """The command end to end over gloo: one run folder, checkpoints and metrics from rank 0
    (the checkpoint and epoch-end flushes agree across ranks, T88), exit 0, and the command's
    own lines said once."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("LOCAL_RANK", None)
    cmd = [
        sys.executable,
        "-m",
        "lucid_train",
        "fit",
        "--data.root",
        str(small_synthetic("detect")),
    ]
    cmd += ["--trainer.accelerator", "cpu", "--trainer.devices", "2", "--trainer.max_epochs", "2"]
    cmd += ["--data.img_size", "64", "--data.batch_size", "4", "--data.num_workers", "0"]
    cmd += ["--trainer.limit_val_batches", "1", "--run.root", str(tmp_path), "--run.name", "ddp"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert [p.name for p in (tmp_path / "detect").iterdir()] == ["ddp"]
    run = tmp_path / "detect" / "ddp"
    assert {p.name for p in (run / "checkpoints").iterdir()} == {"last.ckpt", "best.ckpt"}
    # every rank runs the command; its lines are rank 0's (each said twice before 2026-12-07)
    assert done.stdout.count("lucid fit: done") == 1, done.stdout[-3000:]
    assert done.stdout.count("lucid fit: yolo26n (detect) on") == 1, done.stdout[-3000:]
    with (run / "metrics.csv").open() as fh:
        rows = [r for r in csv.DictReader(fh) if r["time/train_images_per_s"]]
    assert [r["epoch"] for r in rows] == ["0", "1"]  # one row per epoch, written once (rank 0)
