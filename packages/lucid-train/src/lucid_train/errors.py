"""`LucidError`: the errors lucid raises on purpose, each a message the user can act on.

Every such error names the file, field or flag at fault and what to change, in one line. The
``lucid`` command prints one as ``lucid <verb>: error: <message>`` and exits with status 2
(`lucid_train.cli.command_errors`); any other exception is a bug and keeps its traceback. A class of
the family also keeps the built-in base it had (``ValueError``, ``OSError`` ...), so callers that
caught those still do.
"""

from __future__ import annotations

__all__ = ["DiskFullError", "LucidError", "RunFolderError"]


class LucidError(Exception):
    """An error lucid raises on purpose; its message is one line naming the fault and the fix."""


class RunFolderError(LucidError, OSError):
    """The run folder cannot be created or written (a read-only or foreign file system)."""


class DiskFullError(LucidError, OSError):
    """A write found the disk full (or over quota); the file named keeps its previous version."""
