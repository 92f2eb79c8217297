"""Counters of one recorder over one fit: recordings, replays, retirements, eager calls."""

from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass, field

from lucid_capture.reasons import QUIET, Reason


class CaptureWarning(UserWarning):
    """A recorder ran eager for a reason it had not met before in this fit."""


@dataclass
class CaptureStats:
    """What a recorder did. ``reset()`` starts a new fit's count."""

    name: str
    recordings: int = 0
    replays: int = 0
    retirements: int = 0
    graph_launches: int = 0
    backward_recordings: int = 0  # one per recording and gradient layout (rule 9)
    grads_in_place: int = 0  # parameter gradients written into .grad without autograd
    eager: Counter[Reason] = field(default_factory=Counter)
    _warned: set[Reason] = field(default_factory=set, repr=False)

    def count_eager(self, reason: Reason, detail: str = "") -> None:
        self.eager[reason] += 1
        if reason in QUIET or reason in self._warned:
            return
        self._warned.add(reason)
        message = f"lucid-capture [{self.name}]: ran eager ({reason.value}): {reason.explanation}"
        message += f" [{detail}]" if detail else ""
        message += f"; fix: {reason.fix}" if reason.fix else ""
        warnings.warn(message, CaptureWarning, stacklevel=3)

    def retire(self, reason: Reason) -> None:
        """A recording was dropped for ``reason``; the next eligible call records anew."""
        self.retirements += 1
        if reason not in self._warned:
            self._warned.add(reason)
            warnings.warn(
                f"lucid-capture [{self.name}]: recording retired ({reason.value}): "
                f"{reason.explanation}",
                CaptureWarning,
                stacklevel=5,
            )

    @property
    def eager_calls(self) -> int:
        return sum(self.eager.values())

    def reset(self) -> None:
        self.recordings = self.replays = self.retirements = self.graph_launches = 0
        self.backward_recordings = self.grads_in_place = 0
        self.eager.clear()
        self._warned.clear()

    def summary(self) -> str:
        """One line: ``network: 1 recording, 98 replays, 0 retired, 3 eager (shape: 2, ...)``."""
        by_reason = ", ".join(f"{r.value}: {n}" for r, n in sorted(self.eager.items()))
        eager = f"{self.eager_calls} eager" + (f" ({by_reason})" if by_reason else "")
        plural = "" if self.recordings == 1 else "s"
        return (
            f"{self.name}: {self.recordings} recording{plural}, {self.replays} replays, "
            f"{self.retirements} retired, {eager}"
        )
