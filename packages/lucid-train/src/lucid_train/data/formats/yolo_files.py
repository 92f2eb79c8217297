"""Which files a YOLO split is made of: the images ``data.yaml`` names and each one's label file.

A split entry is a folder (walked through symbolic links to folders, each real folder once) or a
``.txt`` list of image paths; several entries may be given. A path that names nothing says where
it looked (relative paths are read under the yaml's ``path``), and one written the Windows way
is refused with the file and line. An image's label file is its path with the last ``images``
folder turned into ``labels`` and the suffix ``.txt``.
"""

from __future__ import annotations

import glob
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lucid_train.data.formats.input_checks import read_text
from lucid_train.data.image_io import IMAGE_SUFFIXES, UNREAD_SUFFIXES
from lucid_train.data.records import DataFormatError, LoadReport

__all__ = ["count_orphan_labels", "label_path", "refuse_label_file", "split_images"]

_log = logging.getLogger("lucid_train.data")
NOT_AN_IMAGE = "image list line that names no image by its suffix (skipped)"
UNREAD_FORMAT = "image in a format lucid does not read (skipped; convert it to JPEG or PNG)"


def label_path(image: Path) -> Path:
    """The label file of ``image``: the last ``images`` folder in its path becomes ``labels``."""
    parts = list(image.parts)
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] == "images":
            parts[i] = "labels"
            return Path(*parts).with_suffix(".txt")
    raise DataFormatError(
        f"{image}: a YOLO image must sit under an 'images' folder (labels go under 'labels')"
    )


_WINDOWS_PATH = re.compile(r"^[A-Za-z]:[\\/]|\\")  # C:\ or C:/, or any backslash


def refuse_label_file(image: Path, lbl: Path, missing_labels: str) -> None:
    """Refuse a folder standing where ``image``'s label file belongs, and with
    ``missing_labels='error'`` a missing label file, naming where it was looked for; one
    lying beside the image (``images/train/a.txt``) is named, since reading the split as
    background would drop every label it holds."""
    if lbl.is_dir():  # not a missing label file: neither skipped nor read as background
        raise DataFormatError(
            f"{lbl}: a folder where the label file of {image} should be; move the folder "
            "away and write the image's label file there (an empty one for a background image)"
        )
    if lbl.is_file() or missing_labels != "error":
        return
    beside = image.with_suffix(".txt")
    if beside.is_file():
        raise DataFormatError(
            f"{lbl}: label file missing for {image}, and {beside.name} lies beside the image; "
            f"YOLO reads labels from the 'labels' folder beside 'images': move the .txt files "
            f"of {beside.parent} to {lbl.parent}"
        )
    raise DataFormatError(
        f"{lbl}: label file missing for {image}. An empty file marks a background image: "
        "create one, or read with missing_labels 'background' or 'skip' "
        "(--data.missing_labels)"
    )


def _windows_path_hint(written: str) -> str:
    """Advice for a path written the Windows way ('' for any other)."""
    if not _WINDOWS_PATH.search(written):
        return ""
    return (
        "; it is written the Windows way: write it relative to the dataset folder, with "
        "forward slashes (images/train/a.jpg)"
    )


def _images_under(folder: Path, report: LoadReport | None) -> list[Path]:
    """The image files under ``folder``, sorted, through symbolic links to folders (each real
    folder walked once, so a link back up does not loop); one of ``UNREAD_SUFFIXES`` is
    counted in ``report``."""
    found: list[Path] = []
    seen: set[str] = set()
    for top, dirs, files in os.walk(folder, followlinks=True):
        real = os.path.realpath(top)
        if real in seen:
            dirs[:] = []
            continue
        seen.add(real)
        for f in sorted(files):
            suffix = Path(f).suffix.lower()
            if suffix in IMAGE_SUFFIXES:
                found.append(Path(top) / f)
            elif suffix in UNREAD_SUFFIXES and report is not None:
                report.skip(UNREAD_FORMAT, str(Path(top) / f))
    return sorted(found)


def _under_images(path: Path) -> bool:
    return "images" in path.parts[:-1]


