"""One LightningModule per task over `YOLOModule`'s shared parts: each fixes the task, its dual
loss and, where the task has them, its targets (segment: instance masks built on the device)
and its trained loss parts (pose: the RealNVP flow). `module_class` maps a task to its class.
"""

from __future__ import annotations

from typing import ClassVar

from torch import nn

from lucid_train.data.records import Task
from lucid_train.data.transport import Batch
from lucid_train.losses import DualLoss, PaddedTargets, pad_targets
from lucid_train.losses.flow import RealNVP
from lucid_train.losses.obb import OrientedLoss
from lucid_train.losses.pose import PoseLoss
from lucid_train.losses.segment import SegmentLoss, with_instance_map
from lucid_train.tasks.module import YOLOModule

__all__ = [
    "TASK_MODULES",
    "DetectModule",
    "OBBModule",
    "PoseModule",
    "SegmentModule",
    "module_class",
]


class DetectModule(YOLOModule):
    """Object detection: boxes and classes."""

    task: ClassVar[Task] = "detect"


class SegmentModule(YOLOModule):
    """Instance segmentation: boxes, classes and prototype masks (+ the semantic branch)."""

    task: ClassVar[Task] = "segment"

    def build_criterion(self) -> DualLoss:
        c = self.num_classes
        return DualLoss(SegmentLoss(c), SegmentLoss(c, one_to_one=True))

    def prepare_targets(self, batch: Batch) -> PaddedTargets:
        """Padded boxes plus the instance masks laid out like them (``(B, M, S/4, S/4)``)."""
        return self.device_targets(self.host_targets(batch), batch)

    def host_targets(self, batch: Batch) -> PaddedTargets:
        """The padded boxes only: the masks are built after the transfer (`device_targets`),
        from the small instance map the batch carries, instead of on the host and shipped."""
        return pad_targets(batch, capacity=self.capacity_for(batch), rotated=False)

    def device_targets(self, targets: PaddedTargets, batch: Batch) -> PaddedTargets:
        return with_instance_map(targets, batch.instance_map)


class PoseModule(YOLOModule):
    """Pose: boxes, classes and keypoints. The module owns the RealNVP flow of the RLE term
    (``self.flow``), so the optimizer trains it and checkpoints hold it."""

    task: ClassVar[Task] = "pose"

    def build_criterion(self) -> DualLoss:
        self.flow = RealNVP()
        c = self.num_classes
        return DualLoss(PoseLoss(c, self.flow), PoseLoss(c, self.flow, one_to_one=True))

    def loss_parameters(self) -> nn.Module | None:
        return self.flow


class OBBModule(YOLOModule):
    """Oriented boxes: ``(cx, cy, w, h, angle)``."""

    task: ClassVar[Task] = "obb"

    def build_criterion(self) -> DualLoss:
        c = self.num_classes
        return DualLoss(OrientedLoss(c), OrientedLoss(c, one_to_one=True))


TASK_MODULES: dict[Task, type[YOLOModule]] = {
    "detect": DetectModule,
    "segment": SegmentModule,
    "pose": PoseModule,
    "obb": OBBModule,
}


def module_class(task: Task) -> type[YOLOModule]:
    """The LightningModule class of a task."""
    return TASK_MODULES[task]
