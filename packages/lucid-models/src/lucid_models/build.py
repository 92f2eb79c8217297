"""``build_model``: the one way to build a YOLO26 network by name."""

from __future__ import annotations

from lucid_models.model import YOLO26
from lucid_models.outputs import Task
from lucid_models.scales import parse_model_name

__all__ = ["build_model"]


def build_model(
    name: str,
    *,
    task: Task = "detect",
    num_classes: int = 80,
    num_keypoints: int | None = None,
) -> YOLO26:
    """Build ``yolo26{n,s,m,l,x}`` for a task, freshly initialised.

    Args:
        name: ``"yolo26n"``, ``"yolo26s"``, ``"yolo26m"``, ``"yolo26l"`` or ``"yolo26x"``.
        task: ``"detect"``, ``"segment"``, ``"pose"`` or ``"obb"``.
        num_classes: ``C``.
        num_keypoints: ``K`` for pose. Required there, with no default: it belongs to the
            dataset's keypoint schema (17 for COCO people).

    Example:
        >>> model = build_model("yolo26s", task="pose", num_classes=1, num_keypoints=17)
        >>> model.task, model.num_keypoints
        ('pose', 17)
    """
    scale = parse_model_name(name)
    if task == "pose" and num_keypoints is None:
        raise ValueError(
            "pose needs num_keypoints, the dataset's keypoint count (e.g. 17 for COCO people)"
        )
    return YOLO26(scale, task=task, num_classes=num_classes, num_keypoints=num_keypoints)
