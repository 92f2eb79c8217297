"""The run folder, refused before training when it cannot be written.

A fit writes its config, logs, plots and checkpoints into ``runs/<task>/<name>/``. A read-only
file system or a folder the user may not write would otherwise stop the fit at its first write
(``mkdir``'s traceback, or a checkpoint lost at the end of an epoch); here it is refused in one
line before any data is read for training.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path

from lucid_train.errors import RunFolderError

__all__ = ["checked_run_dir", "writable_folder"]


def writable_folder(folder: Path) -> Path:
    """``folder`` after creating and removing a file in it.

    Raises:
        RunFolderError: the folder cannot be written (its reason, and the flag that moves it).
    """
    probe = folder / f".lucid-write-check.{secrets.token_hex(4)}"
    try:
        os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        probe.unlink()
    except OSError as err:
        raise RunFolderError(
            f"cannot write the run folder {folder} ({err.strerror or err}); pick a folder you "
            "can write with --run.root"
        ) from None
    return folder


def checked_run_dir(make: Callable[[], Path]) -> Path:
    """The run folder ``make`` creates (`lucid_train.run.trainer.new_run_dir`), checked writable.

    Raises:
        RunFolderError: it cannot be created or written.
    """
    try:
        folder = make()
    except RunFolderError:
        raise  # its own message (a name that is not a folder's)
    except OSError as err:
        raise RunFolderError(
            f"cannot create the run folder {err.filename or ''} ({err.strerror or err}); pick a "
            "folder you can write with --run.root"
        ) from None
    return writable_folder(folder)
