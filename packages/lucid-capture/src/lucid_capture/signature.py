"""What a recording is valid for, and the first difference between two calls (rule 3).

A replay copies live inputs into static buffers. ``Tensor.copy_`` broadcasts and converts
silently, so every property that would change the arithmetic is compared *before* any copy:
shapes, dtypes, strides, device, ``requires_grad``, the autocast state, non-tensor arguments
(baked into the recording as constants) and the identity of the parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from lucid_capture.reasons import Reason

RECORDABLE_DTYPES = frozenset(
    {
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.bool,
    }
)


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple[int, ...]
    dtype: torch.dtype
    stride: tuple[int, ...]
    device: torch.device
    requires_grad: bool

    @classmethod
    def of(cls, t: torch.Tensor) -> TensorSpec:
        return cls(tuple(t.shape), t.dtype, tuple(t.stride()), t.device, t.requires_grad)


@dataclass(frozen=True)
class Constant:
    """A non-tensor argument, compared by type and ``repr`` (so ``nan`` equals ``nan``)."""

    kind: type
    text: str

    @classmethod
    def of(cls, value: Any) -> Constant:
        return cls(type(value), repr(value))


Spec = TensorSpec | Constant


@dataclass(frozen=True)
class CallSignature:
    args: tuple[Spec, ...]
    autocast: tuple[bool, torch.dtype]

    @classmethod
    def of(cls, args: Sequence[Any], device_type: str = "cuda") -> CallSignature:
        specs = tuple(
            TensorSpec.of(a) if isinstance(a, torch.Tensor) else Constant.of(a) for a in args
        )
        enabled = torch.is_autocast_enabled(device_type)
        return cls(specs, (enabled, torch.get_autocast_dtype(device_type)))

    def mismatch(self, live: CallSignature) -> Reason | None:
        """The reason ``live`` cannot replay a recording made for ``self``, or ``None``."""
        if len(self.args) != len(live.args):
            return Reason.ARGUMENTS
        # Autocast first: under another autocast state every dtype differs too.
        enabled, dtype = self.autocast
        if enabled != live.autocast[0] or (enabled and dtype != live.autocast[1]):
            return Reason.AUTOCAST
        for rec, now in zip(self.args, live.args, strict=True):
            reason = _spec_mismatch(rec, now)
            if reason is not None:
                return reason
        return None


def _spec_mismatch(rec: Spec, now: Spec) -> Reason | None:
    if isinstance(rec, Constant) or isinstance(now, Constant):
        return None if rec == now else Reason.ARGUMENTS
    if rec.device != now.device:
        return Reason.DEVICE
    if rec.dtype != now.dtype:
        return Reason.DTYPE
    if rec.shape != now.shape:
        return Reason.SHAPE
    if rec.stride != now.stride:
        return Reason.LAYOUT
    if rec.requires_grad != now.requires_grad:
        return Reason.REQUIRES_GRAD
    return None


def unsupported(args: Sequence[Any]) -> bool:
    """True when a tensor argument has a dtype or layout that a recording cannot hold."""
    return any(
        isinstance(a, torch.Tensor)
        and (a.dtype not in RECORDABLE_DTYPES or a.layout != torch.strided or a.is_meta)
        for a in args
    )


def parameter_identity(params: Sequence[torch.Tensor]) -> tuple[tuple[int, int], ...]:
    """Which tensors the recording reads: object identity and storage address of each."""
    return tuple((id(p), p.data_ptr()) for p in params)
