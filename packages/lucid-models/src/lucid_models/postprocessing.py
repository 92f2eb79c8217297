"""Predictions mapped from the network's canvas back to the source image.

`masks_on_source` builds one image's instance masks at its source size from the decoded mask
coefficients and the prototypes, undoing the letterbox (gain, padding) the image was fitted to
the canvas with; `masks_to_source` is the same on the host, as numpy.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from lucid_models.decode import assemble_masks

__all__ = ["masks_on_source", "masks_to_source"]


def masks_to_source(
    coefficients: Tensor,
    prototypes: Tensor,
    boxes_src: np.ndarray,
    letterbox: tuple[float, float, float],
    canvas: int,
    orig_hw: tuple[int, int],
) -> np.ndarray:
    """`masks_on_source` on the host."""
    out: np.ndarray = (
        masks_on_source(coefficients, prototypes, boxes_src, letterbox, canvas, orig_hw)
        .cpu()
        .numpy()
    )
    return out


def masks_on_source(
    coefficients: Tensor,
    prototypes: Tensor,
    boxes_src: np.ndarray,
    letterbox: tuple[float, float, float],
    canvas: int,
    orig_hw: tuple[int, int],
) -> Tensor:
    """``(D, M)`` coefficients and ``(M, h, w)`` prototypes of one image -> ``(D, H0, W0)`` bool
    masks at the source size, on the prototypes' device, in the authors' order (assumptions D20):
    assemble, upsample the logits bilinearly to the canvas and threshold them at 0 there, keep
    the canvas pixels inside the box (pixel ``i`` with ``x1 <= i < x2``), cut the letterbox
    padding, resize the 0/1 mask bilinearly to the source and keep the pixels where it stays 1.
    A source pixel that reads any background canvas pixel is dropped: about half a canvas pixel
    comes off every side, which offsets the training targets' outline (their fill includes it,
    D14)."""
    h0, w0 = orig_hw
    if coefficients.shape[0] == 0:
        return torch.zeros((0, h0, w0), dtype=torch.bool, device=prototypes.device)
    gain, px, py = letterbox
    logits = assemble_masks(coefficients[None], prototypes[None])  # (1, D, h, w)
    logits = F.interpolate(logits, size=(canvas, canvas), mode="bilinear", align_corners=False)
    on = logits[0] > 0  # (D, canvas, canvas)
    box = torch.as_tensor(boxes_src, dtype=torch.float32, device=on.device) * gain
    box[:, 0::2] += px
    box[:, 1::2] += py
    at = torch.arange(canvas, dtype=torch.float32, device=on.device)
    cols = (at >= box[:, 0, None]) & (at < box[:, 2, None])  # (D, canvas)
    rows = (at >= box[:, 1, None]) & (at < box[:, 3, None])
    on &= rows[:, :, None] & cols[:, None, :]
    y0, x0 = int(py), int(px)
    hh, ww = max(round(h0 * gain), 1), max(round(w0 * gain), 1)
    kept = on[:, y0 : y0 + hh, x0 : x0 + ww].float()
    up = F.interpolate(kept[None], size=(h0, w0), mode="bilinear", align_corners=False)[0]
    return up >= 1.0
