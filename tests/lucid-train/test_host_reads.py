"""A steady training batch reads no device value on the host, except the reads named here.

On a GPU every host read of a device tensor (``.item()``, ``bool()``, ``float()``, ``.tolist()``,
``.cpu()``) waits for the GPU, so the CPU cannot run ahead. This machine has no GPU, so the test
runs the GPU's code path on the CPU (the non-finite guard staged, as on CUDA) and counts every
such call made on the training path of steady batches, by where it comes from. Each allowed
source says why its read is not a wait on the GPU, or how rarely it happens;
``test_capture_trainer_gpu.py`` checks the same on CUDA with torch's sync debug mode.
"""

from __future__ import annotations

import collections
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import lightning as L
import torch

from lucid_train.data import LucidDataModule
from lucid_train.run.trainer import LOG_INTERVAL, build_trainer
from lucid_train.tasks.task_modules import DetectModule

READS = ("item", "__bool__", "__float__", "__int__", "__index__", "tolist", "cpu")

# source -> why it is allowed; a source is the first frame of the stack that matches it
ALLOWED = {
    "torch/optim/": "the optimizer's step counters: host tensors on every device (non-fused)",
    "padded_targets.py:pad_targets": "targets laid out on the host before the copy to the device",
    "nonfinite.py:gate_step": "no GradScaler: one read of the flag per optimizer step",
    "trainer.py:get_metrics": f"the progress bar, every {LOG_INTERVAL} batches and at epoch end",
}


class _Counter:
    def __init__(self) -> None:
        self.active = False
        self.reads: collections.Counter[str] = collections.Counter()

    def source(self) -> str:
        frames = traceback.extract_stack()[:-2]
        for frame in reversed(frames):
            where = f"{Path(frame.filename).name}:{frame.name}"
            for allowed in ALLOWED:
                if allowed in frame.filename or allowed == where:
                    return allowed
        outside = [f for f in frames if "/torch/" not in f.filename]
        return " < ".join(f"{Path(f.filename).name}:{f.name}" for f in outside[-3:][::-1])


@contextmanager
def _counting(counter: _Counter) -> Iterator[None]:
    originals = {name: getattr(torch.Tensor, name) for name in READS}

    def wrap(original: Callable[..., Any]) -> Callable[..., Any]:
        def counted(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if counter.active:
                counter.reads[counter.source()] += 1
            return original(self, *args, **kwargs)

        return counted

    try:
        for name, original in originals.items():
            setattr(torch.Tensor, name, wrap(original))
        yield
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)


class _SteadyWindow(L.Callback):
    """Counts from the third batch to the epoch's end (the first ones build state)."""

    def __init__(self, counter: _Counter) -> None:
        self.counter = counter
        self.batches = 0

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        if trainer.global_step >= 2:
            self.counter.active = True
            self.batches += 1

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.counter.active = False


def test_steady_batches_read_nothing_on_the_host_but_the_named_reads(
    small_synthetic: Callable[[str], Path], tmp_path: Path
) -> None:
    L.seed_everything(0)
    dm = LucidDataModule(
        "detect", small_synthetic("detect"), img_size=64, batch_size=2, num_workers=1
    )
    dm.setup("fit")
    module = DetectModule("yolo26n", num_classes=dm.schema.num_classes, accumulate=1)
    module.finite_guard.lagged = True  # the CUDA path
    counter = _Counter()
    window = _SteadyWindow(counter)
    trainer = build_trainer(
        tmp_path,
        max_epochs=1,
        limit_train_batches=5,
        limit_val_batches=0,
        enable_model_summary=False,
        callbacks=[window],
    )
    with _counting(counter):
        trainer.fit(module, datamodule=dm)
    assert window.batches >= 3
    unexpected = {k: v for k, v in counter.reads.items() if k not in ALLOWED}
    assert not unexpected, f"host reads of steady batches from unnamed places: {unexpected}"
    # the gate reads once per optimizer step (one a batch here), the bar only when it refreshes
    assert counter.reads["nonfinite.py:gate_step"] == window.batches
    refreshes = 1 + window.batches // LOG_INTERVAL
    assert counter.reads["runs.py:get_metrics"] <= refreshes * 3


def test_the_counter_catches_the_per_batch_read_the_guard_replaced() -> None:
    from lucid_train.tasks.nonfinite import check_finite_loss

    counter = _Counter()
    counter.active = True
    with _counting(counter):
        check_finite_loss(0, torch.ones(()), torch.ones(2), ("a", "b"))
    assert counter.reads and not set(counter.reads) & set(ALLOWED), counter.reads
