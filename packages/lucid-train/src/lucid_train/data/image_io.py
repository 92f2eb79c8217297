"""Image files: decode to RGB with Pillow, and check them while a split is read.

An EXIF orientation tag is applied (the pixels and the size are the upright image's), as the
authors' loader (OpenCV's ``imread``) and their label check (``exif_size``) read a file, and as
labelling tools show it (assumptions.md D9).

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
UNREAD_SUFFIXES = frozenset({".avif", ".dng", ".gif", ".heic", ".heif", ".jp2", ".mpo"})
"""Image files the authors' loader reads (8.4.190 ``IMG_FORMATS``; ``.gif`` as a video) that
lucid does not: a split's reader counts them, rather than passing over them unsaid."""

Verify = Literal["none", "header", "full"]

MIN_SIDE = 10
"""An image with a side under this many pixels is skipped and counted, as the authors' loader
(8.4.190 ``verify_image_label``) drops it, so both trainers fit the same images."""


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


def too_small(width: int, height: int) -> str | None:
    """The load report's reason for an image under ``MIN_SIDE`` px a side, else None."""
    if min(width, height) >= MIN_SIDE:
        return None
    return f"image under {MIN_SIDE} px a side (the authors' loader drops it too)"


def usable_size(path: Path, verify: Verify) -> tuple[int, int] | str:
    """``check_image`` (its header at least: the size is needed), then ``too_small``: the
    upright ``(width, height)``, or why the image is skipped."""
    size = check_image(path, "header" if verify == "none" else verify)
    return size if isinstance(size, str) else (too_small(*size) or size)


def problem_of(exc: BaseException) -> str:
    """The load report's reason for an image that failed with ``exc``."""
    if isinstance(exc, Image.DecompressionBombError):
        return "image above Pillow's decompression-bomb pixel limit"
    if isinstance(exc, ValueError) and "has no 8-bit reading" in str(exc):
        return "image mode without an 8-bit reading (32-bit samples)"
    if isinstance(exc, FileNotFoundError):
        return "missing image file"  # the COCO reader's reason for the same
    return "corrupt or truncated image"


# EXIF orientation (tag 0x0112) -> the transpose that makes the stored pixels upright.
_UPRIGHT = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
_ORIENTATION_TAG = 0x0112


def orientation(im: Image.Image) -> int:
    """The EXIF orientation of an opened image (1, upright as stored, when absent, unknown or
    unreadable: a damaged EXIF block does not make the pixels unreadable). A PNG whose eXIf
    chunk comes after its pixels is taken as upright: Pillow finds that chunk only by decoding
    the whole image, too dear for a header check."""
    if im.format == "PNG" and "exif" not in im.info:
        return 1
    try:
        value = im.getexif().get(_ORIENTATION_TAG, 1)
    except Exception:  # Pillow raises several kinds on a malformed EXIF block
        return 1
    return value if isinstance(value, int) and value in _UPRIGHT else 1


def exif_turned(path: Path) -> bool:
    """Whether ``path`` carries an EXIF orientation that turns its stored pixels (for errors)."""
    try:
        with Image.open(path) as im:
            return orientation(im) != 1
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
        return False


def upright_size(im: Image.Image) -> tuple[int, int]:
    """``(width, height)`` of the image once its EXIF orientation is applied."""
    w, h = im.size
    return (h, w) if orientation(im) >= 5 else (w, h)


def open_rgb(path: Path, *, draft_size: tuple[int, int] | None = None) -> Image.Image:
    """Decode ``path`` into an upright RGB ``PIL.Image`` (its EXIF orientation applied, fully
    loaded).

    ``draft_size`` (upright width, height) lets a JPEG decode at 1/2, 1/4 or 1/8 scale in the
    DCT domain when the caller only needs at least that many pixels; the caller must then read
    the decoded size back.
    """
    try:
        with Image.open(path) as im:
            turn = orientation(im)
            if draft_size is not None and im.format == "JPEG":
                im.draft("RGB", draft_size[::-1] if turn >= 5 else draft_size)
            rgb = to_rgb(im)
            rgb.load()
            return rgb if turn == 1 else rgb.transpose(_UPRIGHT[turn])
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
            size = upright_size(im)
            if im.mode in _REFUSED:
                return problem_of(ValueError("has no 8-bit reading"))
            if verify == "full" or not _ends_whole(im):
                im.load()
            return (int(size[0]), int(size[1]))
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        return problem_of(exc)


_END_MARKS = {"JPEG": b"\xff\xd9", "PNG": b"IEND\xaeB`\x82"}  # EOI; the IEND chunk's type, CRC


def _ends_whole(im: Image.Image) -> bool:
    """Whether the opened file ends as a whole file of its format does (True for other
    formats); trailing NUL padding, which some writers add after a JPEG's end, is allowed. Read
    through the file Pillow holds open (no second open), its position restored."""
    mark = _END_MARKS.get(im.format or "")
    fp = getattr(im, "fp", None)
    if mark is None or fp is None:
        return True
    at = fp.tell()
    try:
        fp.seek(max(0, fp.seek(0, io.SEEK_END) - 64))
        return bool(fp.read().rstrip(b"\x00").endswith(mark))
    finally:
        fp.seek(at)


@dataclass(frozen=True)
class EncodedImage:
    """A JPEG file read but not decoded (the device decodes it): its bytes and stored size."""

    path: Path
    data: bytes
    width: int
    height: int


def read_jpeg(path: Path) -> EncodedImage | None:
    """``path``'s bytes and size when the device decoder can take it (an RGB or greyscale JPEG
    that ends where a JPEG ends, upright as stored), else None: the caller decodes it with
    Pillow, which also names a corrupt file and applies an EXIF orientation."""
    try:
        data = path.read_bytes()
        if data[:2] != b"\xff\xd8" or data.rstrip(b"\x00")[-2:] != b"\xff\xd9":
            return None
        with Image.open(io.BytesIO(data)) as im:
            if im.format != "JPEG" or im.mode not in ("RGB", "L") or orientation(im) != 1:
                return None
            return EncodedImage(path, data, int(im.width), int(im.height))
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
        return None
