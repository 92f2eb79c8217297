"""Small lucid-train fits with a chosen batch layout, and their whole end state (GPU parity suite).

A fit here is a real `lightning.Trainer` fit of a yolo26n task module on the tiny synthetic set,
with batches of chosen sizes (a partial batch between full ones, a partial last one) and images
whose instances are removed, so capture and eager can be compared bit for bit at the end:
weights and buffers, optimizer state, GradScaler, LR schedule, EMA, every logged training loss
and the validation metrics.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from lucid_train.data import LucidDataModule
from lucid_train.data.transport import Batch, Sample, collate
from lucid_train.optim import EMACallback
from lucid_train.run.trainer import build_trainer
from lucid_train.tasks.module import YOLOModule
from lucid_train.tasks.task_modules import module_class

IMG_SIZE = 64
CAPACITY = 16


@dataclass(frozen=True)
class Layout:
    """Batch sizes of one epoch, the (0-based) images whose instances are removed, and the
    accumulation per epoch when it changes during the fit."""

    sizes: tuple[int, ...]
    empty: frozenset[int] = frozenset()
    accumulation: Mapping[int, int] | None = None

    @property
    def full(self) -> int:
        return max(self.sizes)

    def full_batches(self) -> int:
        return self.sizes.count(self.full)

    def partial_batches(self) -> int:
        return len(self.sizes) - self.full_batches()


# Every layout case of the issue in one epoch: full, a partial batch between full ones, a batch
# with one image without instances, a batch without any, and a partial last batch.
# (The small synthetic set has 12 training images.)
MIXED = Layout(sizes=(3, 2, 3, 3, 1), empty=frozenset({6, 8, 9, 10}))


class _FixedBatches(Sampler[list[tuple[int, int]]]):
    """``(epoch, position)`` keys in batches of the layout's sizes, images in order."""

    def __init__(self, sizes: Sequence[int]) -> None:
        self.sizes = tuple(sizes)
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.sizes)

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        start = 0
        for n in self.sizes:
            yield [(self.epoch, p) for p in range(start, start + n)]
            start += n
        self.epoch += 1


class _WithoutInstances(Dataset[Sample]):
    def __init__(self, base: Dataset[Sample], empty: frozenset[int]) -> None:
        self.base = base
        self.empty = empty

    def __len__(self) -> int:
        return len(self.base)  # type: ignore[arg-type]

    def __getitem__(self, key: tuple[int, int]) -> Sample:
        sample = self.base[key]  # type: ignore[index]
        if key[1] not in self.empty:
            return sample
        instance_map = sample.instance_map
        return dataclasses.replace(
            sample,
            targets=sample.targets.like_empty(),
            instance_map=None if instance_map is None else np.zeros_like(instance_map),
        )


class LayoutDataModule(LucidDataModule):
    """The synthetic set served in the batches of a `Layout` (validation unchanged)."""

    def __init__(self, task: str, root: Path, layout: Layout) -> None:
        super().__init__(task, root, img_size=IMG_SIZE, batch_size=layout.full, num_workers=0)  # type: ignore[arg-type]
        self.batch_layout = layout

    def train_dataloader(self) -> DataLoader[Batch]:
        dataset = _WithoutInstances(self.train_dataset(), self.batch_layout.empty)
        return DataLoader(
            dataset, batch_sampler=_FixedBatches(self.batch_layout.sizes), collate_fn=collate
        )


class Probe(L.Callback):
    """Keeps every logged training loss term and, optionally, references to gradients."""

    def __init__(self, keep_gradients: bool = False) -> None:
        self.losses: list[torch.Tensor] = []
        self.keep_gradients = keep_gradients
        self.kept: list[list[torch.Tensor | None]] = []

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, i: int
    ) -> None:
        # every batch's terms (Lightning is handed them only on the batches whose logs it writes);
        # a test module with a training_step of its own keeps no log: its loss alone is kept
        items = pl_module.loss_log.last  # type: ignore[union-attr]
        if items is not None:
            self.losses.append(items.detach().clone())
        self.losses.append(outputs["loss"].detach().clone())

    def on_before_optimizer_step(
        self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: Any
    ) -> None:
        if self.keep_gradients:  # references, not copies: they must keep their values
            self.kept.append([p.grad for p in pl_module.parameters()])


@dataclass
class Fit:
    state: dict[str, Any]
    module: YOLOModule
    trainer: L.Trainer
    probe: Probe


