"""ONNX export of the deploy view with the end-to-end decode baked in.

The exported graph is the deploy view plus :func:`lucid_models.decode.topk_decode` for one fixed
input shape: a TopK node, no NonMaxSuppression. It uses the TorchScript-based exporter
(``dynamo=False``) at opset :data:`ONNX_OPSET`, which needs neither ``onnx`` nor ``onnxscript`` to
write the file; checking the file with ``onnxruntime`` is the caller's (and the tests') business.
The file is written beside its target under a temporary name and renamed over it when whole, so a
failed or interrupted export never leaves a truncated ``.onnx``.

Outputs, in order (``k = max_det``):

==================== ======================= ===================================
name                 shape                   meaning
==================== ======================= ===================================
``boxes``            ``(B, k, 4)`` float32   ``x1, y1, x2, y2`` pixels
``scores``           ``(B, k)`` float32      sigmoid score, 0 for padding
``labels``           ``(B, k)`` int64        class, -1 for padding
``mask_coefficients`` ``(B, k, 32)``         segment only
``prototypes``       ``(B, 32, H/4, W/4)``   segment only
``rotated``          ``(B, k, 5)``           obb only, ``cx, cy, w, h, angle``
``keypoints``        ``(B, k, K, 3)``        pose only, ``x, y, visibility``
==================== ======================= ===================================
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import torch
from torch import Tensor, nn

from lucid_models.decode import topk_decode
from lucid_models.deploy import DeployView
from lucid_models.model import YOLO26

__all__ = ["ONNX_OPSET", "EndToEndGraph", "export_onnx"]

ONNX_OPSET = 17


class EndToEndGraph(nn.Module):
    """Deploy view + top-k decode, returning a flat tuple of tensors (see the module table).

    Shapes:
        ``images``: ``(B, 3, H, W)`` -> the tuple named by :attr:`output_names`.
    """

    def __init__(self, view: DeployView, max_det: int = 300) -> None:
        super().__init__()
        self.view = view
        self.max_det = max_det
        extra = {
            "detect": [],
            "segment": ["mask_coefficients", "prototypes"],
            "obb": ["rotated"],
            "pose": ["keypoints"],
        }[view.task]
        self.output_names = ["boxes", "scores", "labels", *extra]

    def forward(self, images: Tensor) -> tuple[Tensor, ...]:
        """``(B, 3, H, W)`` -> ``(boxes, scores, labels, *task extras)``."""
        out = self.view(images)
        det = topk_decode(out, self.max_det)
        extras = {
            "mask_coefficients": det.mask_coefficients,
            "prototypes": out.prototypes,
            "rotated": det.rotated,
            "keypoints": det.keypoints,
        }
        tensors = [det.boxes, det.scores, det.labels]
        for name in self.output_names[3:]:
            value = extras[name]
            if value is None:
                raise RuntimeError(f"the {self.view.task} view produced no {name}")
            tensors.append(value)
        return tuple(tensors)


def export_onnx(
    model: YOLO26 | DeployView,
    path: str | Path,
    *,
    image_size: tuple[int, int] = (640, 640),
    batch_size: int = 1,
    max_det: int = 300,
    opset: int = ONNX_OPSET,
) -> list[str]:
    """Write the end-to-end graph of ``model``'s deploy view to ``path`` (static shapes).

    The model is put in eval mode (the shared parts of a trained model too).

    Args:
        model: a trained model (its deploy view is taken) or a deploy view.
        path: the ``.onnx`` file to write.
        image_size: ``(H, W)`` of the fixed input.
        batch_size: ``B`` of the fixed input.
        max_det: detections per image ``k``.
        opset: ONNX opset; 17 is what the tests check.

    Returns:
        The output names, in order.
    """
    view = model.deploy() if isinstance(model, YOLO26) else model
    graph = EndToEndGraph(view, max_det).eval()
    param = next(view.parameters())
    images = torch.zeros(batch_size, 3, *image_size, device=param.device, dtype=param.dtype)
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp{target.suffix}")
    try:
        torch.onnx.export(
            graph,
            (images,),
            str(tmp),
            input_names=["images"],
            output_names=graph.output_names,
            opset_version=opset,
            dynamo=False,
        )
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return graph.output_names
