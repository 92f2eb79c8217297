"""Stopping a run on a non-finite loss, naming the step and the terms that went bad.

The check reads the loss on the host once per step (the logging reads it anyway). The error is
raised inside ``training_step``, before ``backward``: the weights, the optimizer and the EMA never
see the bad values, and Lightning writes no checkpoint from a failed step.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["NonFiniteLossError", "check_finite_loss"]


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


def check_finite_loss(step: int, total: Tensor, items: Tensor, names: Sequence[str]) -> None:
    """Raise `NonFiniteLossError` unless ``total`` and every item are finite.

    Args:
        step: the global step, for the message.
        total: the 0-d loss that is backpropagated.
        items: ``(len(names),)`` the logged terms.
        names: one name per item.
    """
    both = torch.cat((total.detach().reshape(1).float(), items.detach().reshape(-1).float()))
    if bool(torch.isfinite(both).all()):
        return
    values = both.cpu().tolist()
    labels = ["total", *names]
    bad = [n for n, v in zip(labels, values, strict=True) if not torch.isfinite(torch.tensor(v))]
    if bad != ["total"]:
        bad = [n for n in bad if n != "total"] or bad
    raise NonFiniteLossError(step, bad, dict(zip(labels, values, strict=True)))
