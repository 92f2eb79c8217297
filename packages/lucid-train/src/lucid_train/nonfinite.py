"""Stopping a run on a non-finite loss, naming the step and the terms that went bad.

On the host (CPU training) `check_finite_loss` reads each batch's loss at once: reading a CPU
tensor waits for nothing. On a GPU a read every batch would make the host wait for the GPU every
batch, so `FiniteLossGuard` keeps the contract without one (assumptions.md T64):

- **Device side, every batch.** The loss and its terms are tested on the device; the verdict is
  OR-ed into a sticky 0-d flag and the values are copied, without waiting, into pinned host
  memory behind a CUDA event.
- **No optimizer step from a bad batch.** Before each optimizer step the flag gates it: with a
  GradScaler (16-mixed) the flag poisons one gradient with ``inf`` before unscaling, so the
  scaler's own non-finite check skips the step on the device, exactly as it skips an overflow;
  without one, a fused optimizer takes the flag as its ``found_inf`` (`device_flag`) and skips
  itself on the device, and any other reads it on the host at the step (one read per optimizer
  step). The flag is sticky: every later step is skipped too.
- **The error, one or two batches late.** Each batch reads the staged values whose events have
  completed (no wait), and waits only for one staged ``MAX_LAG`` batches ago. A non-finite loss
  at batch ``n`` raises `NonFiniteLossError` naming batch ``n`` by the end of batch ``n + 2``.
- **No checkpoint from it.** Saving a checkpoint, ending an epoch and ending the fit read
  everything staged first.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["MAX_LAG", "FiniteLossGuard", "NonFiniteLossError", "check_finite_loss"]

MAX_LAG = 2  # batches a GPU verdict may stay unread before the host waits for it


class NonFiniteLossError(FloatingPointError):
    """A loss term became NaN or infinite.

    Attributes:
        step: the global step (optimizer steps done so far) of the failing batch.
        terms: the names of the non-finite terms (``total`` when only the sum is bad).
    """

    def __init__(self, step: int, terms: Sequence[str], values: dict[str, float]) -> None:
        self.step = step
        self.terms = tuple(terms)
        shown = ", ".join(f"{k}={v}" for k, v in values.items())
        super().__init__(
            f"non-finite loss at global step {step}: {', '.join(self.terms)} ({shown}); "
            "the run stopped before this step touched the weights and no checkpoint was written "
            "from it; lower the learning rate, use 32-true precision, or resume from last.ckpt"
        )


def _raise_if_bad(step: int, values: Sequence[float], names: Sequence[str]) -> None:
    labels = ["total", *names]
    bad = [n for n, v in zip(labels, values, strict=True) if not math.isfinite(v)]
    if not bad:
        return
    if bad != ["total"]:
        bad = [n for n in bad if n != "total"] or bad
    raise NonFiniteLossError(step, bad, dict(zip(labels, values, strict=True)))


def _stacked(total: Tensor, items: Tensor) -> Tensor:
    return torch.cat((total.detach().reshape(1).float(), items.detach().reshape(-1).float()))


def check_finite_loss(step: int, total: Tensor, items: Tensor, names: Sequence[str]) -> None:
    """Raise `NonFiniteLossError` unless ``total`` and every item are finite (a host read).

    Args:
        step: the global step, for the message.
        total: the 0-d loss that is backpropagated.
        items: ``(len(names),)`` the logged terms.
        names: one name per item.
    """
    both = _stacked(total, items)
    if bool(torch.isfinite(both).all()):
        return
    _raise_if_bad(step, both.cpu().tolist(), names)


@dataclass
class _Staged:
    step: int
    host: Tensor  # pinned (CUDA) or a copy (elsewhere): total, then the items
    ready: torch.cuda.Event | None  # None: off CUDA
    names: tuple[str, ...]


class FiniteLossGuard:
    """The non-finite check of a training run without a host read per batch (module docstring).

    Args:
        lagged: stage the verdict instead of reading it at once; None: on CUDA only.
    """

    def __init__(self, *, lagged: bool | None = None) -> None:
        self.lagged = lagged
        self.flag: Tensor | None = None  # 0-d bool, True once any batch was non-finite
        self._staged: deque[_Staged] = deque()

    def _is_lagged(self, device: torch.device) -> bool:
        return device.type == "cuda" if self.lagged is None else self.lagged

    def observe(self, step: int, total: Tensor, items: Tensor, names: Sequence[str]) -> None:
        """Test one batch's loss (``total`` 0-d, ``items`` one per name): at once on the host,
        staged on a GPU."""
        if not self._is_lagged(total.device):
            check_finite_loss(step, total, items, names)
            return
        both = _stacked(total, items)
        bad = torch.isfinite(both).all().logical_not()
        if self.flag is None or self.flag.device != both.device:
            self.flag = torch.zeros((), dtype=torch.bool, device=both.device)
        self.flag.logical_or_(bad)
        if both.is_cuda:
            host = torch.empty(both.shape, dtype=both.dtype, pin_memory=True)
            host.copy_(both, non_blocking=True)
            ready = torch.cuda.Event()  # type: ignore[no-untyped-call]
            ready.record()
            self._staged.append(_Staged(step, host, ready, tuple(names)))
        else:
            self._staged.append(_Staged(step, both.clone(), None, tuple(names)))
        self.poll()

    def poll(self, *, wait: bool = False) -> None:
        """Raise for any staged batch whose values have landed; wait only for one that is
        ``MAX_LAG`` batches old (or for all with ``wait``). Off CUDA nothing is ever in flight:
        there a staged value counts as landed only when it would be waited for, the latest a
        GPU could deliver it, so tests on the CPU see the GPU's worst case."""
        while self._staged:
            oldest = self._staged[0]
            landed = oldest.ready is not None and oldest.ready.query()  # type: ignore[no-untyped-call]
            if not (landed or wait or len(self._staged) > MAX_LAG):
                return
            if oldest.ready is not None:
                oldest.ready.synchronize()
            self._staged.popleft()
            # host memory (pinned, landed): reading it waits for nothing
            _raise_if_bad(oldest.step, oldest.host.numpy().tolist(), oldest.names)

    def flush(self) -> None:
        """Read everything staged (before a checkpoint, at an epoch's or the fit's end)."""
        self.poll(wait=True)

    def gate_gradient(self, grad: Tensor) -> None:
        """With a GradScaler: make ``grad`` non-finite if any batch was, so the scaler's own
        check skips the step on the device. Call after backward, before unscaling."""
        if self.flag is not None:
            grad.masked_fill_(self.flag.to(grad.device), math.inf)

    def device_flag(self) -> Tensor | None:
        """The sticky verdict as the 0-d float32 ``found_inf`` a fused optimizer step skips on
        (1.0: skip), or None before any batch was observed on the device."""
        return None if self.flag is None else self.flag.to(torch.float32)

    def gate_step(self) -> None:
        """Without a GradScaler: raise before an optimizer step that would use a bad batch."""
        if self.flag is not None and bool(self.flag):
            self.flush()
            raise RuntimeError("a non-finite loss was flagged but no staged value shows it")

    def reset(self) -> None:
        self.flag = None
        self._staged.clear()
