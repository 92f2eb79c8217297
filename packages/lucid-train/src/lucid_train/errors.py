"""`LucidError`: the errors lucid raises on purpose, each a message the user can act on.

Every such error names the file, field or flag at fault and what to change, in one line. The
``lucid`` command prints one as ``lucid <verb>: error: <message>`` and exits with status 2
(`lucid_train.cli.command_errors`); any other exception is a bug and keeps its traceback. A class of
the family also keeps the built-in base it had (``ValueError``, ``OSError`` ...), so callers that
caught those still do.
"""

from __future__ import annotations

__all__ = ["DiskFullError", "LucidError", "RunFolderError", "SettingError", "check_range"]


class LucidError(Exception):
    """An error lucid raises on purpose; its message is one line naming the fault and the fix."""


class RunFolderError(LucidError, OSError):
    """The run folder cannot be created or written (a read-only or foreign file system)."""


class DiskFullError(LucidError, OSError):
    """A write found the disk full (or over quota); the file named keeps its previous version."""


class SettingError(LucidError, ValueError):
    """A setting outside the values it can take: names the setting, its range and the value."""


def check_range(
    name: str,
    value: float | None,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    flag: str | None = None,
) -> None:
    """Raise `SettingError` unless ``value`` (None passes) lies in the range; ``flag`` is how
    the command line spells the setting (``--model.lr0``), named in the message."""
    if value is None:
        return
    below = low is not None and (value <= low if low_open else value < low)
    above = high is not None and (value >= high if high_open else value > high)
    if below or above:
        parts = []
        if low is not None:
            parts.append(f"{'>' if low_open else '>='} {low:g}")
        if high is not None:
            parts.append(f"{'<' if high_open else '<='} {high:g}")
        spelled = f" ({flag})" if flag else ""
        raise SettingError(f"{name}{spelled}: expected {' and '.join(parts)}, got {value:g}")
