"""The deploy view: what inference reads, sharing the trained model's parameters.

The view holds the backbone, the neck, the one-to-one branch without the training-only keypoint
sigma and, for segmentation, the prototypes. The one-to-many branch and the semantic aux head are
absent, not disabled, so the view's ``state_dict`` and parameter count are those of a deployed
model.

Note:
    The parts are shared, not copied: ``view.eval()`` also puts the shared backbone, neck and
    branch of the trained model in eval mode, and training the model changes the view.
"""

from __future__ import annotations

from torch import Tensor, nn

from lucid_models.anchors import make_anchors
from lucid_models.outputs import ModelOutput, Task
from lucid_models.segmentation import Prototypes

__all__ = ["DeployView"]


class DeployView(nn.Module):
    """Backbone, neck and the one-to-one branch (plus prototypes) of a trained model; built by
    :meth:`YOLO26.deploy`, which hands over its parts (so this module needs nothing of the
    model's).

    Shapes:
        ``images``: ``(B, 3, H, W)`` -> :class:`ModelOutput` with ``one2many=None`` and
        ``semantic_logits=None``; ``one2one.keypoint_sigmas`` is ``None`` for pose.
    """

    def __init__(
        self,
        *,
        task: Task,
        num_classes: int,
        num_keypoints: int | None,
        strides: tuple[int, ...],
        backbone: nn.Module,
        neck: nn.Module,
        one2one: nn.Module,
        prototypes: Prototypes | None,
    ) -> None:
        super().__init__()
        self.task: Task = task
        self.num_classes = num_classes
        self.num_keypoints = num_keypoints
        self.strides = strides
        self.backbone = backbone
        self.neck = neck
        self.one2one = one2one
        self.prototypes = prototypes

    def forward(self, images: Tensor) -> ModelOutput:
        """``(B, 3, H, W)`` -> :class:`ModelOutput` of the one-to-one branch."""
        feats = self.neck(self.backbone(images))
        one2one = self.one2one(feats)
        points, strides = make_anchors(
            [(f.shape[-2], f.shape[-1]) for f in feats], self.strides, device=images.device
        )
        out = ModelOutput(one2one, None, points, strides)
        if self.prototypes is not None:
            out.prototypes = self.prototypes(self.prototypes.fuse_levels(feats))
        return out
