"""The DataModule hands out packed uint8 batches with per-sample seeds that differ across epochs
and positions but not across worker counts, rasterises masks on the stride-4 grid, and closes
mosaic for the final epochs."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from lucid_train.data.augment import AugmentConfig
from lucid_train.data.builtin_sets.synthetic import SyntheticSpec, synthetic_dataset
from lucid_train.data.datamodule import LucidDataModule
from lucid_train.data.dataset import WORKER_NICE, EpochSampler, worker_init
from lucid_train.data.records import Task
from lucid_train.data.transport import Batch


def _dm(small_synthetic: Callable[[Task], Path], task: Task, **kw: Any) -> LucidDataModule:
    dm = LucidDataModule(
        task, small_synthetic(task), img_size=96, batch_size=4, num_workers=0, **kw
    )
    dm.setup("fit")
    return dm


@pytest.mark.parametrize("task", ["detect", "segment", "pose", "obb"])
def test_batches_are_uint8_images_with_packed_targets(
    small_synthetic: Callable[[Task], Path], task: Task
) -> None:
    """Batch format per task: (B, S, S, 3) uint8 and dense per-instance tensors sorted by image."""
    dm = _dm(small_synthetic, task)
    batch = next(iter(dm.train_dataloader()))
    assert isinstance(batch, Batch)
    assert batch.images.shape == (4, 96, 96, 3)
    assert batch.images.dtype == torch.uint8
    t = batch.labels.numel()
    assert batch.boxes.shape == (t, 4)
    assert batch.batch_idx.shape == (t,)
    assert bool((batch.batch_idx[1:] >= batch.batch_idx[:-1]).all())
    assert batch.rboxes.shape == ((t, 5) if task == "obb" else (0, 5))
    assert batch.keypoints.shape == ((t, 7, 3) if task == "pose" else (t, 0, 3))
    assert batch.instance_map.shape == ((4, 24, 24) if task == "segment" else (4, 0, 0))
    assert torch.isnan(batch.letterbox).all()
    val = next(iter(dm.val_dataloader()))
    assert not torch.isnan(val.letterbox).any()
    assert val.image_ids.tolist() == [1, 2, 3, 4]
    assert val.float_images().shape == (4, 3, 96, 96)


def test_segment_instance_masks_expand_one_mask_per_instance(
    small_synthetic: Callable[[Task], Path],
) -> None:
    """instance_masks() gives (T, S/4, S/4) bool whose pixels sit inside each instance's box."""
    dm = _dm(small_synthetic, "segment")
    batch = next(iter(dm.val_dataloader()))
    masks = batch.instance_masks()
    assert masks.shape == (batch.labels.numel(), 24, 24)
    assert masks.dtype == torch.bool
    for j in range(masks.shape[0]):
        ys, xs = torch.nonzero(masks[j], as_tuple=True)
        assert ys.numel() > 0
        x1, y1, x2, y2 = (batch.boxes[j] / 4).tolist()
        assert xs.min() >= x1 - 1
        assert xs.max() <= x2
        assert ys.min() >= y1 - 1
        assert ys.max() <= y2


def test_seeds_differ_across_epochs_and_positions(small_synthetic: Callable[[Task], Path]) -> None:
    """Two epochs give different streams; the same (epoch, position) gives the same sample."""
    dm = _dm(small_synthetic, "detect")
    ds = dm.train_dataset()
    a, b, c = ds[(0, 0)], ds[(1, 0)], ds[(0, 1)]
    again = dm.train_dataset()[(0, 0)]
    assert np.array_equal(a.image, again.image)
    assert a.targets.allclose(again.targets)
    assert not np.array_equal(a.image, b.image)
    assert not np.array_equal(a.image, c.image)


def test_stream_is_identical_for_any_number_of_workers(
    small_synthetic: Callable[[Task], Path],
) -> None:
    """num_workers 0 and 2 produce the same batches (per-sample seeds, not per-worker streams)."""
    batches = []
    for workers in (0, 2):
        dm = _dm(small_synthetic, "detect")
        dm.num_workers = workers
        loader = dm.train_dataloader()
        sampler = loader.sampler
        assert isinstance(sampler, EpochSampler)
        sampler.set_epoch(3)
        batches.append(list(loader))
    for x, y in zip(*batches, strict=True):
        assert torch.equal(x.images, y.images)
        assert torch.equal(x.boxes, y.boxes)


