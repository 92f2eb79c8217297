"""`YOLOModule`, the LightningModule of every task (each task's subclass: `task_modules`).

A module owns the network (`lucid_models.build_model`), the criterion (the dual loss with the
task's extras; pose's RealNVP flow lives in it, so it trains and is checkpointed) and the ProgLoss
weight as a 0-d buffer updated at each epoch start. A training step is::

    targets = self.prepare_targets(batch)       # padded per batch, validity mask, no host sync
    output = self.forward_network(images)       # replayed by the network recorder on CUDA
    terms = self.compute_loss(output, targets)  # replayed by the loss recorder on CUDA

Capture (``lucid_capture``) is on by default on CUDA and off elsewhere (``capture="auto"``):
the network and the loss (assignment + every term, on targets padded to ``loss_capacity``) are
recorded as CUDA graphs once and replayed; ``capture_network`` / ``capture_loss`` turn each
off. The recorders are not submodules, so state-dict keys, EMA and checkpoints are those of an
eager run. Every step that runs eager is counted with its reason and the fit ends with the
summary (`lucid_capture.lightning.CaptureCallback`, added by `configure_callbacks`).

Validation decodes both paths from one forward (`lucid_train.tasks.validation`) and logs
``val/<path>/mAP50-95`` etc.; the monitored ``val/mAP50-95`` is the end-to-end path's box (obb:
rotated) mAP50-95 (assumptions.md T52). The EMA weights are swapped in for validation by
`lucid_train.optim.EMACallback`, which `lucid_train.run.trainer.build_trainer` adds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import lightning as L
import torch
from lightning.pytorch.strategies import SingleDeviceStrategy
from torch import Tensor, nn

from lucid_capture import LossRecorder, NetworkRecorder, Recorder
from lucid_capture.lightning import CaptureCallback
from lucid_models import Detections, ModelOutput, build_model, topk_decode
from lucid_train.data.records import DatasetSchema, Task
from lucid_train.data.transport import Batch
from lucid_train.distributed import DataParallelStrategy, sum_over_ranks
from lucid_train.errors import SettingError, check_range
from lucid_train.losses import DualLoss, LossTerms, PaddedTargets, o2m_weight, pad_targets
from lucid_train.model_spec import model_name, parse_model
from lucid_train.report.overlays import detections_to_numpy
from lucid_train.tasks.capacity import CAPTURE_CAPACITY, LossCapacity, print_once
from lucid_train.tasks.loss_log import TrainingLossLog
from lucid_train.tasks.recipe import OptimizerConfig, OptimizerName
from lucid_train.tasks.stepping import SteppingModule
from lucid_train.tasks.validation import DecodeSettings, Scorers, ValidationScorer, format_table
from lucid_train.weights import WeightsReport, load_weights

__all__ = [
    "SCHEMA_ARGUMENTS",
    "CaptureMode",
    "CaptureSettings",
    "OverlaySample",
    "YOLOModule",
    "schema_arguments",
]

OVERLAY_IMAGES = 4  # validation images drawn with their predictions under runs/
CAPTURE_MODES = ("auto", "on", "off")
CaptureMode = Literal["auto", "on", "off"]
# The module arguments that describe the dataset's labels rather than the training: a fit takes
# them from its data (`schema_arguments`), so ``lucid fit`` has no flag for them.
SCHEMA_ARGUMENTS = (
    "num_classes",
    "class_names",
    "category_ids",
    "num_keypoints",
    "keypoint_names",
    "flip_index",
    "skeleton",
)


class OverlaySample(dict[str, Any]):
    """One validation canvas and its end-to-end detections (numpy, canvas pixels) for overlays:
    keys ``image`` (S, S, 3) uint8, ``boxes`` (D, 4), ``scores`` (D,), ``labels`` (D,) and, as the
    task has them, ``masks`` (D, S, S) bool, ``rotated`` (D, 5), ``keypoints`` (D, K, 3)."""


@dataclass(frozen=True)
class CaptureSettings:
    """What the module records as CUDA graphs (its ``capture*`` arguments, checked).

    Attributes:
        mode: ``auto`` (on CUDA), ``on`` or ``off``.
        network, loss: each recorder on its own (with the mode on).
    """

    mode: CaptureMode = "auto"
    network: bool = True
    loss: bool = True


class YOLOModule(SteppingModule):
    """Shared training, validation and prediction of a YOLO26 model; subclasses fix the task.

    Every argument is stored in the checkpoint's ``hyper_parameters`` (the task too), so a
    checkpoint alone rebuilds the module (`lucid_train.tasks.restore.load_module`).

    Args:
        model: the model name, ``yolo26<scale>`` with or without the task suffix
            (``lucid fit --model yolo26s-seg``: the suffix picks the task and so the class).
        num_classes: ``C``.
        class_names: one name per class (for overlays and predictions).
        category_ids: the dataset's id of each class (COCO evaluation).
        num_keypoints: ``K`` (pose only).
        keypoint_names, flip_index, skeleton: the pose schema.
        optimizer: ``auto`` (the authors' rule: MuSGD for long runs, else AdamW), ``MuSGD``,
            ``AdamW`` or ``SGD``.
        lr0: initial learning rate; None takes the rule's (``auto``) or 0.01.
        lrf: final learning rate as a fraction of ``lr0`` (linear schedule).
        momentum, weight_decay: as the authors name them (weight decay is scaled by the
            nominal batch, as theirs).
        warmup_epochs, warmup_momentum, warmup_bias_lr: the warm-up.
        nbs: nominal batch size.
        accumulate: batches whose gradients are summed per optimizer step: ``auto`` (the
            authors' ``round(nbs / batch)``, ramped from 1 during warm-up) or a fixed count.
            The module accumulates itself (`lucid_train.optim.AccumulationPlan`), so while
            this resolves to more than 1 the Trainer's ``accumulate_grad_batches`` must be 1.
        max_det: detections per image at validation and prediction.
        img_size: the training canvas side (prediction letterboxes to it).
        capture: record and replay the network and loss as CUDA graphs: ``auto`` (on CUDA),
            ``on`` or ``off``.
        capture_network, capture_loss: each recorder on its own (with ``capture`` on).
        loss_capacity: targets per image the loss is padded to; batches with more run eager
            (reason ``over capacity``). ``None``: with capture on, fitted to the first
            training batch and grown by busier ones (`capacity_for`), else each batch's own
            largest count. The loss's value does not depend on it (docs/capture.md, "Padding
            capacity"); its cost grows with it.
        task: the task the checkpoint was written for; must match the class.
        weights: start from these weights (`lucid_train.weights.load_weights`: a lucid
            checkpoint or weights file, or the authors' ``yolo26*.pt``); the summary line is
            printed. Not a hyper-parameter: a checkpoint of the run holds the weights
            themselves, so rebuilding it never reads the file again.
    """

    task: ClassVar[Task] = "detect"
    o2m_weight: Tensor

    def __init__(
        self,
        model: str = "yolo26n",
        *,
        num_classes: int = 80,
        class_names: Sequence[str] = (),
        category_ids: Sequence[int] = (),
        num_keypoints: int | None = None,
        keypoint_names: Sequence[str] = (),
        flip_index: Sequence[int] = (),
        skeleton: Sequence[Sequence[int]] = (),
        optimizer: OptimizerName = "auto",
        lr0: float | None = None,
        lrf: float = 0.01,
        momentum: float = 0.937,
        weight_decay: float = 5e-4,
        warmup_epochs: float = 3.0,
        warmup_momentum: float = 0.8,
        warmup_bias_lr: float | None = None,
        nbs: int = 64,
        accumulate: int | str = "auto",
        max_det: int = 300,
        img_size: int = 640,
        capture: CaptureMode = "auto",
        capture_network: bool = True,
        capture_loss: bool = True,
        loss_capacity: int | None = None,
        task: Task | None = None,
        weights: str | None = None,
    ) -> None:
        super().__init__()
        spec = parse_model(model)
        if task is not None and task != self.task:
            raise ValueError(f"{type(self).__name__} trains {self.task}, got task={task!r}")
        if spec.name != spec.scale and spec.task != self.task:
            raise ValueError(
                f"model {model!r} is for task {spec.task}; {type(self).__name__} trains {self.task}"
            )
        if capture not in CAPTURE_MODES:
            raise SettingError(f"capture must be one of {CAPTURE_MODES}, got {capture!r}")
        for name, value in (("loss_capacity", loss_capacity), ("max_det", max_det)):  # 0: none
            check_range(name, value, low=1, flag=f"--model.{name}")
        self.save_hyperparameters(ignore=["task", "weights"])
        self.hparams["task"] = self.task
        self.hparams["model"] = model_name(spec.scale, self.task)
        names = tuple(class_names) or tuple(str(i) for i in range(num_classes))
        self.hparams["class_names"] = names
        self.hparams["category_ids"] = tuple(category_ids) or tuple(range(num_classes))
        # The settings, typed and built once; the hyper-parameters keep the arguments as given.
        self.optimizer_config = OptimizerConfig(
            optimizer=optimizer,
            lr0=lr0,
            lrf=lrf,
            momentum=momentum,
            weight_decay=weight_decay,
            warmup_epochs=warmup_epochs,
            warmup_momentum=warmup_momentum,
            warmup_bias_lr=warmup_bias_lr,
            nbs=nbs,
        )
        self.accumulate = accumulate
        self.num_classes = num_classes
        self.capture_settings = CaptureSettings(capture, capture_network, capture_loss)
        self.model = build_model(
            spec.scale, task=self.task, num_classes=num_classes, num_keypoints=num_keypoints
        )
        self.criterion = self.build_criterion()
        # the one-to-many weight of the dual loss; a tensor so a recorded loss reads its value
        self.register_buffer("o2m_weight", torch.tensor(o2m_weight(0, 1)), persistent=True)
        self.decode_settings = DecodeSettings(
            max_det=max_det, score_threshold=0.01 if self.task == "obb" else 0.001
        )
        self.scorer: ValidationScorer | None = None
        self._scorers = Scorers()  # each epoch's, the split's ground truth indexed once
        self.overlay_samples: list[OverlaySample] = []
        self.last_metrics: dict[str, float] = {}
        self.loss_log = TrainingLossLog()  # the training terms, logged when Lightning writes
        self.channels_last = False  # set for a fit on CUDA (DESIGN §6), see `setup`
        # Disabled until a fit's CaptureCallback turns them on (outside a fit: plain eager).
        self.network_recorder = NetworkRecorder(self.model, name="network", enabled=False)
        self.loss_recorder = LossRecorder(
            self._criterion,
            capacity=CAPTURE_CAPACITY if loss_capacity is None else loss_capacity,
            rows=_padded_rows,
            module=self.loss_parameters(),
            name="loss",
            enabled=False,
        )
        self.capacity = LossCapacity(self.loss_recorder, loss_capacity)
        self.weights_report: WeightsReport | None = None
        if weights is not None:
            self.weights_report = load_weights(self, weights)
            print_once(self.weights_report.summary())

    # -- capture -----------------------------------------------------------------------------

    def configure_callbacks(self) -> list[L.Callback]:
        mode = self.capture_settings.mode
        on_cuda = self.trainer.strategy.root_device.type == "cuda"
        enabled = mode == "on" or (mode == "auto" and on_cuda)
        # The replays write .grad themselves where nothing else accumulates into it: one device,
        # or lucid's data parallelism, which sums .grad after the backward. Torch's DDP reducer
        # (any other multi-device strategy) watches each parameter's accumulator from C++.
        strategy = self.trainer.strategy
        in_place = isinstance(strategy, (SingleDeviceStrategy, DataParallelStrategy))
        for recorder in (self.network_recorder, self.loss_recorder):
            recorder.grads_in_place = in_place
        return [CaptureCallback(enabled=enabled, verbose=enabled)]

    def loss_parameters(self) -> nn.Module | None:
        """The module whose parameters the loss trains (pose: the RealNVP flow), if any."""
        return None

    def capture_recorders(self) -> list[Recorder]:
        """The recorders a fit's `CaptureCallback` activates (the ones turned on by name)."""
        chosen: list[Recorder] = []
        if self.capture_settings.network:
            chosen.append(self.network_recorder)
        if self.capture_settings.loss:
            chosen.append(self.loss_recorder)
        return chosen

    @property
    def target_capacity(self) -> int | None:
        """Rows per image the training targets are padded to (None: each batch's largest)."""
        return self.capacity.target

    # -- parts -------------------------------------------------------------------------------

    @property
    def schema(self) -> DatasetSchema:
        """The label schema stored in the hyper-parameters."""
        h = self.hparams
        names = tuple(h["keypoint_names"])
        if not names and self.task == "pose":  # built from a count alone: keypoints by index
            names = tuple(str(k) for k in range(h["num_keypoints"] or 0))
        return DatasetSchema(
            self.task,
            tuple(h["class_names"]),
            tuple(h["category_ids"]),
            keypoint_names=names,
            flip_index=tuple(h["flip_index"]),
            skeleton=tuple((int(p[0]), int(p[1])) for p in h["skeleton"]),
        )

    def build_criterion(self) -> DualLoss:
        """The dual loss of this task (one-to-many + one-to-one, the task's extras)."""
        return DualLoss.for_detection(self.num_classes)

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Training batches gain their padded targets here, on the host, so laying them out
        reads no device value. They travel as a plain dict of fields (Lightning moves every
        tensor in it), so subclasses such as `SegmentTargets` arrive whole. On CUDA they are
        pinned, as the loader pins the batch: a copy from pageable memory may wait for the GPU."""
        if self.trainer.training and isinstance(batch, Batch):
            targets = self.host_targets(batch)
            pin = self.trainer.strategy.root_device.type == "cuda"
            fields = {f.name: getattr(targets, f.name) for f in dataclasses.fields(targets)}
            if pin:
                fields = {k: _pinned(v) for k, v in fields.items()}
            return batch, {"type": type(targets), "fields": fields}
        return batch

    def prepare_targets(self, batch: Batch) -> PaddedTargets:
        """Flat batch targets laid out at `target_capacity` rows per image (a batch that does
        not fit: its own largest count, never truncated), with a validity mask
        (`lucid_train.losses.pad_targets`). Rotated boxes by task, not by the batch: a batch
        without instances must have the structure of any other (a recorded loss checks it)."""
        return pad_targets(batch, capacity=self.capacity_for(batch), rotated=self.task == "obb")

    def host_targets(self, batch: Batch) -> PaddedTargets:
        """The part of `prepare_targets` a training batch gets on the host, before its transfer;
        `device_targets` finishes it where the batch lands (the whole of it, by default)."""
        return self.prepare_targets(batch)

    def device_targets(self, targets: PaddedTargets, batch: Batch) -> PaddedTargets:
        """`host_targets`' result completed on the batch's device (nothing left, by default)."""
        return targets

    def capacity_for(self, batch: Batch) -> int | None:
        """`target_capacity` when ``batch`` fits it, else None (the batch's own largest); with
        capture on and no `loss_capacity` given, fitted and grown by `LossCapacity`."""
        trainer = self._trainer  # None outside a fit
        closes = getattr(getattr(trainer, "datamodule", None), "close_mosaic_from", None)
        return self.capacity.for_batch(
            batch, self.target_capacity, epoch=self.current_epoch, close_mosaic_from=closes
        )

    def forward_network(self, images: Tensor) -> ModelOutput:
        """``(B, 3, S, S)`` -> `ModelOutput`; the one place the network runs, through its
        recorder (which runs the model eagerly when capture is off or the call does not match).
        Images take the model's memory layout (channels-last after a fit's `setup` on CUDA)."""
        if self.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        out: ModelOutput = self.network_recorder(images)
        return out

    def compute_loss(
        self, output: ModelOutput, targets: PaddedTargets, image_size: tuple[int, int]
    ) -> LossTerms:
        """The dual loss of one batch; the one place the loss runs, through its recorder. The
        ProgLoss weight goes in as the 0-d buffer ``o2m_weight``, so a recording reads each
        epoch's value."""
        terms: LossTerms = self.loss_recorder(output, targets, self.o2m_weight, image_size)
        return terms

    def _criterion(
        self, output: ModelOutput, targets: PaddedTargets, weight: Tensor, size: tuple[int, int]
    ) -> LossTerms:
        return self.criterion(output, targets, weight, size)

    def forward(self, images: Tensor) -> ModelOutput:
        return self.forward_network(images)

    # -- training ----------------------------------------------------------------------------

    def setup(self, stage: str) -> None:
        # Before the move to the device and before callbacks copy the weights (EMA), so every
        # copy and the optimizer state share the layout: foreach updates stay on the fast path.
        if stage == "fit" and self.trainer.strategy.root_device.type == "cuda":
            self.model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
            self.channels_last = True

    def on_train_start(self) -> None:
        self.finite_guard.reset()
        # Data parallel: the ranks agree on the flag at each step (assumptions.md T88).
        self.finite_guard.configure(self.trainer.world_size, sum_over_ranks, self.device)
        super().on_train_start()  # an open accumulation window's gradients, from a resume

    def on_train_epoch_start(self) -> None:
        epochs = self.trainer.max_epochs or 1
        self.o2m_weight.fill_(o2m_weight(self.current_epoch, epochs))
        self.loss_log.reset()  # an epoch interrupted before its end leaves nothing behind

    def training_step(self, batch: tuple[Batch, dict[str, Any]], batch_idx: int) -> Tensor:
        data, packed = batch
        targets = self.device_targets(packed["type"](**packed["fields"]), data)
        images = data.render().float_images()  # device rendering paints here (else a no-op)
        output = self.forward_network(images)
        terms = self.compute_loss(output, targets, (int(images.shape[-2]), int(images.shape[-1])))
        self.finite_guard.observe(self.global_step, terms.total, terms.items, terms.names)
        bs = len(data)
        items = self.loss_log.add(terms.items, terms.total, terms.names, bs)  # a copy
        # Lightning gets the step values only when it writes them, the epoch means at the end
        # (`loss_log`). Not prog_bar: Lightning would turn them into numbers every batch, a wait
        # for the GPU each time; the run's bar shows them every LOG_INTERVAL batches instead.
        # The epoch's last batch too, so that the fit ends with the last batch's step values in
        # `callback_metrics`, as Lightning's per-batch logging left them (Lightning writes no row
        # for it unless its cadence says so).
        if _writes_logs_now(self.trainer) or batch_idx + 1 == self.trainer.num_training_batches:
            for name, value in zip(terms.names, items.unbind(0), strict=True):
                self.log(f"train/{name}_step", value, on_step=True, on_epoch=False, batch_size=bs)
        total: Tensor = terms.total
        return total

    def on_train_epoch_end(self) -> None:
        self.finite_guard.flush()
        for key, value in self.loss_log.epoch_means().items():
            self.log(key, value, on_step=False, on_epoch=True)
        self.loss_log.reset()

    def on_train_end(self) -> None:
        self.finite_guard.flush()

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self.finite_guard.flush()  # no checkpoint from a step whose verdict is still staged
        super().on_save_checkpoint(checkpoint)  # an open accumulation window's gradients

    # -- validation and test -----------------------------------------------------------------

    def _start_scoring(self, stage: str) -> None:
        dm = getattr(self.trainer, "datamodule", None)
        self.scorer = self._scorers(self.schema, dm, stage, self.decode_settings)
        self.overlay_samples = []

    def on_validation_epoch_start(self) -> None:
        self._start_scoring("val")

    def on_test_epoch_start(self) -> None:
        self._start_scoring("test")

    def _score_step(self, batch: Batch) -> dict[str, Detections]:
        assert self.scorer is not None
        output = self.forward_network(batch.float_images())
        decoded = self.scorer.update(output, batch)
        if len(self.overlay_samples) < OVERLAY_IMAGES:
            self._keep_overlays(batch, output, decoded["e2e"])
        return decoded

    def validation_step(self, batch: Batch, batch_idx: int) -> dict[str, Detections]:
        """Scores the batch; returns ``{"e2e": Detections}`` (canvas pixels, on the device) for
        callbacks' ``on_validation_batch_end`` (`lucid_train.report.run_report.RunReport`)."""
        return {"e2e": self._score_step(batch)["e2e"]}

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self._score_step(batch)

    def _finish_scoring(self, stage: str) -> None:
        assert self.scorer is not None
        metrics = self.scorer.compute()
        self.last_metrics = metrics
        for key, value in metrics.items():
            self.log(f"{stage}/{key}", value, prog_bar=key == "mAP50-95", sync_dist=True)
        if not self.trainer.sanity_checking:
            self.print(
                f"\nepoch {self.current_epoch} {stage} (monitored: {stage}/mAP50-95 = e2e box)\n"
                + format_table(metrics, self.scorer.images, self.scorer.instances)
            )

    def on_validation_epoch_end(self) -> None:
        self._finish_scoring("val")

    def on_test_epoch_end(self) -> None:
        self._finish_scoring("test")

    def _keep_overlays(self, batch: Batch, output: ModelOutput, det: Detections) -> None:
        room = OVERLAY_IMAGES - len(self.overlay_samples)
        for sample in detections_to_numpy(batch.images, output, det, limit=room):
            self.overlay_samples.append(OverlaySample(sample))

    # -- prediction --------------------------------------------------------------------------

    def predict_step(self, batch: Batch | Tensor, batch_idx: int) -> Detections:
        """End-to-end detections (canvas pixels) of a `Batch` or of ``(B, 3, S, S)`` images in
        ``[0, 1]``; ``lucid predict`` (`lucid_train.cli.predict`) adds the source-pixel mapping."""
        images = batch if isinstance(batch, Tensor) else batch.float_images()
        return topk_decode(self.forward_network(images), max_det=self.decode_settings.max_det)


def _writes_logs_now(trainer: L.Trainer) -> bool:
    """Whether Lightning writes this training batch's step logs (every ``log_every_n_steps``).
    Its logger connector knows; without one (another Lightning), every batch is logged."""
    connector = getattr(trainer, "_logger_connector", None)
    return bool(getattr(connector, "should_update_logs", True))


def _pinned(value: Any) -> Any:
    return value.pin_memory() if isinstance(value, Tensor) and not value.is_pinned() else value


def _padded_rows(args: Sequence[Any]) -> int:
    """Rows per image of the targets in a ``compute_loss`` call (the loss recorder's check)."""
    targets: PaddedTargets = args[1]
    return int(targets.mask.shape[1])


def schema_arguments(schema: DatasetSchema) -> dict[str, Any]:
    """The `SCHEMA_ARGUMENTS` of a module trained on data with ``schema``."""
    return {
        "num_classes": schema.num_classes,
        "class_names": schema.class_names,
        "category_ids": schema.category_ids,
        "num_keypoints": schema.num_keypoints if schema.task == "pose" else None,
        "keypoint_names": schema.keypoint_names,
        "flip_index": schema.flip_index,
        "skeleton": schema.skeleton,
    }
