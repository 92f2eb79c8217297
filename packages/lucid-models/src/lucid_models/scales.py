"""The five YOLO26 scales and the compound-scaling rules that turn base widths into channels.

A scale is three numbers, as in the authors' ``yolo26*.yaml``: a depth multiplier for repeats, a
width multiplier for channels and a channel cap applied before the width multiplier. The rows are
frozen and exposed through a read-only mapping.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["SCALES", "Scale", "parse_model_name"]


@dataclass(frozen=True)
class Scale:
    """One compound-scaling row.

    Attributes:
        name: the letter, ``"n"``, ``"s"``, ``"m"``, ``"l"`` or ``"x"``.
        depth: repeat multiplier.
        width: channel multiplier.
        max_channels: cap on a base width before ``width`` applies.
    """

    name: str
    depth: float
    width: float
    max_channels: int

    def channels(self, base: int) -> int:
        """Channels for a base width: ``min(base, max_channels) * width`` rounded up to 8."""
        return int(math.ceil(min(base, self.max_channels) * self.width / 8) * 8)

    def repeats(self, base: int) -> int:
        """Repeats for a base count: ``max(round(base * depth), 1)``; a base of 1 stays 1."""
        return max(round(base * self.depth), 1) if base > 1 else base

    @property
    def nested_c3k(self) -> bool:
        """Whether the two shallow backbone C3k2 stages use nested C3k units.

        The authors' builds switch them on for m, l and x (assumptions.md M3).
        """
        return self.name in ("m", "l", "x")


SCALES: MappingProxyType[str, Scale] = MappingProxyType(
    {
        "n": Scale("n", 0.50, 0.25, 1024),
        "s": Scale("s", 0.50, 0.50, 1024),
        "m": Scale("m", 0.50, 1.00, 512),
        "l": Scale("l", 1.00, 1.00, 512),
        "x": Scale("x", 1.00, 1.50, 512),
    }
)


def parse_model_name(name: str) -> Scale:
    """The scale named by ``"yolo26<letter>"`` (e.g. ``"yolo26s"``).

    Raises:
        ValueError: the name is not ``yolo26`` followed by one of n, s, m, l, x.
    """
    prefix = "yolo26"
    letter = name[len(prefix) :] if name.startswith(prefix) else ""
    if letter not in SCALES:
        raise ValueError(
            f"expected a model name 'yolo26<scale>' with scale in {sorted(SCALES)}, got {name!r}"
        )
    return SCALES[letter]