def test_persistent_workers_give_each_epoch_the_batches_of_a_fresh_loader(
    small_synthetic: Callable[[Task], Path],
) -> None:
    """Workers kept across epochs (the default) still follow the sampler's epoch."""

    def epochs(persistent: bool) -> list[list[Batch]]:
        dm = _dm(small_synthetic, "detect", persistent_workers=persistent)
        dm.num_workers = 2
        loader = dm.train_dataloader()
        assert loader.persistent_workers is persistent
        sampler = loader.sampler
        assert isinstance(sampler, EpochSampler)
        out = []
        for epoch in (0, 1):
            sampler.set_epoch(epoch)
            out.append(list(loader))
        return out

    kept, fresh = epochs(True), epochs(False)
    assert not torch.equal(kept[0][0].images, kept[1][0].images)
    for a, b in zip(kept, fresh, strict=True):
        for x, y in zip(a, b, strict=True):
            assert torch.equal(x.images, y.images)
            assert torch.equal(x.boxes, y.boxes)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_workers_feeding_a_gpu_yield_the_cpu_to_the_training_process(
    small_synthetic: Callable[[Task], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On CUDA the loader's workers start below the training process's priority (the thread
    that launches the GPU's work gets a core when it wants one); a CPU fit's keep theirs."""
    dm = LucidDataModule("detect", small_synthetic("detect"), img_size=96, batch_size=4,
                         num_workers=2)  # fmt: skip
    dm.setup("fit")
    for on_cuda, nice in ((True, WORKER_NICE), (False, 0)):
        monkeypatch.setattr(dm, "_on_cuda", lambda on_cuda=on_cuda: on_cuda)
        for loader in (dm.train_dataloader(), dm.val_dataloader()):
            init = loader.worker_init_fn
            assert isinstance(init, functools.partial) and init.keywords == {"nice": nice}
    base = os.nice(0)
    pid = os.fork()
    if pid == 0:  # a worker's start, in a child as the DataLoader's
        worker_init(0, nice=WORKER_NICE)
        os._exit(0 if os.nice(0) == min(base + WORKER_NICE, 19) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert os.nice(0) == base  # the training process keeps its own


_KILLED_PARENT = """
import os, signal, time
import numpy as np
from torch.utils.data import DataLoader, Dataset
from lucid_train.data.dataset import worker_init

class Images(Dataset):
    def __len__(self):
        return 10_000

    def __getitem__(self, i):
        return np.zeros((64, 64, 3), np.uint8)  # pickled through the pipe, which fills

loader = DataLoader(Images(), batch_size=4, num_workers=1, persistent_workers=True,
                    prefetch_factor=4, collate_fn=list, worker_init_fn=worker_init)
it = iter(loader)
next(it)
time.sleep(1.0)  # the worker runs ahead until its pipe is full
print([w.pid for w in it._workers], flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads /proc (Linux)")
def test_loader_workers_end_with_a_killed_training_process(tmp_path: Path) -> None:
    """SIGKILL of the training process: a worker that had run ahead (its pipe full, blocked
    writing) ends within seconds instead of living on as an orphan."""
    import subprocess
    import sys
    import time

    script = tmp_path / "killed_parent.py"
    script.write_text(_KILLED_PARENT)
    proc = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )  # fmt: skip
    assert proc.stdout is not None
    workers = [int(w) for w in proc.stdout.readline().strip().strip("[]").split(",")]
    proc.wait(timeout=120)  # not the pipe's end: an orphan worker would hold it open
    try:
        deadline = time.monotonic() + 10.0
        while any(_running(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_running(w) for w in workers), "a loader worker outlived its parent"
    finally:
        for w in workers:
            if _running(w):
                os.kill(w, 9)
        proc.stdout.close()


def test_close_mosaic_applies_to_the_final_epochs(small_synthetic: Callable[[Task], Path]) -> None:
    """close_mosaic=2 with 5 epochs: epochs 3 and 4 train without mosaic."""
    dm = _dm(small_synthetic, "detect", augment=AugmentConfig(close_mosaic=2))
    dm.close_mosaic_from = 3
    ds = dm.train_dataset()
    assert ds.config_for(2).mosaic == 1.0
    assert ds.config_for(3).mosaic == 0.0


def test_sampler_splits_positions_across_ranks_and_follows_the_epoch() -> None:
    """Ranks take one-process batches in turn (assumptions.md T87); set_epoch changes the key's
    epoch."""
    s0 = EpochSampler(5, rank=0, world_size=2, batch_size=1)
    s1 = EpochSampler(5, rank=1, world_size=2, batch_size=1)
    s0.set_epoch(4)
    assert list(s0) == [(4, 0), (4, 2)]
    assert list(s1) == [(0, 1), (0, 3)]


def test_batch_moves_and_pins_as_one_object(small_synthetic: Callable[[Task], Path]) -> None:
    """Batch.to keeps every field; pin_memory is available to the DataLoader."""
    dm = _dm(small_synthetic, "pose")
    batch = next(iter(dm.val_dataloader()))
    moved = batch.to("cpu")
    assert torch.equal(moved.keypoints, batch.keypoints)
    assert callable(batch.pin_memory)
    assert batch.counts().sum() == batch.labels.numel()


def test_coco_ground_truth_is_the_dataset_json(small_synthetic: Callable[[Task], Path]) -> None:
    """Evaluation ground truth of a COCO dataset is its own file."""
    dm = _dm(small_synthetic, "detect")
    gt = dm.coco_ground_truth("val")
    assert len(gt["images"]) == 6
    assert dm.schema.category_ids == (1, 2, 3)
    # built once per split read: every epoch's validation gets the same document
    assert dm.coco_ground_truth("val") is gt
    assert dm.coco_ground_truth("train") is not gt


def test_synthetic_sets_are_deterministic_by_seed(tmp_path: Path) -> None:
    """Two generations with one seed are byte-identical; another seed differs."""
    spec = SyntheticSpec(num_train=3, num_val=2, min_side=96, max_side=128)
    a = synthetic_dataset("obb", cache_dir=tmp_path / "a", spec=spec)
    b = synthetic_dataset("obb", cache_dir=tmp_path / "b", spec=spec)
    c = synthetic_dataset("obb", cache_dir=tmp_path / "c", spec=spec, seed=1)
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files)
    assert (a / "annotations" / "train.json").read_bytes() != (
        c / "annotations" / "train.json"
    ).read_bytes()
    assert (
        synthetic_dataset("obb", cache_dir=tmp_path / "a", spec=spec) == a
    )  # cached, not rewritten


def test_datamodule_refuses_bad_settings_at_construction() -> None:
    """Canvas not a multiple of 32 and unknown tasks fail in __init__ with the value."""
    with pytest.raises(ValueError, match="img_size: expected a multiple of 32 and >= 32, got 100"):
        LucidDataModule("detect", img_size=100)
    with pytest.raises(ValueError, match="task: expected one of"):
        LucidDataModule("classify")  # type: ignore[arg-type]


def test_a_ram_cache_serves_the_batches_of_decoding_per_sample(
    small_synthetic: Callable[[Task], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    batches = {}
    for cache in ("none", "ram"):
        dm = LucidDataModule("segment", small_synthetic("segment"), img_size=64, batch_size=4,
                             num_workers=0, cache=cache)  # type: ignore[arg-type]  # fmt: skip
        dm.setup("fit")
        batches[cache] = (next(iter(dm.train_dataloader())), next(iter(dm.val_dataloader())))
    out = capsys.readouterr().out
    assert "caching 12 train images in RAM" in out and "GiB decoded" in out
    assert out.index("caching 12 train") < out.index("cached 12/12 train")  # size before filling
    for plain, cached in zip(batches["none"], batches["ram"], strict=True):
        assert torch.equal(plain.images, cached.images)
        assert torch.equal(plain.boxes, cached.boxes)
        assert torch.equal(plain.instance_map, cached.instance_map)


def test_a_ram_cache_larger_than_the_free_memory_says_so_and_trains_without_it(
    small_synthetic: Callable[[Task], Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import lucid_train.data.ram_cache as ram_cache

    monkeypatch.setattr(ram_cache, "available_memory", lambda: 1000)
    dm = LucidDataModule("detect", small_synthetic("detect"), img_size=64, num_workers=0,
                         batch_size=4, cache="ram")  # fmt: skip
    dm.setup("fit")
    out = capsys.readouterr().out
    assert "only 0.0 GiB is available" in out and "training without the cache" in out
    assert dm.cache == "none" and not dm.ram
    assert len(next(iter(dm.train_dataloader()))) == dm.batch_size


@pytest.mark.parametrize(
    ("setting", "says"),
    [({"batch_size": 0}, "batch_size: expected > 0, got 0"),
     ({"num_workers": -1}, "num_workers: expected >= 0, got -1")],
)  # fmt: skip
def test_a_python_caller_out_of_range_is_refused_naming_the_setting(
    setting: dict[str, int], says: str
) -> None:
    """The parser refuses these on the command line; a Python caller gets the same range."""
    with pytest.raises(ValueError, match=says):
        LucidDataModule("detect", **setting)  # type: ignore[arg-type]
