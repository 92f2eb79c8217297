"""Files written whole or not at all.

`atomic_path` hands out a temporary file beside the target; when the block ends without an error
the file is flushed to the disk and renamed over the target (``os.replace`` is atomic within one
filesystem), so a crash, a kill or a full disk leaves the previous version or none, never a
truncated one. An error inside the block removes the temporary file and leaves the target as it
was. `save_image` and `write_text` are the two writes most callers need. `append_durably` adds
whole lines to a log that readers parse up to its last complete line.
"""

from __future__ import annotations

import errno
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lucid_train.errors import DiskFullError

if TYPE_CHECKING:
    from PIL import Image

__all__ = [
    "append_durably",
    "atomic_path",
    "disk_full",
    "remove_stale_temporaries",
    "save_image",
    "temporary_name",
    "write_text",
]

TEMP_MARK = ".tmp"
# A write that fails with less than this left on its file system failed for want of space:
# torch.save's writer says only "unexpected pos 576 vs 534" when the disk fills.
FULL_BELOW = 1 << 20


def disk_full(error: BaseException, folder: Path) -> str | None:
    """Why a write into ``folder`` that raised ``error`` failed, when it is a full disk (the
    error says so, or the file system has under `FULL_BELOW` bytes left); else None."""
    if isinstance(error, DiskFullError):
        return None  # already said
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"the disk is full ({error.strerror})"
    if not isinstance(error, Exception):
        return None  # an interrupt, not a failed write
    try:
        st = os.statvfs(folder)
    except OSError:
        return None
    left = st.f_bavail * st.f_frsize
    return f"the disk is full ({left} bytes left)" if left < FULL_BELOW else None


def temporary_name(target: Path) -> Path:
    """A fresh hidden name beside ``target`` that keeps its suffix (writers such as Pillow pick
    the format from it): ``dir/.<name>.<random>.tmp<suffix>``."""
    return target.with_name(f".{target.name}.{secrets.token_hex(4)}{TEMP_MARK}{target.suffix}")


def _fsync_dir(folder: Path) -> None:
    # The rename itself is durable only once the folder's entry is on the disk.
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Write ``path`` through a temporary file: ``with atomic_path(p) as tmp: save(tmp)``.

    The temporary file exists (empty) when the block starts, created with the umask's
    permissions as a plain ``open`` would; the folder is created if needed.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_name(target)
    os.close(os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except BaseException as error:
        full = disk_full(error, target.parent)  # measured with the partial file still there
        with suppress(FileNotFoundError):
            os.unlink(tmp)
        if full is not None:
            raise DiskFullError(
                f"writing {target}: {full}; {target.name} keeps its previous version "
                "(free space there, or pick another --run.root, then resume with --ckpt_path)"
            ) from error
        raise
    _fsync_dir(target.parent)


def save_image(image: Image.Image, path: str | Path, **options: Any) -> Path:
    """Save a Pillow image to ``path`` whole or not at all (format from the suffix; ``options``
    as for ``Image.save``, e.g. ``quality``)."""
    with atomic_path(path) as tmp:
        image.save(tmp, **options)
    return Path(path)


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` whole or not at all."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def append_durably(path: str | Path, text: str) -> None:
    """Append ``text`` (whole lines) to ``path`` and flush it to the disk. A crash mid-write can
    leave at most an incomplete last line, which readers of such logs drop."""
    with open(path, "a", newline="") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def remove_stale_temporaries(target: str | Path) -> list[Path]:
    """Remove temporary files of ``target`` left by a process killed mid-write; returns them."""
    t = Path(target)
    if not t.parent.is_dir():
        return []
    stale = [p for p in t.parent.glob(f".{t.name}.*{TEMP_MARK}{t.suffix}") if p.is_file()]
    for p in stale:
        with suppress(FileNotFoundError):
            p.unlink()
    return stale
