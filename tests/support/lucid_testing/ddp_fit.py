"""One small data-parallel (or reference) fit, run as a script: each rank saves its end state.

    python -m lucid_testing.ddp_fit --task detect --root DATA --out DIR --devices 2 ...

Lightning's ``ddp`` launcher starts ranks 1.. by running this same command again, so it must be a
script, not a function in a test process. Every rank writes ``DIR/rank<r>.pt``: the end state of
`lucid_testing.trainer_fits.end_state` (weights and buffers, optimizer, GradScaler, schedule,
EMA, metrics), the recorders' counts and every warning raised during the fit.

``--keep-statistics-every W`` makes the one-process reference of a ``W``-rank fit: batch ``i``'s
forward moves the BatchNorm statistics only when ``i % W == 0``. A data-parallel fit broadcasts
rank 0's statistics at each step (assumptions.md T85), and rank 0 trains the batches ``W k`` of
the one-process order (T87), so with that the two fits can agree bit for bit.
"""

from __future__ import annotations

import argparse
import os
import warnings
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.strategies import DDPStrategy

from lucid_testing.trainer_fits import Probe, end_state
from lucid_train.data import LucidDataModule
from lucid_train.distributed import DataParallelStrategy
from lucid_train.run.trainer import build_trainer
from lucid_train.tasks.task_modules import module_class

IMG_SIZE = 64
CAPACITY = 16


class KeepStatisticsEvery(L.Callback):
    """Undo the BatchNorm statistics update of every batch ``i`` with ``i % every != 0``."""

    def __init__(self, every: int) -> None:
        self.every = every
        self._saved: list[torch.Tensor] | None = None

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        index = trainer.fit_loop.epoch_loop.total_batch_idx
        keep = index % self.every == 0
        self._saved = None if keep else [b.clone() for b in pl_module.buffers()]

    def on_after_backward(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._saved is not None:
            for live, saved in zip(pl_module.buffers(), self._saved, strict=True):
                live.copy_(saved)
            self._saved = None


def _mutate(name: str) -> None:
    """Remove one rule of data-parallel training (``LUCID_DDP_MUTATION``), to show that the
    tests which hold it fail without it."""
    import lucid_train.distributed as distributed
    from lucid_train.data import dataset

    if name == "ddp-mean":  # DDP's average instead of the sum (T86)
        summed = distributed.sum_gradients

        def averaged(parameters: Any, **kw: Any) -> None:
            summed(parameters, **kw)
            for p in parameters:
                if p.grad is not None:
                    p.grad.div_(torch.distributed.get_world_size())

        distributed.sum_gradients = averaged  # type: ignore[assignment]
    elif name == "ddp-no-buffer-broadcast":  # each rank keeps its own statistics (T85)
        distributed.broadcast_buffers = lambda module, **kw: None  # type: ignore[assignment]
    elif name == "ddp-strided-sampler":  # positions r, r + W, ... (the sampler before T87)

        def strided(self: Any) -> Any:
            for p in range(self.rank, len(self) * self.world_size, self.world_size):
                yield (self.epoch, p % self.length)

        dataset.EpochSampler.__iter__ = strided  # type: ignore[method-assign]
    elif name:
        raise ValueError(f"unknown LUCID_DDP_MUTATION {name!r}")


def _cpu(value: Any) -> Any:
    return value.detach().cpu().clone() if isinstance(value, torch.Tensor) else value


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--task", default="detect")
    p.add_argument("--root", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--devices", type=int, default=1)
    p.add_argument("--ddp", action="store_true", help="DataParallelStrategy even on 1 device")
    p.add_argument(
        "--lightning-ddp", action="store_true", help="Lightning's own DDPStrategy (the wrapper)"
    )
    p.add_argument("--accelerator", default="cpu")
    p.add_argument("--precision", default="32-true")
    p.add_argument("--capture", default="off")
    p.add_argument("--batch", type=int, required=True, help="global batch (--data.batch_size)")
    p.add_argument("--accumulate", type=int, default=1)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--keep-statistics-every", type=int, default=1)
    p.add_argument("--gradient-clip", type=float, default=10.0, help="0: no clipping")
    args = p.parse_args(argv)

    torch.set_num_threads(1)  # CPU kernels sum in one order whatever the process count
    _mutate(os.environ.get("LUCID_DDP_MUTATION", ""))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    L.seed_everything(0, workers=True)
    dm = LucidDataModule(
        args.task, args.root, img_size=IMG_SIZE, batch_size=args.batch, num_workers=0
    )
    dm.setup("fit")
    s = dm.schema
    module = module_class(args.task)(
        num_classes=s.num_classes,
        num_keypoints=s.num_keypoints if args.task == "pose" else None,
        flip_index=s.flip_index,
        img_size=IMG_SIZE,
        capture=args.capture,
        loss_capacity=CAPACITY,
        accumulate=args.accumulate,
        optimizer="SGD",
        lr0=0.01,
        warmup_epochs=0.0,  # a schedule by epoch only: one- and multi-rank runs count steps alike
    )
    probe = Probe()
    callbacks: list[L.Callback] = [probe]
    if args.keep_statistics_every > 1:
        callbacks.append(KeepStatisticsEvery(args.keep_statistics_every))
    strategy: Any = "auto"
    if args.lightning_ddp:
        strategy = DDPStrategy(start_method="popen")
    elif args.devices > 1 or args.ddp:
        strategy = DataParallelStrategy(start_method="popen")
    trainer = build_trainer(
        None,
        callbacks=callbacks,
        accelerator=args.accelerator,
        devices=args.devices,
        strategy=strategy,
        precision=args.precision,
        max_epochs=args.epochs,
        gradient_clip_val=args.gradient_clip or None,
        limit_val_batches=1,
        deterministic="warn" if args.accelerator != "cpu" else False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(module, datamodule=dm)
    state = {k: _cpu(v) for k, v in end_state(trainer, module, probe).items()}
    recorders = {
        r.name: {
            "recordings": r.stats.recordings,
            "replays": r.stats.replays,
            "retirements": r.stats.retirements,
            "eager": dict(r.stats.eager),
        }
        for r in (module.network_recorder, module.loss_recorder)
    }
    args.out.mkdir(parents=True, exist_ok=True)
    torch.save(
        {
            "state": state,
            "recorders": recorders,
            "warnings": [str(w.message) for w in caught],
            "world_size": trainer.world_size,
            "device_batch": dm.device_batch_size,
        },
        args.out / f"rank{trainer.global_rank}.pt",
    )


if __name__ == "__main__":
    main()
