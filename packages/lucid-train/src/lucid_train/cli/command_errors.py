"""The ``lucid`` command's one error path: an error the user can fix is one line, exit status 2.

`error_line` decides: a `lucid_train.errors.LucidError` (every reader's, checkpoint's, run
folder's and writer's error joins that family), Lightning's refusal of a Trainer setting
(``MisconfigurationException``: no GPU for ``--trainer.accelerator gpu``, a negative
``--trainer.max_epochs``), a missing file, a full disk anywhere in the error's chain, a
folder the user may not write, or a file standing where a folder is to be made is printed as
``lucid <verb>: error: ...``.
Anything else is a bug in lucid and keeps its traceback, for the bug report.

An error raised in a DataLoader worker reaches the training process rebuilt by torch, its
message the worker's whole traceback; the line shown is the original message, its last line.
"""

from __future__ import annotations

import errno
import sys
from collections.abc import Iterator

from lightning.fabric.utilities.exceptions import MisconfigurationException

from lucid_train.errors import LucidError

__all__ = ["EXIT_USER_ERROR", "error_chain", "error_line", "report"]

EXIT_USER_ERROR = 2
_NOT_WRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)
# mkdir of a path that is a file, or under one: the user named a file for a folder
_FILE_IN_THE_WAY = (errno.EEXIST, errno.ENOTDIR)


def error_chain(err: BaseException) -> Iterator[BaseException]:
    """``err``, then each error it was raised from or during (cause, else context), once each."""
    seen: set[int] = set()
    current: BaseException | None = err
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _message(err: BaseException) -> str:
    """The error's own message in one line (a worker's rebuilt traceback: its last line)."""
    text = str(err).strip()
    lines = [line for line in text.splitlines() if line.strip()]
    if "Original Traceback" in text and lines:
        last = lines[-1]
        name = f"{type(err).__name__}: "
        return last.split(name, 1)[1] if name in last else last
    return " ".join(line.strip() for line in lines)


# The flag that picks where each verb writes, named in the fix of a folder it cannot make.
_WRITES_TO = {"fit": "--run.root", "predict": "--out", "export": "--out",
              "validate": "--save_dir", "test": "--save_dir"}  # fmt: skip


def error_line(err: BaseException, verb: str = "") -> str | None:
    """The one line that reports ``err`` to the user, or None when it is a bug (traceback)."""
    flag = f" ({_WRITES_TO[verb]})" if verb in _WRITES_TO else ""
    for link in error_chain(err):
        if isinstance(link, LucidError):
            return _message(link)
        if isinstance(link, MisconfigurationException):
            return f"{_message(link)} (Lightning refused a setting; `lucid fit --help` lists them)"
        if isinstance(link, OSError) and link.errno in (errno.ENOSPC, errno.EDQUOT):
            where = f"writing {link.filename}: " if link.filename else ""
            # only a fit resumes; export, predict and validate are run again
            then = "resume with --ckpt_path" if verb in ("fit", "") else f"run lucid {verb} again"
            return (
                f"{where}the disk is full ({link.strerror}); the files lucid writes whole keep "
                f"their previous version; free space{flag.replace(' (', ' (or pick another ')}, "
                f"then {then}"
            )
    if isinstance(err, FileNotFoundError) and err.errno == errno.ENOENT and err.filename:
        # the system's own (a folder that cannot be made there), not a message of ours
        return (
            f"{err.filename}: {err.strerror}; check the path (for an output, pick a folder you "
            f"can make{flag})"
        )
    if isinstance(err, FileNotFoundError):
        return _message(err)
    if isinstance(err, OSError) and err.errno in _NOT_WRITABLE and err.filename:
        return f"cannot write {err.filename}: {err.strerror}; pick a folder you can write{flag}"
    if isinstance(err, OSError) and err.errno in _FILE_IN_THE_WAY and err.filename:
        return (
            f"cannot make the folder {err.filename}: {err.strerror} (a file stands where a "
            f"folder is needed); pick a folder that is not a file's path{flag}"
        )
    return None


def report(verb: str, err: BaseException) -> int | None:
    """Print ``err``'s line as ``lucid <verb>: error: ...`` and return the exit status, or None
    (the caller re-raises: a bug)."""
    line = error_line(err, verb)
    if line is None:
        return None
    print(f"lucid {verb}: error: {line}".replace("lucid : ", "lucid: "), file=sys.stderr)
    return EXIT_USER_ERROR
