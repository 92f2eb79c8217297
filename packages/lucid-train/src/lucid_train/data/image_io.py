"""Image files: decode to RGB with Pillow, and check them while a split is read.

Pixels are taken as stored: the EXIF orientation tag is *not* applied, because COCO and YOLO
annotations are made against the stored pixel grid (assumptions.md D9).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from PIL import Image

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp"})

Verify = Literal["none", "header", "full"]


class CorruptImageError(OSError):
    """An image file cannot be decoded; the message names the file and the fix."""


def open_rgb(path: Path, *, draft_size: tuple[int, int] | None = None) -> Image.Image:
    """Decode ``path`` into an RGB ``PIL.Image`` (stored orientation, fully loaded).

    ``draft_size`` lets a JPEG decode at 1/2, 1/4 or 1/8 scale in the DCT domain when the caller
    only needs at least that many pixels; the caller must then read the decoded size back.
    """
    try:
        with Image.open(path) as im:
            if draft_size is not None and im.format == "JPEG":
                im.draft("RGB", draft_size)
            rgb = im.convert("RGB")
            rgb.load()
            return rgb
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        raise CorruptImageError(
            f"{path}: cannot decode image ({exc}); re-encode or delete the file, or read the split "
            "with verify='full' so corrupt images are skipped and counted at load time"
        ) from exc


def check_image(path: Path, verify: Verify) -> tuple[int, int] | None:
    """``(width, height)`` of ``path`` after the requested check, or ``None`` if it fails.

    ``header`` reads only the header (cheap); ``full`` decodes every pixel, which also finds
    truncated files; ``none`` returns ``(0, 0)`` without opening the file.
    """
    if verify == "none":
        return (0, 0)
    try:
        with Image.open(path) as im:
            size = im.size
            if verify == "full":
                im.load()
            return (int(size[0]), int(size[1]))
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError):
        return None


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
