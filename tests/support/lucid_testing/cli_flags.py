"""A ``lucid`` command line of a test: a shared base with the flags one test changes.

``lucid`` warns of a flag given twice (`lucid_train.cli.parse_errors`), so a test that changes
one of its base's flags replaces it (`overridden`) rather than appending it a second time.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["overridden"]


def _name(token: str) -> str:
    return token.partition("=")[0]


def overridden(base: Sequence[str], *given: str) -> list[str]:
    """``base`` without the flags that ``given`` sets (each with its value), then ``given``."""
    names = {_name(t) for t in given if t.startswith("--")}
    kept: list[str] = []
    i = 0
    while i < len(base):
        token = base[i]
        valued = "=" not in token and i + 1 < len(base) and not base[i + 1].startswith("--")
        width = 2 if token.startswith("--") and valued else 1
        if not (token.startswith("--") and _name(token) in names):
            kept += base[i : i + width]
        i += width
    return [*kept, *given]
