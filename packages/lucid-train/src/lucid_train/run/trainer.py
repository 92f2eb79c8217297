"""A training run on disk and the Trainer that writes it.

Layout of ``runs/<task>/<name>/``::

    checkpoints/last.ckpt, checkpoints/best.ckpt   # last: each epoch start; best: val/mAP50-95
    metrics.csv, hparams.yaml                      # RunCSVLogger (kept across a resume)
    config.yaml                                    # the lucid fit config (`lucid_train.cli`)
    losses.png, metrics.png                        # curves: after validations, every 30 s
    overlays/val_<i>.jpg                           # e2e predictions on a few validation images
    labels.png, PR_curve.png, F1_curve.png, P_curve.png, R_curve.png,
    confusion_matrix.png, confusion_matrix_normalized.png,
    val_mosaic.jpg, results_summary.png            # `lucid_train.report.run_report.RunReport`
    tensorboard/                                   # TensorBoard events of the same metrics

`build_trainer` wires the callbacks: checkpoints, `RunArtifacts`, `RunReport`, the EMA swap,
gradient clipping at 10 (the authors' max norm), ``use_distributed_sampler=False`` (the data
module's `EpochSampler` shards itself). Every file of a run is written atomically (a temporary
file renamed over it, `lucid_train.atomic_files`; checkpoints by `AtomicCheckpointIO`, pickled in
a writer process so neither the training thread nor the GPU waits for a file, and read without
running code).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import sys
import time
import traceback
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback, ModelCheckpoint, ProgressBar, TQDMProgressBar
from lightning.pytorch.loggers import CSVLogger, Logger

from lucid_train.atomic_files import save_image
from lucid_train.data.records import Task
from lucid_train.errors import RunFolderError, SettingError
from lucid_train.report.metrics_log import RunCSVLogger
from lucid_train.run.checkpoint_io import AtomicCheckpointIO
from lucid_train.run.frozen_heap import FrozenHeap
from lucid_train.run.last_checkpoint import LastCheckpoint
from lucid_train.run.skipped_images import SkippedImages

__all__ = [
    "LOG_INTERVAL",
    "MONITOR",
    "EpochThroughput",
    "IntervalProgressBar",
    "RunArtifacts",
    "build_trainer",
    "new_run_dir",
    "run_dir_of_checkpoint",
]

MONITOR = "val/mAP50-95"
GRADIENT_CLIP = 10.0
# Batches between reads of the logged step values (the logger's rows, the progress bar's
# figures): each read waits for the GPU, so not every batch (assumptions.md T65).
LOG_INTERVAL = 10


def new_run_dir(root: str | Path, task: Task, name: str, *, exist_ok: bool = False) -> Path:
    """``root/<task>/<name>``, or ``<name>2``, ``<name>3``, ... when it exists (unless
    ``exist_ok``). The folder is created.

    Raises:
        RunFolderError: ``name`` is not one folder's name (a path would put the run outside
            ``root``, where ``--ckpt_path last`` does not look).
    """
    if not name or name in (".", "..") or any(sep in name for sep in ("/", "\\")):
        raise RunFolderError(
            f"--run.name {name!r}: expected one folder's name, no path; runs go to "
            f"{Path(root) / task}/<name> (pick the place with --run.root)"
        )
    path = Path(root) / task / name
    path = path if exist_ok else numbered(path)
    path.mkdir(parents=True, exist_ok=True)
    return path


def numbered(path: Path) -> Path:
    """``path``, or ``path2``, ``path3``, ...: the first that does not exist."""
    free, n = path, 1
    while free.exists():
        n += 1
        free = path.with_name(f"{path.name}{n}")
    return free


def run_dir_of_checkpoint(ckpt: str | Path) -> Path:
    """The run folder a checkpoint belongs to (``.../<name>/checkpoints/x.ckpt`` -> ``<name>``);
    resuming writes there."""
    p = Path(ckpt).resolve()
    return p.parent.parent if p.parent.name == "checkpoints" else p.parent


PLOT_INTERVAL_S = 30.0  # curves are redrawn at most this often, unless validation ran


class RunArtifacts(Callback):
    """Writes the run's curves (PNG) and prediction overlays, on rank 0: overlays after each
    validation; curves at the end of each epoch that validated, of any epoch at least
    `PLOT_INTERVAL_S` after the last drawing, and of the fit. Drawing them takes about 20 ms
    on the training thread, with the GPU idle; on a small set's one-second epochs, every epoch
    is 2 % of the GPU's time for pictures nobody looks at between validations.

    The module exposes ``overlay_samples`` (records of
    `lucid_train.report.overlays.detections_to_numpy`) and ``hparams["class_names"]`` /
    ``hparams["skeleton"]``.
    """

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self._drawn_at: float | None = None
        self._validated = False

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero:
            return
        from lucid_train.report.overlays import draw_overlay

        out = self.run_dir / "overlays"
        out.mkdir(parents=True, exist_ok=True)
        names = list(pl_module.hparams.get("class_names", ()))
        skeleton = list(pl_module.hparams.get("skeleton", ()))
        for i, rec in enumerate(getattr(pl_module, "overlay_samples", [])):
            save_image(draw_overlay(rec, names, skeleton), out / f"val_{i}.jpg", quality=90)
        self._validated = True

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        due = self._drawn_at is None or time.monotonic() - self._drawn_at >= PLOT_INTERVAL_S
        self._save(trainer, draw=self._validated or due)

    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._save(trainer, draw=True)

    def _save(self, trainer: L.Trainer, draw: bool) -> None:
        """Flush metrics.csv (every call) and, when ``draw``, redraw the curves from it."""
        if draw:
            self._validated, self._drawn_at = False, time.monotonic()
        if not trainer.is_global_zero:
            return
        from lucid_train.report.training_curves import write_run_plots

        for logger in trainer.loggers:
            if isinstance(logger, CSVLogger):
                logger.save()
                if draw:
                    write_run_plots(Path(logger.log_dir) / "metrics.csv", self.run_dir)


class EpochThroughput(Callback):
    """Logs each training epoch's wall time and images per second over all ranks
    (``time/train_epoch_s``, ``time/train_images_per_s`` in metrics.csv): from the first
    batch's start to the last batch's end, validation excluded. The device is synchronised at
    those two points only, never per step. With ``LUCID_EPOCH_MARKS=FILE`` in the environment
    each epoch also appends ``{"epoch", "start", "end"}`` (Unix seconds) to FILE as a JSON line,
    for benchmarks that sample the GPU over exactly those windows (`benchmarks/peer_speed.py`),
    and each validation that ends ``{"epoch", "validated"}``: when its metrics were known, before
    any checkpoint of them is written (the time to accuracy, `benchmarks/peer_ours.py`)."""

    def __init__(self) -> None:
        self._start: float | None = None
        self._seconds: float | None = None
        self._images = 0
        self._wall_start = 0.0

    @staticmethod
    def _now(pl_module: L.LightningModule) -> float:
        import torch

        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)
        return time.perf_counter()

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        if self._start is None:
            self._start, self._images = self._now(pl_module), 0
            self._wall_start = time.time()
        data = batch[0] if isinstance(batch, tuple) else batch
        self._images += len(data)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
        batch_idx: int,
    ) -> None:  # fmt: skip
        # The last batch closes the epoch before its validation runs (inside the epoch loop).
        if self._start is not None and batch_idx + 1 >= trainer.num_training_batches:
            self._seconds = max(self._now(pl_module) - self._start, 1e-9)
            self._start = None
            marks = os.environ.get("LUCID_EPOCH_MARKS")
            if marks and trainer.is_global_zero:
                mark = {"epoch": trainer.current_epoch, "start": self._wall_start,
                        "end": time.time()}  # fmt: skip
                with open(marks, "a") as f:
                    f.write(json.dumps(mark) + "\n")

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Callbacks run in the trainer's order, checkpoint callbacks last: this is before the
        # validation's checkpoints are saved.
        marks = os.environ.get("LUCID_EPOCH_MARKS")
        if marks and trainer.is_global_zero and not trainer.sanity_checking:
            with open(marks, "a") as f:
                f.write(json.dumps({"epoch": trainer.current_epoch, "validated": time.time()}))
                f.write("\n")

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        seconds, self._seconds, self._start = self._seconds, None, None
        if seconds is None:
            return
        pl_module.log("time/train_epoch_s", seconds, on_epoch=True, on_step=False)
        # every rank trains as many images as this one (`EpochSampler`): count them all
        images = self._images * max(trainer.world_size, 1)
        pl_module.log("time/train_images_per_s", images / seconds, on_epoch=True, on_step=False)


def build_loggers(run_dir: Path, resume_epoch: int | None = None) -> list[Logger]:
    """CSV (`RunCSVLogger`, the record: a resumed run keeps the rows of epochs before
    ``resume_epoch``) and TensorBoard events beside it in ``tensorboard/`` (written through
    tensorboardX, a dependency, or tensorboard where installed; assumptions.md T75). Lightning
    turns the logged tensors into numbers once for all loggers, so the second logger adds no
    host read. An environment without either writer (torch preinstalled, our packages on the
    path, as on the GPU machine) trains with the CSV alone and says so once."""
    loggers: list[Logger] = [RunCSVLogger(run_dir, resume_epoch=resume_epoch)]
    if not any(importlib.util.find_spec(m) for m in ("tensorboardX", "tensorboard")):
        print(
            "lucid fit: no TensorBoard events (neither tensorboardX nor tensorboard is "
            "installed; `uv sync` installs tensorboardX); metrics.csv is written as always",
            file=sys.stderr,
        )
        return loggers
    from lightning.pytorch.loggers import TensorBoardLogger

    loggers.append(
        TensorBoardLogger(
            save_dir=str(run_dir), name="tensorboard", version="", default_hp_metric=False
        )
    )
    return loggers


class IntervalProgressBar(TQDMProgressBar):
    """The progress bar, refreshed every ``refresh_rate`` batches, with the latest logged
    training terms (``train/<term>_step``) read only when it refreshes."""

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        shown: dict[str, Any] = dict(super().get_metrics(trainer, pl_module))
        for key, value in trainer.callback_metrics.items():
            if key.startswith("train/") and key.endswith("_step"):
                shown[key.removeprefix("train/").removesuffix("_step")] = float(value)
        return shown


class _NoCloudTip(logging.Filter):
    """Drops Lightning's line advertising its cloud logger ("Tip: ... litlogger"), printed on
    every fit that has no LitLogger; every other line passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "litlogger" not in record.getMessage()


