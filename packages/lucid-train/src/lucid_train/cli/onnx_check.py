"""The check ``lucid export`` runs on the file it wrote: onnxruntime against PyTorch.

onnxruntime is optional (the workspace's dev group has it; lucid-train does not depend on it):
without it the check is skipped and the line says so. A static graph is run at its own shape; a
dynamic one also at batch 2 and a second image size, so a dimension baked in by the trace shows.
When onnxruntime disagrees, ``lucid export`` prints the verdict on stderr and exits 1 (the file
stays written, for inspection).
"""

from __future__ import annotations

from pathlib import Path

import torch

from lucid_models import YOLO26, verify_onnx

__all__ = ["check_export"]


def check_export(
    model: YOLO26, path: Path, size: int, max_det: int, dynamic: bool
) -> tuple[bool, str]:
    """``(agrees, line)``: onnxruntime's verdict on ``path`` (or why there is none, which counts
    as agreeing: nothing was found wrong)."""
    try:
        import onnxruntime  # noqa: F401
    except ModuleNotFoundError:
        return True, (
            "onnxruntime is not installed: the file was not checked (pip install onnxruntime)"
        )
    generator = torch.Generator().manual_seed(0)
    shapes = [(1, 3, size, size)]
    if dynamic:
        shapes.append((2, 3, size + 32, size))  # another batch and height (a multiple of 32)
    inputs = [torch.rand(s, generator=generator) for s in shapes]
    check = verify_onnx(model.float().cpu(), path, inputs, max_det=max_det)
    return check.ok, check.describe()
