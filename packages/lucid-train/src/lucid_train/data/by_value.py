"""Small tensors cross from a loader worker by value, inside their batch's one message.

A CPU tensor that a loader worker returns normally travels as a shared-memory segment. The main
process receives each such segment through its own file-descriptor handshake: a connection to the
worker's resource-sharer thread, which must take the worker's interpreter lock to answer. A
device-rendered training batch holds 29 tensors, 19 of them not empty (an empty one needs no
segment), and all but its JPEG files are small: targets, tile matrices, colour tables. The pinning
thread spent a handshake on each of them, every batch. On a 2-core machine with idle workers, a
validation batch of 16 (eight tensors) was received in 8-9 ms, and in 5-6 ms with its small
tensors sent by value.

`reduce_fields` is the ``__reduce__`` of the loader's dataclasses (`Batch`, `PixelBatch`): their
CPU tensors under `BY_VALUE_BYTES` are pickled as numpy arrays and rebuilt as tensors of the same
dtype, shape and values; the larger ones (images, decoded rows, JPEG files) keep their shared
segments, as does every tensor on an accelerator.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import torch

BY_VALUE_BYTES = 1 << 17  # about what a pipe moves in one handshake's time


def _small(value: Any) -> bool:
    return (
        isinstance(value, torch.Tensor)
        and value.device.type == "cpu"
        and not value.requires_grad
        and value.nbytes < BY_VALUE_BYTES
        and value.dtype not in (torch.bfloat16, torch.complex32)  # no numpy twin
    )


def reduce_fields(obj: Any) -> tuple[Any, tuple[Any, ...]]:
    """``obj`` (a dataclass instance) as pickle's reduction: its class, its fields' values with
    the small CPU tensors as numpy arrays, and the names of those fields."""
    values: dict[str, Any] = {}
    by_value: list[str] = []
    for f in fields(obj):
        value = getattr(obj, f.name)
        if _small(value):
            value = value.numpy()
            by_value.append(f.name)
        values[f.name] = value
    return _rebuild, (type(obj), values, tuple(by_value))


def _rebuild(cls: type, values: dict[str, Any], by_value: tuple[str, ...]) -> Any:
    for name in by_value:
        values[name] = torch.from_numpy(values[name])
    return cls(**values)
