"""Stopping a run on a non-finite loss or gradient, naming the step and the terms that went bad.

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
- **Gradients too, where no GradScaler judges them** (32-true, bf16): a finite loss can still
  give infinite gradients (a learning rate far too high), which clipping turns into NaN and the
  step into NaN weights. `observe_gradient_norm` takes the total norm that clipping computes
  anyway and flags, stages and gates the step as for a loss, aged with its batch. With a
  GradScaler a non-finite gradient is an overflow the scaler skips, as the authors' trainer does.
- **Data parallel: every rank stops together** (`configure` with the world size; assumptions.md
  T88). At each stepping batch `agree` sums the ranks' flags (one 4-byte collective, no host
  read on a GPU), so every rank gates the same steps, GradScaler skips on every rank, and the
  verdict is read at the same batch on every rank (``MAX_LAG`` batches later, never earlier
  because it happened to land, or at a flush): the bad rank raises naming its batch and terms,
  the others name the step and "another rank". A rank never raises alone, which would leave the
  others waiting in a collective.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from lucid_train.errors import LucidError

__all__ = ["MAX_LAG", "FiniteLossGuard", "NonFiniteLossError", "check_finite_loss"]

MAX_LAG = 2  # batches a GPU verdict may stay unread before the host waits for it
GRADIENT_TERMS = ("gradient norm",)  # what a staged gradient verdict holds (no total before it)


class NonFiniteLossError(LucidError, FloatingPointError):
    """A loss term became NaN or infinite.

    Attributes:
        step: the global step (optimizer steps done so far) of the failing batch.
        terms: the names of the non-finite terms (``total`` when only the sum is bad).
    """

    def __init__(
        self, step: int, terms: Sequence[str], values: dict[str, float], what: str = "loss"
    ) -> None:
        self.step = step
        self.terms = tuple(terms)
        shown = ", ".join(f"{k}={v}" for k, v in values.items())
        precision = "" if what == "gradients" else ", use 32-true precision"  # none judged them
        super().__init__(
            f"non-finite {what} at global step {step}: {', '.join(self.terms)} ({shown}); "
            "the run stopped before this step touched the weights and no checkpoint was written "
            f"from it; lower the learning rate{precision}, or resume from last.ckpt"
        )

    @classmethod
    def _of(cls, step: int, values: Sequence[float], names: Sequence[str]) -> NonFiniteLossError:
        if tuple(names) == GRADIENT_TERMS:
            return cls(step, GRADIENT_TERMS, {GRADIENT_TERMS[0]: values[0]}, "gradients")
        labels = ["total", *names]
        bad = [n for n, v in zip(labels, values, strict=True) if not math.isfinite(v)]
        if bad != ["total"]:
            bad = [n for n in bad if n != "total"] or bad
        return cls(step, bad, dict(zip(labels, values, strict=True)))


def _raise_if_bad(step: int, values: Sequence[float], names: Sequence[str]) -> None:
    """Raise `NonFiniteLossError` unless every value is finite (a loss's total then its terms,
    or a gradient norm alone)."""
    if not all(math.isfinite(v) for v in values):
        raise NonFiniteLossError._of(step, values, names)


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
    host: Tensor  # pinned (CUDA) or a copy (elsewhere): total, then the items; or a grad norm
    ready: torch.cuda.Event | None  # None: off CUDA
    names: tuple[str, ...]
    batch: int = 0  # the batch it came from (counted by `observe`): verdicts age by batches


class FiniteLossGuard:
    """The non-finite check of a training run without a host read per batch (module docstring).

    Args:
        lagged: stage the verdict instead of reading it at once; None: on CUDA only.
    """

    def __init__(self, *, lagged: bool | None = None) -> None:
        self.lagged = lagged
        self.flag: Tensor | None = None  # 0-d bool, True once any batch was non-finite
        self._staged: deque[_Staged] = deque()
        self.world_size = 1
        self._sum: Callable[[Tensor], object] | None = None  # in-place sum over ranks
        self._agreed: deque[tuple[int, _Staged]] = deque()  # (batch number, ranks flagged)
        self._batches = 0
        self._bad: _Staged | None = None  # this rank's first bad batch, read but not raised
        self._sum_device = torch.device("cpu")
        self._last_step = 0

    def configure(
        self, world_size: int, sum_over_ranks: Callable[[Tensor], object], device: torch.device
    ) -> None:
        """Data parallelism over ``world_size`` ranks; ``sum_over_ranks`` sums a tensor on
        ``device`` in place across them (every rank calls `agree` at the same batches)."""
        self.world_size = world_size
        self._sum = sum_over_ranks if world_size > 1 else None
        self._sum_device = device

    def _is_lagged(self, device: torch.device) -> bool:
        return device.type == "cuda" if self.lagged is None else self.lagged

    def observe(self, step: int, total: Tensor, items: Tensor, names: Sequence[str]) -> None:
        """Test one batch's loss (``total`` 0-d, ``items`` one per name): at once on the host,
        staged on a GPU."""
        self._batches += 1
        self._last_step = step
        if not self._is_lagged(total.device) and self._sum is None:
            check_finite_loss(step, total, items, names)
            return
        self._stage(step, _stacked(total, items), tuple(names))

    def observe_gradient_norm(self, step: int, norm: Tensor) -> None:
        """Test a stepping batch's total gradient norm (0-d, after clipping, before the step;
        only without a GradScaler): at once on the host, staged on a GPU with its batch."""
        if not self._is_lagged(norm.device) and self._sum is None:
            _raise_if_bad(step, [float(norm)], GRADIENT_TERMS)
            return
        self._stage(step, norm.detach().reshape(1).float(), GRADIENT_TERMS)

    def _stage(self, step: int, values: Tensor, names: tuple[str, ...]) -> None:
        bad = torch.isfinite(values).all().logical_not()
        if self.flag is None or self.flag.device != values.device:
            self.flag = torch.zeros((), dtype=torch.bool, device=values.device)
        self.flag.logical_or_(bad)
        if values.is_cuda:
            host = torch.empty(values.shape, dtype=values.dtype, pin_memory=True)
            host.copy_(values, non_blocking=True)
            ready = torch.cuda.Event()  # type: ignore[no-untyped-call]
            ready.record()
            self._staged.append(_Staged(step, host, ready, names, self._batches))
        else:
            self._staged.append(_Staged(step, values.clone(), None, names, self._batches))
        self.poll()

    def poll(self, *, wait: bool = False) -> None:
        """Raise for any staged batch whose values have landed; wait only for one that is
        ``MAX_LAG`` batches old (or for all with ``wait``). Off CUDA nothing is ever in flight:
        there a staged value counts as landed only when it would be waited for, the latest a
        GPU could deliver it, so tests on the CPU see the GPU's worst case."""
        while self._staged:
            oldest = self._staged[0]
            landed = oldest.ready is not None and oldest.ready.query()  # type: ignore[no-untyped-call]
            if not (landed or wait or self._batches - oldest.batch >= MAX_LAG):
                break
            if oldest.ready is not None:
                oldest.ready.synchronize()
            self._staged.popleft()
            # host memory (pinned, landed): reading it waits for nothing
            if self._sum is None:
                _raise_if_bad(oldest.step, oldest.host.numpy().tolist(), oldest.names)
            elif self._bad is None and not bool(torch.isfinite(oldest.host).all()):
                self._bad = oldest  # raised with the others, when the agreed verdict is read
        # agreed verdicts: read at the same batch on every rank, never early
        while self._agreed and (wait or self._batches - self._agreed[0][0] >= MAX_LAG):
            _, verdict = self._agreed.popleft()
            if verdict.ready is not None:
                verdict.ready.synchronize()
            self._raise_agreed(verdict.step, float(verdict.host.reshape(-1)[0]))

    def agree(self, step: int) -> None:
        """Data parallel, at a stepping batch (after backward, before the step): make the flag
        every rank's. On the host the verdict is read at once; on a GPU it is staged."""
        if self._sum is None:
            return
        local = self.flag if self.flag is not None else torch.zeros((), dtype=torch.bool)
        count = local.to(device=self._sum_device, dtype=torch.float32).reshape(1).clone()
        self._sum(count)  # ranks whose flag is set
        agreed = count.reshape(()) > 0
        self.flag = agreed if self.flag is None else self.flag.logical_or(agreed)
        if not count.is_cuda:
            self._raise_agreed(step, float(count[0]))
            return
        host = torch.empty(count.shape, dtype=count.dtype, pin_memory=True)
        host.copy_(count, non_blocking=True)
        ready = torch.cuda.Event()  # type: ignore[no-untyped-call]
        ready.record()
        self._agreed.append((self._batches, _Staged(step, host, ready, ())))

    def _raise_agreed(self, step: int, ranks: float) -> None:
        if ranks <= 0:
            return
        self.poll_values()
        bad = self._bad
        if bad is not None:
            raise NonFiniteLossError._of(bad.step, bad.host.numpy().tolist(), bad.names)
        raise NonFiniteLossError(step, ("on another rank",), {"ranks flagged": ranks})

    def poll_values(self) -> None:
        """Read every staged value of this rank (waiting for them), raising nothing."""
        agreed, self._agreed = self._agreed, deque()
        try:
            self.poll(wait=True)
        finally:
            self._agreed = agreed

    def flush(self) -> None:
        """Read everything staged (before a checkpoint, at an epoch's or the fit's end); data
        parallel, also agree on the flag now (these points are the same on every rank)."""
        self.poll(wait=True)
        if self._sum is not None:
            flagged = self._bad is not None or (self.flag is not None and bool(self.flag))
            count = torch.full((1,), float(flagged), device=self._sum_device)
            self._sum(count)
            self._raise_agreed(self._last_step, float(count[0]))

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
        self._agreed.clear()
        self._batches = 0
        self._bad = None
