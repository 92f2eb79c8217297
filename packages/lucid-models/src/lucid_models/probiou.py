"""ProbIoU of rotated boxes, the authors' similarity for oriented assignment, loss and NMS.

Rotated boxes are ``(cx, cy, w, h, theta)``. Each is read as the Gaussian of a uniform rectangle
and compared by the Hellinger distance of the two Gaussians (assumptions.md T27). It lives with
the models because the NMS decode of obb suppresses by it (`lucid_models.nms.rotated_fast_nms`);
the trainer's assignment and oriented loss import it from here.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["PROBIOU_EPS", "probiou"]

PROBIOU_EPS = 1e-7


def _compute_dtype(*tensors: Tensor) -> torch.dtype:
    dtype = torch.float32
    for t in tensors:
        dtype = torch.promote_types(dtype, t.dtype)
    return dtype


def _covariance(rboxes: Tensor, floor: float) -> tuple[Tensor, Tensor, Tensor]:
    """Gaussian of a rotated box: ``(..., 5) -> (var_xx, var_yy, cov_xy)``, each ``(...)``.

    A uniform box of side ``w`` has variance ``w**2 / 12``; ``floor`` is added to both principal
    variances (the authors use 0.01 in stride units in the loss to bound gradients of sub-stride
    boxes, 0 in assignment).
    """
    a = rboxes[..., 2].square() / 12 + floor
    b = rboxes[..., 3].square() / 12 + floor
    cos, sin = rboxes[..., 4].cos(), rboxes[..., 4].sin()
    cos2, sin2 = cos.square(), sin.square()
    return a * cos2 + b * sin2, a * sin2 + b * cos2, (a - b) * cos * sin


def probiou(
    boxes1: Tensor, boxes2: Tensor, *, floor: float = 0.0, eps: float = PROBIOU_EPS
) -> Tensor:
    """ProbIoU in Hellinger form, ``1 - sqrt(1 - exp(-B) + eps)``, ``B`` the Bhattacharyya distance.

    The authors' arithmetic (assumptions.md T27).

    Each box is read as the Gaussian of a uniform rectangle; ``B`` is clamped to ``[eps, 100]``
    as the authors do, so identical boxes score ``1 - sqrt(2 eps) ~ 0.99955``, not exactly 1.
    Symmetric in its arguments, invariant to ``theta + pi`` and to ``theta`` for squares.

    Args:
        boxes1: ``(..., 5)`` rotated boxes, any unit shared with ``boxes2``.
        boxes2: ``(..., 5)``, broadcast against ``boxes1`` (pairwise: ``(B, M, 1, 5)`` against
            ``(B, 1, A, 5)``).
        floor: added to both principal variances (see :func:`_covariance`).
        eps: the authors' stabiliser in every denominator and in the clamp.

    Returns:
        ``(...)`` similarity in ``[0, 1)``, float32 (float64 if an input is float64).
    """
    dtype = _compute_dtype(boxes1, boxes2)
    with torch.autocast(device_type=boxes1.device.type, enabled=False):
        b1, b2 = boxes1.to(dtype), boxes2.to(dtype)
        a1, bb1, c1 = _covariance(b1, floor)
        a2, bb2, c2 = _covariance(b2, floor)
        dx = b1[..., 0] - b2[..., 0]
        dy = b1[..., 1] - b2[..., 1]
        a, b, c = a1 + a2, bb1 + bb2, c1 + c2
        det = a * b - c.square()
        t1 = 0.25 * (a * dy.square() + b * dx.square()) / (det + eps)
        t2 = -0.5 * c * dx * dy / (det + eps)
        det1 = (a1 * bb1 - c1.square()).clamp(min=0)
        det2 = (a2 * bb2 - c2.square()).clamp(min=0)
        t3 = 0.5 * (det / (4 * (det1 * det2).sqrt() + eps) + eps).log()
        bhattacharyya = (t1 + t2 + t3).clamp(eps, 100.0)
        hellinger = (1.0 - (-bhattacharyya).exp() + eps).sqrt()
        return 1.0 - hellinger
