"""The run folder, refused before training when it cannot be written.

A fit writes its config, logs, plots and checkpoints into ``runs/<task>/<name>/``. A read-only
file system or a folder the user may not write would otherwise stop the fit at its first write
(``mkdir``'s traceback, or a checkpoint lost at the end of an epoch); here it is refused in one
line before any data is read for training.

A fit also holds its folder (`held_run_folder`) until its command ends: a second fit into it, a
resume of a run still training, is refused naming the process that holds it, where both used to
write the same checkpoints and `metrics.csv`. The hold is the operating system's lock on
``.lucid-run.lock`` (``flock``), so a killed fit leaves none behind; where there is no ``flock``
(Windows, a file system without locks) nothing is held.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable
from pathlib import Path

from lucid_train.errors import RunFolderError

__all__ = ["checked_run_dir", "held_run_folder", "release_run_folders", "writable_folder"]

LOCK_NAME = ".lucid-run.lock"
_held: dict[str, int] = {}  # real path of a held folder -> its lock file's descriptor


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


def held_run_folder(folder: Path) -> Path:
    """``folder``, checked writable (`writable_folder`) and held by this process until
    `release_run_folders`. Ranks after the first of a data-parallel fit (``LOCAL_RANK`` or
    ``NODE_RANK`` set and not 0) share their first rank's hold.

    Raises:
        RunFolderError: it cannot be written, or another process holds it (its pid named).
    """
    writable_folder(folder)
    if os.environ.get("LOCAL_RANK", "0") != "0" or os.environ.get("NODE_RANK", "0") != "0":
        return folder
    try:
        import fcntl
    except ImportError:  # Windows: no flock, nothing held
        return folder
    real = os.path.realpath(folder)
    if real in _held:
        return folder
    fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise RunFolderError(
            f"run folder {folder} is in use by another lucid fit (pid {holder}, its "
            f"{LOCK_NAME}); let it finish or stop it, then resume with --ckpt_path"
        ) from None
    except OSError:  # a file system without locks (some network mounts): nothing held
        os.close(fd)
        return folder
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _held[real] = fd
    return folder


def release_run_folders() -> None:
    """End this process's holds (`held_run_folder`); the lock files stay, unlocked."""
    while _held:
        os.close(_held.popitem()[1])  # closing the descriptor drops its flock
