"""ONNX export of the deploy view with the end-to-end decode baked in.

The exported graph is the deploy view plus :func:`lucid_models.decode.topk_decode`: a TopK node,
no NonMaxSuppression. It uses the TorchScript-based exporter (``dynamo=False``) at opset
:data:`ONNX_OPSET` unless another is asked for, which needs neither ``onnx`` nor ``onnxscript`` to
write the file. By default the input shape is fixed; ``dynamic=True`` names the batch, height and
width of ``images`` (and the batch and prototype sides of the outputs) as free dimensions. ``k``
stays ``max_det`` either way, so a dynamic graph needs images with at least ``max_det`` anchors
(``H*W/64 + H*W/256 + H*W/1024``; 300 rows need about 150x150 pixels).
`verify_onnx` runs a written file with ``onnxruntime`` (when installed) and compares it with
PyTorch. The file is written beside its target under a temporary name and renamed over it when
whole, so a failed or interrupted export never leaves a truncated ``.onnx``.

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
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn
from torch.jit._trace import TracerWarning

from lucid_models.decode import topk_decode
from lucid_models.deploy import DeployView
from lucid_models.model import YOLO26

if TYPE_CHECKING:  # numpy comes with onnxruntime; lucid-models itself needs only torch
    import numpy as np

__all__ = ["ONNX_OPSET", "EndToEndGraph", "OnnxCheck", "export_onnx", "verify_onnx"]

ONNX_OPSET = 17
# Opsets the tests export and run (the TorchScript exporter writes up to 21 with torch 2.9-2.11).
ONNX_OPSETS = range(17, 22)
# The outputs that hold one row per detection (compared row by row in `verify_onnx`).
ROW_OUTPUTS = ("boxes", "mask_coefficients", "rotated", "keypoints")


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
    dynamic: bool = False,
) -> list[str]:
    """Write the end-to-end graph of ``model``'s deploy view to ``path``.

    The model is put in eval mode (the shared parts of a trained model too).

    Args:
        model: a trained model (its deploy view is taken) or a deploy view.
        path: the ``.onnx`` file to write.
        image_size: ``(H, W)`` of the input (the traced one when ``dynamic``).
        batch_size: ``B`` of the input (the traced one when ``dynamic``).
        max_det: detections per image ``k``.
        opset: ONNX opset, one of `ONNX_OPSETS` (default 17).
        dynamic: free batch, height and width (named ``batch``, ``height``, ``width``).

    Returns:
        The output names, in order.

    Raises:
        ValueError: an opset outside `ONNX_OPSETS`, ``max_det`` or ``batch_size`` under 1, or
            a dynamic graph traced at a size with fewer anchors than ``max_det`` (its top-k
            would be baked at that count).
    """
    if max_det < 1 or batch_size < 1:  # torch's exporter divides by them: a SIGFPE, no message
        raise ValueError(f"max_det and batch_size must be >= 1, got {max_det} and {batch_size}")
    if opset not in ONNX_OPSETS:
        lo, hi = ONNX_OPSETS.start, ONNX_OPSETS.stop - 1
        raise ValueError(f"opset {opset} is not one lucid exports; use {lo}..{hi}")
    view = model.deploy() if isinstance(model, YOLO26) else model
    graph = EndToEndGraph(view, max_det).eval()
    h, w = image_size
    anchors = sum((h // s) * (w // s) for s in (8, 16, 32))
    if dynamic and anchors < max_det:
        raise ValueError(
            f"a dynamic graph keeps k = max_det = {max_det} rows, but {h}x{w} images give only "
            f"{anchors} anchors; trace at a larger image size or a lower max_det"
        )
    param = next(view.parameters())
    images = torch.zeros(batch_size, 3, h, w, device=param.device, dtype=param.dtype)
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp{target.suffix}")
    try:
        with warnings.catch_warnings():
            # topk_decode's min(max_det, A) reads the traced anchor count: constant by design
            # (checked above for dynamic graphs); the legacy exporter is chosen on purpose.
            warnings.simplefilter("ignore", TracerWarning)
            warnings.filterwarnings("ignore", "You are using the legacy TorchScript", Warning)
            # a strided slice the exporter leaves unfolded: the graph computes it at run time,
            # the same values (the onnxruntime check says so); torch printed it twice a file
            warnings.filterwarnings("ignore", "Constant folding - Only steps=1", UserWarning)
            torch.onnx.export(
                graph,
                (images,),
                str(tmp),
                input_names=["images"],
                output_names=graph.output_names,
                opset_version=opset,
                dynamo=False,
                dynamic_axes=_dynamic_axes(graph.output_names) if dynamic else None,
            )
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return graph.output_names


def _dynamic_axes(output_names: Sequence[str]) -> dict[str, dict[int, str]]:
    axes = {"images": {0: "batch", 2: "height", 3: "width"}}
    for name in output_names:
        axes[name] = {0: "batch"}
    if "prototypes" in output_names:
        axes["prototypes"] = {0: "batch", 2: "proto_height", 3: "proto_width"}
    return axes


@dataclass(frozen=True)
class OnnxCheck:
    """What `verify_onnx` found.

    Attributes:
        max_error: per output, the largest absolute difference over the inputs (labels: the
            count of rows whose label differs).
        tolerance: per output, the bound it was held to.
        shapes: the input shapes run.
    """

    max_error: dict[str, float]
    tolerance: dict[str, float]
    shapes: list[tuple[int, ...]]

    @property
    def ok(self) -> bool:
        return all(self.max_error[n] <= self.tolerance[n] for n in self.max_error)

    def describe(self) -> str:
        """One line: the shapes run and the worst output."""
        worst = max(self.max_error, key=lambda n: self.max_error[n] - self.tolerance[n])
        shapes = ", ".join("x".join(map(str, s)) for s in self.shapes)
        verdict = "matches" if self.ok else "DIFFERS FROM"
        return (
            f"onnxruntime {verdict} PyTorch on {shapes} (largest difference: {worst} "
            f"{self.max_error[worst]:.3g}, bound {self.tolerance[worst]:.3g})"
        )


def verify_onnx(
    model: YOLO26 | DeployView,
    path: str | Path,
    inputs: Sequence[Tensor],
    *,
    max_det: int = 300,
) -> OnnxCheck:
    """Run the exported ``path`` with onnxruntime's CPU provider on each of ``inputs`` and
    compare it with the same graph in PyTorch (on the CPU, float32).

    Rows are matched, not read in order: the two runtimes sum in another order, so two anchors
    whose scores tie to float32 rounding may swap places in the top-k. Each onnxruntime row is
    paired with the PyTorch row of the same label and nearly the same score whose boxes are
    closest. Rows tied (within the score bound) with the k-th score are compared by score only:
    either side may hold another anchor of that tie, so a fresh model whose scores all equal
    their prior is checked on scores and prototypes alone. Bounds are 1e-4 of each tensor's own
    scale (plus 1e-4).

    Raises:
        ModuleNotFoundError: onnxruntime is not installed.
    """
    import numpy as np
    import onnxruntime as ort

    view = model.deploy() if isinstance(model, YOLO26) else model
    graph = EndToEndGraph(view, max_det).eval().float().cpu()
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    errors = dict.fromkeys(names, 0.0)
    bounds = dict.fromkeys(names, 0.0)
    for x in inputs:
        x = x.float().cpu()
        with torch.no_grad():
            expected = {n: t.numpy() for n, t in zip(names, graph(x), strict=True)}
        got = dict(zip(names, session.run(None, {"images": x.numpy()}), strict=True))
        for name in names:
            scale = 1e-4 * (float(np.abs(expected[name]).max(initial=0.0)) + 1.0)
            bounds[name] = max(bounds[name], 0.5 if name == "labels" else scale)
        for name, err in _compare(expected, got, bounds["scores"]).items():
            errors[name] = max(errors[name], err)
    return OnnxCheck(errors, bounds, [tuple(x.shape) for x in inputs])


def _compare(
    expected: dict[str, np.ndarray], got: dict[str, np.ndarray], score_tol: float
) -> dict[str, float]:
    """Largest differences of one run, rows matched per image (see `verify_onnx`)."""
    import numpy as np

    out: dict[str, float] = {}
    if "prototypes" in expected:
        out["prototypes"] = float(np.abs(expected["prototypes"] - got["prototypes"]).max())
    rows = [n for n in ROW_OUTPUTS if n in expected]
    err = dict.fromkeys([*rows, "scores", "labels"], 0.0)
    for b in range(expected["scores"].shape[0]):
        se, sg = expected["scores"][b], got["scores"][b]
        le, lg = expected["labels"][b], got["labels"][b]
        err["scores"] = max(err["scores"], float(np.abs(np.sort(se) - np.sort(sg)).max()))
        floor = min(float(se.min()), float(sg.min())) + score_tol  # the top-k boundary
        for i in range(sg.shape[0]):
            if sg[i] <= floor:
                continue  # ties with the k-th score: either side may hold another of them
            near = np.flatnonzero((np.abs(se - sg[i]) <= score_tol) & (le == lg[i]))
            if near.size == 0:
                err["labels"] += 1.0  # a row PyTorch does not have
                continue
            box = np.abs(expected["boxes"][b][near] - got["boxes"][b][i]).max(axis=-1)
            j = int(near[np.argmin(box)])
            for name in rows:
                e, g = expected[name][b][j], got[name][b][i]
                err[name] = max(err[name], float(np.abs(e - g).max(initial=0.0)))
    out.update(err)
    return out
