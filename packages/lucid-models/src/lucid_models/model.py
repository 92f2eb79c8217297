"""``YOLO26``: backbone, neck and head for one task, with a deploy view."""

from __future__ import annotations

from torch import Tensor, nn

from lucid_models.backbone import Backbone
from lucid_models.deploy import DeployView
from lucid_models.heads import Head
from lucid_models.neck import Neck
from lucid_models.outputs import ModelOutput, Task
from lucid_models.scales import Scale

__all__ = ["YOLO26"]


class YOLO26(nn.Module):
    """A YOLO26 network for detection, segmentation, pose or oriented boxes.

    Input: ``(B, 3, H, W)`` float images (the caller normalises, e.g. to ``[0, 1]``). ``H`` and
    ``W`` need not be multiples of 32, though the authors train at such sizes.

    Output: a :class:`ModelOutput` with both branches (one-to-one on detached features), the
    anchors and, for segmentation, the prototypes and (training mode only) the semantic logits.

    Args:
        scale: the compound-scaling row (see :data:`lucid_models.scales.SCALES`).
        task: ``"detect"``, ``"segment"``, ``"pose"`` or ``"obb"``.
        num_classes: ``C``.
        num_keypoints: ``K``, required for pose and rejected otherwise.
        backbone, neck, head: injected parts; ``None`` builds the YOLO26 default.
    """

    def __init__(
        self,
        scale: Scale,
        *,
        task: Task,
        num_classes: int,
        num_keypoints: int | None = None,
        backbone: Backbone | None = None,
        neck: Neck | None = None,
        head: Head | None = None,
    ) -> None:
        super().__init__()
        if task not in ("detect", "segment", "pose", "obb"):
            raise ValueError(f"expected task detect, segment, pose or obb, got {task!r}")
        if num_classes < 1:
            raise ValueError(f"expected num_classes >= 1, got {num_classes}")
        if task != "pose" and num_keypoints is not None:
            raise ValueError(f"num_keypoints is for pose only, got {num_keypoints} for {task!r}")
        self.scale = scale
        self.task: Task = task
        self.num_classes = num_classes
        self.num_keypoints = num_keypoints
        self.backbone = Backbone(scale) if backbone is None else backbone
        neck_module = Neck(scale) if neck is None else neck
        self.neck = neck_module
        self.head = (
            Head(neck_module.out_channels, task, num_classes, num_keypoints=num_keypoints)
            if head is None
            else head
        )

    @property
    def strides(self) -> tuple[int, ...]:
        """Strides of the three head levels: ``(8, 16, 32)``."""
        return self.head.strides

    def forward(self, images: Tensor) -> ModelOutput:
        """``(B, 3, H, W)`` -> :class:`ModelOutput`."""
        return self.head(self.neck(self.backbone(images)))  # type: ignore[no-any-return]

    def deploy(self) -> DeployView:
        """A view sharing this model's parameters that holds only what inference reads."""
        return DeployView(
            task=self.task,
            num_classes=self.num_classes,
            num_keypoints=self.num_keypoints,
            strides=self.strides,
            backbone=self.backbone,
            neck=self.neck,
            one2one=self.head.one2one.inference_view(),
            prototypes=self.head.prototypes,
        )
