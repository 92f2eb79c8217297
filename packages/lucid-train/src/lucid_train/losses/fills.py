"""Small constant tensors a recorded loss can make: filled on the device, never copied from the
host (a CUDA graph capture refuses a copy from pageable host memory, which ``torch.tensor``,
``new_tensor`` and ``t[i] = 1.0`` all make)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def filled(like: Tensor, values: Sequence[float], dtype: torch.dtype | None = None) -> Tensor:
    """``(len(values),)`` on ``like``'s device (``like``'s dtype unless ``dtype``), by fills."""
    out = like.new_zeros(len(values), dtype=dtype)
    for i, value in enumerate(values):
        if value:
            out[i].fill_(value)
    return out