def _root_hint(root: Path, where: Path) -> str:
    """Where a missing ``path:`` folder was looked for: a relative one is read from the
    data.yaml's folder, where the authors' tools try the working directory first."""
    if root.exists():
        return ""
    try:
        written = root.relative_to(where.parent)
    except ValueError:
        return f"; 'path' itself, {root}, does not exist"
    here = Path.cwd() / written
    found = (
        f"; it does exist under the working directory: write 'path: {here}'"
        if here.exists()
        else ""
    )
    return (
        f"; 'path' itself does not exist (a relative 'path' is read from the folder of "
        f"{where.name}, {where.parent}){found}"
    )


def split_images(
    root: Path, entry: Any, where: Path, split: str, report: LoadReport | None = None
) -> list[Path]:
    """The image paths of a split's ``entry`` (see the module). A list's line that is not an
    image by its suffix is skipped and counted in ``report``, as the authors' reader filters
    such lines; one naming an image outside an ``images`` folder is refused with its line."""
    if entry is None:
        raise DataFormatError(f"{where}: no '{split}' entry; add '{split}: images/{split}'")
    entries = entry if isinstance(entry, list) else [entry]
    images: list[Path] = []
    for e in entries:
        if not isinstance(e, str) or not e.strip() or "\0" in e:
            raise DataFormatError(
                f"{where}: '{split}' must name a folder or a .txt image list, got {e!r:.40}"
            )
        p = Path(e)
        p = p if p.is_absolute() else root / p
        if not p.exists() and e.startswith("../") and (root / e[3:]).exists():
            # Roboflow's exports write 'train: ../train/images' beside their own train/ folder;
            # the authors' tools read it there, and so does lucid, saying so.
            _log.warning(
                f"lucid data: {where}: '{split}: {e}' names nothing there; reading "
                f"{root / e[3:]} beside it instead, as the authors' tools read a Roboflow export"
            )
            p = root / e[3:]
        if p.is_dir():
            images += _images_under(p, report)
        elif p.suffix == ".txt" and p.is_file():
            for number, line in enumerate(read_text(p).splitlines(), 1):
                written = line.strip()
                if written and "\0" not in written:
                    if hint := _windows_path_hint(written):
                        raise DataFormatError(f"{p}:{number}: {written!r:.80}{hint}")
                    q = Path(written)
                    q = q if q.is_absolute() else root / q
                    beside = p.parent / written  # the authors read './' from the list's folder
                    if written.startswith("./") and not q.exists() and beside.exists():
                        q = beside
                    if q.suffix.lower() not in IMAGE_SUFFIXES:
                        if report is not None:
                            unread = q.suffix.lower() in UNREAD_SUFFIXES
                            report.skip(UNREAD_FORMAT if unread else NOT_AN_IMAGE, f"{p}:{number}")
                        continue
                    if q.exists() and not _under_images(q):
                        raise DataFormatError(
                            f"{p}:{number}: {q} is not under an 'images' folder; a YOLO "
                            "image must be, its label file in the 'labels' folder beside it"
                        )
                    images.append(q)
        elif not p.exists():
            raise DataFormatError(
                f"{where}: '{split}: {e}' does not exist: looked for {p} (relative paths are "
                f"read under 'path', here {root}){_windows_path_hint(e) or _root_hint(root, where)}"
            )
        else:
            raise DataFormatError(
                f"{where}: '{split}' path {p} is neither a folder nor a .txt image list"
            )
    return images


def count_orphan_labels(
    entry: Any, root: Path, listed: Mapping[Path, Path], report: LoadReport
) -> None:
    """Count the label files of the split's image folders that belong to no image listed (an
    image skipped as unreadable, or of a format lucid does not read, is counted once, as
    itself, not again through its label)."""
    for e in entry if isinstance(entry, list) else [entry]:
        folder = Path(e) if Path(e).is_absolute() else root / e
        if not folder.is_dir() or "images" not in folder.parts:
            continue
        labels = label_path(folder / "x").parent
        if labels.is_dir():
            for lbl in sorted(labels.rglob("*.txt")):
                if lbl in listed or lbl.name == "classes.txt":
                    continue
                beside = folder / lbl.parent.relative_to(labels)
                twins = beside.glob(glob.escape(lbl.stem) + ".*")
                if not any(t.suffix.lower() in UNREAD_SUFFIXES for t in twins):
                    report.skip("label file without an image (ignored)", str(lbl))