def _quiet_cloud_tip() -> None:
    log = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if not any(isinstance(f, _NoCloudTip) for f in log.filters):
        log.addFilter(_NoCloudTip())


def build_trainer(
    run_dir: Path | None,
    *,
    callbacks: Sequence[Callback] = (),
    ema: bool = True,
    resume_epoch: int | None = None,
    **trainer_kwargs: Any,
) -> L.Trainer:
    """A Trainer writing ``run_dir`` (None: no checkpoints, no logs; for validate/test/predict
    without a run).

    Args:
        run_dir: the run folder.
        callbacks: extra callbacks (appended).
        ema: swap the EMA weights in for validation and checkpoints (`lucid_train.optim`).
        resume_epoch: the epoch a resumed run starts at (its checkpoint's ``epoch``): the run's
            ``metrics.csv`` keeps the rows before it. None for a new run.
        trainer_kwargs: any `lightning.Trainer` argument (``max_epochs``, ``precision``,
            ``accumulate_grad_batches``, ``accelerator``, ...); gradient clipping defaults to 10.
    """
    # The module pads training targets in its own on_before_batch_transfer (on the host, before
    # the copy) while the data comes from a DataModule; Lightning says so on every fit.
    warnings.filterwarnings(
        "ignore", message=r"You have overridden `on_before_batch_transfer` in `LightningModule`"
    )
    # best.ckpt's monitor before any validation ran (validation off, or every n epochs): Lightning
    # asks "did you call log()?"; once validation has run, a missing key raises instead
    warnings.filterwarnings("ignore", message=r"`ModelCheckpoint\(monitor=.val/mAP50-95.\)` could")
    # Lightning's own use of a torch API torch 2.11 deprecates, on every fit: nothing a user
    # of lucid can act on
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")
    _quiet_cloud_tip()
    cbs: list[Callback] = []
    if run_dir is not None:
        # First of all: last.ckpt is written before any other epoch-start hook changes state.
        cbs.append(LastCheckpoint(run_dir / "checkpoints"))
    if ema:
        cbs.extend(_ema_callbacks())
    if run_dir is not None:
        cbs.append(
            ModelCheckpoint(
                dirpath=run_dir / "checkpoints",
                filename="best",
                monitor=MONITOR,
                mode="max",
                save_top_k=1,
                auto_insert_metric_name=False,
                enable_version_counter=False,
            )
        )
        cbs.append(RunArtifacts(run_dir))
        cbs.append(EpochThroughput())
        # -- run report (PR/F1 curves, confusion matrices, labels, mosaic, summary) ----------
        from lucid_train.report.run_report import RunReport

        cbs.append(RunReport(run_dir))
    cbs.append(SkippedImages())  # corrupt training images met mid-epoch, counted
    cbs.append(FrozenHeap())  # validation's result dicts set off no scan of the whole fit
    cbs.extend(callbacks)
    wants_bar = trainer_kwargs.get("enable_progress_bar", True) is not False
    if wants_bar and not any(isinstance(cb, ProgressBar) for cb in cbs):
        cbs.append(IntervalProgressBar(refresh_rate=LOG_INTERVAL))
    kwargs: dict[str, Any] = {
        "gradient_clip_val": GRADIENT_CLIP,
        "use_distributed_sampler": False,
        "num_sanity_val_steps": 0,
        "log_every_n_steps": LOG_INTERVAL,
        "plugins": [AtomicCheckpointIO(background=True)],
    }
    kwargs.update(trainer_kwargs)
    if run_dir is None:
        kwargs.setdefault("logger", False)
        kwargs.setdefault("enable_checkpointing", False)
    else:
        kwargs.setdefault("logger", build_loggers(run_dir, resume_epoch))
        kwargs.setdefault("default_root_dir", str(run_dir))
    try:
        return L.Trainer(callbacks=cbs, **kwargs)
    except (TypeError, ValueError) as err:
        # Lightning's device parsing refuses with plain TypeErrors and ValueErrors ("devices
        # selected with CPUAccelerator should be an int > 0"): a setting, not a bug of ours
        where = traceback.extract_tb(err.__traceback__)[-1].filename.replace(os.sep, "/")
        if "/lightning/" not in where or not ("accelerator" in where or "connector" in where):
            raise
        shown = ", ".join(
            f"--trainer.{k} {kwargs[k]}" for k in ("accelerator", "devices") if k in kwargs
        )
        raise SettingError(f"Lightning refused {shown or 'the devices'}: {err}") from err


def _ema_callbacks() -> list[Callback]:
    from lucid_train.optim import EMACallback

    return [EMACallback()]
