"""Image files: decode to RGB with Pillow, and check them while a split is read.

Pixels are taken as stored: the EXIF orientation tag is *not* applied, because COCO and YOLO
annotations are made against the stored pixel grid (assumptions.md D9).

Every mode becomes 8-bit RGB as the authors' loader (OpenCV's ``imread``) reads it (docs/data.md,
"Image modes"): 16-bit samples keep their high byte (Pillow's own conversion clips a 16-bit grey
PNG to 255), palette images take their colours, alpha is dropped (not composited), CMYK is
converted as Pillow does (within one level of OpenCV). 32-bit float images are refused: neither
reader has a scale for them.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from PIL import Image

from lucid_train.errors import LucidError

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp"})

Verify = Literal["none", "header", "full"]


class CorruptImageError(LucidError, OSError):
    """An image file cannot be decoded; the message names the file and the fix."""


# Modes holding more than 8 bits a sample, read as OpenCV reads 16-bit files: the high byte.
_WIDE_GREY = frozenset({"I;16", "I;16L", "I;16B", "I;16N", "I"})
_REFUSED = {"F": "32-bit float samples", "I;32": "32-bit samples"}


def to_rgb(im: Image.Image) -> Image.Image:
    """``im`` as 8-bit RGB (module docstring): what the loader trains on."""
    if im.mode in _WIDE_GREY:
        wide = np.asarray(im, dtype=np.int64)
        grey = (wide.clip(0, 0xFFFF) >> 8).astype(np.uint8)
        return Image.fromarray(grey, "L").convert("RGB")
    if im.mode in _REFUSED:
        raise ValueError(f"image mode {im.mode} ({_REFUSED[im.mode]}) has no 8-bit reading")
    return im.convert("RGB")


def problem_of(exc: BaseException) -> str:
    """The load report's reason for an image that failed with ``exc``."""
    if isinstance(exc, Image.DecompressionBombError):
        return "image above Pillow's decompression-bomb pixel limit"
    if isinstance(exc, ValueError) and "has no 8-bit reading" in str(exc):
        return "image mode without an 8-bit reading (32-bit samples)"
    if isinstance(exc, FileNotFoundError):
        return "missing image file"  # the COCO reader's reason for the same
    return "corrupt or truncated image"


def open_rgb(path: Path, *, draft_size: tuple[int, int] | None = None) -> Image.Image:
    """Decode ``path`` into an RGB ``PIL.Image`` (stored orientation, fully loaded).

    ``draft_size`` lets a JPEG decode at 1/2, 1/4 or 1/8 scale in the DCT domain when the caller
    only needs at least that many pixels; the caller must then read the decoded size back.
    """
    try:
        with Image.open(path) as im:
            if draft_size is not None and im.format == "JPEG":
                im.draft("RGB", draft_size)
            rgb = to_rgb(im)
            rgb.load()
            return rgb
    except Image.DecompressionBombError as exc:
        raise CorruptImageError(
            f"{path}: {exc}; the file is not corrupt, it is larger than lucid decodes: downscale "
            "it, or raise PIL.Image.MAX_IMAGE_PIXELS if you trust it"
        ) from exc
    except (OSError, ValueError, SyntaxError) as exc:
        raise CorruptImageError(
            f"{path}: cannot decode image ({exc}); re-encode or delete the file, or read the split "
            "with --data.verify full (verify='full') so corrupt images are skipped and counted at "
            "load time"
        ) from exc


def check_image(path: Path, verify: Verify) -> tuple[int, int] | str:
    """``(width, height)`` of ``path`` after the requested check, or why it fails (the load
    report's reason: corrupt, above the decompression-bomb limit, a mode without an 8-bit
    reading).

    ``header`` reads the header and the file's last bytes (cheap): a JPEG or PNG that does not
    end as one (a copy cut short) is decoded to judge it, so a truncated file is found when the
    split is read, not when a later epoch first decodes it; ``full`` decodes every pixel;
    ``none`` returns ``(0, 0)`` without opening the file.
    """
    if verify == "none":
        return (0, 0)
    try:
        with Image.open(path) as im:
            size = im.size
            if im.mode in _REFUSED:
                return problem_of(ValueError("has no 8-bit reading"))
            if verify == "full" or not _ends_whole(path, im.format):
                im.load()
            return (int(size[0]), int(size[1]))
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        return problem_of(exc)


_END_MARKS = {"JPEG": b"\xff\xd9", "PNG": b"IEND\xaeB`\x82"}  # EOI; the IEND chunk's type, CRC


def _ends_whole(path: Path, fmt: str | None) -> bool:
    """Whether ``path`` ends as a whole file of its format does (True for other formats);
    trailing NUL padding, which some writers add after a JPEG's end, is allowed."""
    mark = _END_MARKS.get(fmt or "")
    if mark is None:
        return True
    with path.open("rb") as f:
        f.seek(max(0, f.seek(0, io.SEEK_END) - 64))
        return f.read().rstrip(b"\x00").endswith(mark)


@dataclass(frozen=True)
class EncodedImage:
    """A JPEG file read but not decoded (the device decodes it): its bytes and stored size."""

    path: Path
    data: bytes
    width: int
    height: int


def read_jpeg(path: Path) -> EncodedImage | None:
    """``path``'s bytes and size when the device decoder can take it (an RGB or greyscale JPEG
    that ends where a JPEG ends), else None: the caller decodes it with Pillow, which also names
    a corrupt file."""
    try:
        data = path.read_bytes()
        if data[:2] != b"\xff\xd8" or data.rstrip(b"\x00")[-2:] != b"\xff\xd9":
            return None
        with Image.open(io.BytesIO(data)) as im:
            if im.format != "JPEG" or im.mode not in ("RGB", "L"):
                return None
            return EncodedImage(path, data, int(im.width), int(im.height))
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
        return None