def run_fit(
    task: str,
    root: Path,
    workdir: Path,
    *,
    capture: str,
    precision: str = "32-true",
    accumulate: int = 1,
    module_accumulate: int | str = 1,
    layout: Layout = MIXED,
    epochs: int = 2,
    callbacks: Sequence[L.Callback] = (),
    plugins: Sequence[Any] = (),
    module_type: type[YOLOModule] | None = None,
    keep_gradients: bool = False,
    ckpt_path: Path | None = None,
    checkpoints: bool = False,
    loss_capacity: int | None = CAPACITY,
    accelerator: str = "cuda",
) -> Fit:
    """One fit; TF32 off so ``32-true`` means float32 on both routes. ``accumulate`` is the
    Trainer's ``accumulate_grad_batches``, ``module_accumulate`` the module's own (ramped with
    ``"auto"``); ``loss_capacity`` None leaves the capacity to the module (it grows)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    L.seed_everything(0, workers=True)
    dm = LayoutDataModule(task, root, layout)
    dm.setup("fit")
    s = dm.schema
    cls = module_type or module_class(task)  # type: ignore[arg-type]
    module = cls(
        num_classes=s.num_classes,
        num_keypoints=s.num_keypoints if task == "pose" else None,
        flip_index=s.flip_index,
        img_size=IMG_SIZE,
        capture=capture,
        loss_capacity=loss_capacity,
        accumulate=module_accumulate,
    )
    probe = Probe(keep_gradients)
    extra_callbacks: list[L.Callback] = [probe, *callbacks]
    kwargs: dict[str, Any] = {} if plugins else {"precision": precision}
    if layout.accumulation is not None:
        extra_callbacks.append(
            L.pytorch.callbacks.GradientAccumulationScheduler(layout.accumulation)
        )
    else:
        kwargs["accumulate_grad_batches"] = accumulate
    trainer = build_trainer(
        workdir if checkpoints else None,
        callbacks=extra_callbacks,
        accelerator=accelerator,
        devices=1,
        max_epochs=epochs,
        plugins=list(plugins) or None,
        limit_val_batches=1,
        num_sanity_val_steps=0,
        deterministic="warn",
        enable_progress_bar=False,
        enable_model_summary=False,
        logger=False,
        **kwargs,
    )
    trainer.fit(module, datamodule=dm, ckpt_path=ckpt_path)
    return Fit(end_state(trainer, module, probe), module, trainer, probe)


def end_state(trainer: L.Trainer, module: YOLOModule, probe: Probe) -> dict[str, Any]:
    """Everything a fit leaves behind, flattened to ``{key: tensor or number}``."""
    state: dict[str, Any] = {f"model/{k}": v for k, v in module.state_dict().items()}
    optimizer = trainer.optimizers[0]
    for i, group in enumerate(optimizer.param_groups):
        for key, value in group.items():
            if key != "params":
                state[f"optim/group{i}/{key}"] = value
        # by position: after load_state_dict(assign=True) the optimizer's tensors are no
        # longer the module's, so names cannot key them
        for j, p in enumerate(group["params"]):
            for key, value in optimizer.state.get(p, {}).items():
                state[f"optim/group{i}/{j}/{key}"] = value
    scaler = getattr(trainer.precision_plugin, "scaler", None)
    if scaler is not None:
        for key, value in scaler.state_dict().items():
            state[f"scaler/{key}"] = value
    for key, value in trainer.lr_scheduler_configs[0].scheduler.state_dict().items():
        state[f"schedule/{key}"] = value
    ema = next(cb for cb in trainer.callbacks if isinstance(cb, EMACallback))  # type: ignore[attr-defined]
    if ema.ema is not None:
        for key, value in flat_state(ema.ema.state_dict()).items():
            state[f"ema/{key}"] = value
    for key, value in trainer.callback_metrics.items():
        state[f"metric/{key}"] = value
    for i, value in enumerate(probe.losses):
        state[f"logged/{i}"] = value
    for step, grads in enumerate(probe.kept):
        for j, g in enumerate(grads):
            if g is not None:
                state[f"kept/{step}/{j}"] = g
    state["global_step"] = trainer.global_step
    return state


def flat_state(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested state dicts (and lists) -> ``{dotted key: leaf}``."""
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(flat_state(v, f"{prefix}{k}."))
        return out
    if isinstance(value, list | tuple):
        out = {}
        for i, v in enumerate(value):
            out.update(flat_state(v, f"{prefix}{i}."))
        return out
    return {prefix.rstrip("."): value}


class KilledError(RuntimeError):
    """Raised by `KillAtEpoch`: the run died."""


class KillAtEpoch(L.Callback):
    """Dies at the start of ``epoch`` (after the previous epoch's last.ckpt was written)."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.current_epoch == self.epoch:
            raise KilledError(f"killed at epoch {self.epoch}")


def same(a: Any, b: Any) -> bool:
    """Bitwise for tensors (signed zeros and NaN payloads included), ``==`` otherwise."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return False
        a, b = a.detach().cpu(), b.detach().cpu()
        return (
            a.dtype == b.dtype
            and a.shape == b.shape
            and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))
        )
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b) or (a != a and b != b)  # NaN floats equal each other here


def differences(eager: Mapping[str, Any], replay: Mapping[str, Any]) -> list[str]:
    """Keys whose values differ (or exist on one side only)."""
    keys = sorted(set(eager) | set(replay))
    return [k for k in keys if k not in eager or k not in replay or not same(eager[k], replay[k])]


class ShrinkCapacity(L.Callback):
    """At ``epoch``, a recorded loss capacity of ``rows`` (capture on): the next batch with more
    targets in an image is over it and grows it (`LossCapacity.grow`)."""

    def __init__(self, epoch: int, rows: int) -> None:
        self.epoch, self.rows = epoch, rows
        self.grown_to: int | None = None  # the capacity at the fit's end, when it was shrunk

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        recorder = pl_module.loss_recorder  # type: ignore[attr-defined]
        if trainer.current_epoch == self.epoch and recorder.enabled:
            recorder.capacity = self.rows

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        recorder = pl_module.loss_recorder  # type: ignore[attr-defined]
        if recorder.enabled:
            self.grown_to = int(recorder.capacity)


class CloseMosaicAt(L.Callback):
    """The datamodule's ``close_mosaic_from`` set to ``epoch`` at the fit's start, so the module
    fits its loss capacity again there (`LossCapacity.mosaic_closed`)."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        trainer.datamodule.close_mosaic_from = self.epoch  # type: ignore[attr-defined]
