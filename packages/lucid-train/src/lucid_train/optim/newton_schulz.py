"""Quintic Newton–Schulz orthogonalisation, the heart of the Muon update.

For a matrix ``G = U S V^T`` the iteration keeps ``U`` and ``V`` and pushes every singular value
towards 1, returning about ``U V^T``. The coefficients (3.4445, -4.7750, 2.0315) trade exactness for
a steep slope at zero: after 5 steps singular values of well-conditioned matrices lie roughly in
[0.7, 1.2]; that is all Muon needs.

Precision: the authors iterate in bfloat16; we iterate in float32, and in float64 for float64 input
(assumptions.md T40). Half-precision input is promoted; the result has the input dtype.
"""

from __future__ import annotations

from typing import Final

import torch
from torch import Tensor

__all__ = ["NS_COEFFICIENTS", "NS_STEPS", "compute_dtype", "orthogonalize"]

NS_COEFFICIENTS: Final = (3.4445, -4.7750, 2.0315)
NS_STEPS: Final = 5


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the iteration runs in: float64 stays float64, everything else runs in float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def orthogonalize(matrices: Tensor, steps: int = NS_STEPS, eps: float = 1e-7) -> Tensor:
    """Approximate the orthogonal polar factor of each matrix by quintic Newton–Schulz.

    Args:
        matrices: ``(m, n)`` or a batch ``(..., m, n)``; any floating dtype.
        steps: iterations (the authors use 5).
        eps: added to the Frobenius norm, so a zero matrix stays zero.

    Returns:
        ``(..., m, n)`` in the input dtype, computed in :func:`compute_dtype` of it.
    """
    if matrices.ndim < 2:
        raise ValueError(
            f"orthogonalize needs (..., m, n) matrices, got shape {tuple(matrices.shape)}"
        )
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    rows, cols = matrices.shape[-2:]
    x = matrices.reshape(-1, rows, cols).to(compute_dtype(matrices.dtype), copy=True)
    # Dividing by the Frobenius norm bounds the top singular value by 1, inside the basin.
    x = x / (torch.linalg.matrix_norm(x, keepdim=True) + eps)
    tall = rows > cols
    if tall:  # iterate on the wide side: the Gram matrix is then the smaller one
        x = x.mT
    a, b, c = NS_COEFFICIENTS
    for _ in range(steps):
        gram = torch.bmm(x, x.mT)
        poly = torch.baddbmm(gram, gram, gram, beta=b, alpha=c)  # b*A + c*A@A
        x = torch.baddbmm(x, poly, x, beta=a)  # a*X + (b*A + c*A@A) @ X
    if tall:
        x = x.mT
    return x.reshape(matrices.shape).to(matrices.dtype)
