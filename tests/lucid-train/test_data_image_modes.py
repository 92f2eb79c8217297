"""Every image mode reads as the 8-bit RGB the authors' loader (OpenCV's ``imread``) trains on,
checked against pixels worked out by hand (docs/data.md, "Image modes"); files lucid cannot read
are counted with the right reason."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from lucid_train.data.image_io import CorruptImageError, check_image, open_rgb, read_jpeg

GREY16 = np.array([[7, 5007, 10007, 65535]], np.uint16)


def _pixels(path: Path) -> list[list[int]]:
    return np.asarray(open_rgb(path), np.int64).reshape(-1, 3).tolist()


def test_a_16_bit_grey_png_keeps_each_sample_s_high_byte(tmp_path: Path) -> None:
    """Pillow's own conversion turns every sample above 255 into 255 (a white image); OpenCV
    and lucid keep ``value >> 8``."""
    path = tmp_path / "grey16.png"
    Image.fromarray(GREY16).save(path)
    assert Image.open(path).mode == "I;16"
    assert _pixels(path) == [[v >> 8] * 3 for v in GREY16.reshape(-1).tolist()]


def test_a_16_bit_grey_tiff_and_a_32_bit_integer_image_read_the_same_way(tmp_path: Path) -> None:
    Image.fromarray(GREY16).save(tmp_path / "grey16.tif")
    Image.fromarray(GREY16).convert("I").save(tmp_path / "grey32.tif")
    expected = [[v >> 8] * 3 for v in GREY16.reshape(-1).tolist()]
    assert _pixels(tmp_path / "grey16.tif") == expected
    assert _pixels(tmp_path / "grey32.tif") == expected


def test_a_16_bit_rgb_png_keeps_each_sample_s_high_byte(tmp_path: Path) -> None:
    """Written as PNG with 16 bits a channel (Pillow cannot write one: the bytes are built)."""
    import struct
    import zlib

    rgb = np.array([[[0x1234, 0xFF00, 0x00FF], [0x8000, 0x0100, 0xFFFF]]], np.uint16)
    raw = b"\x00" + rgb.astype(">u2").tobytes()
    chunk = lambda kind, body: (  # noqa: E731
        struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    )
    ihdr = struct.pack(">IIBBBBB", 2, 1, 16, 2, 0, 0, 0)
    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw))
    path = tmp_path / "rgb16.png"
    path.write_bytes(data + chunk(b"IEND", b""))
    assert _pixels(path) == [[0x12, 0xFF, 0x00], [0x80, 0x01, 0xFF]]


def test_a_palette_image_takes_its_colours_and_ignores_transparency(tmp_path: Path) -> None:
    im = Image.fromarray(np.array([[0, 1, 2, 3]], np.uint8), "P")
    im.putpalette([255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30])
    im.save(tmp_path / "p.png", transparency=0)
    assert _pixels(tmp_path / "p.png") == [[255, 0, 0], [0, 255, 0], [0, 0, 255], [10, 20, 30]]


def test_alpha_is_dropped_not_composited(tmp_path: Path) -> None:
    """As OpenCV's ``IMREAD_COLOR``: the colour as stored, whatever the alpha."""
    la = np.array([[[100, 0], [200, 255]]], np.uint8)
    Image.fromarray(la, "LA").save(tmp_path / "la.png")
    rgba = np.array([[[100, 50, 25, 0], [200, 100, 50, 128]]], np.uint8)
    Image.fromarray(rgba, "RGBA").save(tmp_path / "rgba.png")
    assert _pixels(tmp_path / "la.png") == [[100] * 3, [200] * 3]
    assert _pixels(tmp_path / "rgba.png") == [[100, 50, 25], [200, 100, 50]]


def test_cmyk_converts_with_the_key_applied(tmp_path: Path) -> None:
    """``255 - (c (255 - k) / 255 + k)`` a channel: a lossless TIFF exactly, a JPEG within its
    compression (OpenCV's reading differs from this by at most one level)."""
    cmyk = np.full((8, 8, 4), [0, 100, 200, 50], np.uint8)
    Image.fromarray(cmyk, "CMYK").save(tmp_path / "cmyk.tif")
    Image.fromarray(cmyk, "CMYK").save(tmp_path / "cmyk.jpg", quality=100)
    expected = [round(255 - (c * 205 / 255 + 50)) for c in (0, 100, 200)]
    assert _pixels(tmp_path / "cmyk.tif")[0] == expected
    got = np.asarray(_pixels(tmp_path / "cmyk.jpg")[0])
    assert np.abs(got - expected).max() <= 2


# A 2x3 image (two rows, three columns) of distinct colours, as stored.
STORED = np.arange(18, dtype=np.uint8).reshape(2, 3, 3) * 14


@pytest.mark.parametrize("tag", range(1, 9))
def test_exif_orientation_is_applied_to_the_pixels_and_the_size(tmp_path: Path, tag: int) -> None:
    """Each of the eight EXIF orientations turns the stored pixels upright (assumptions.md D9),
    as OpenCV's ``imread`` reads them (tests/peer/test_exif_ladder.py holds it to theirs): the
    expected grid is worked out here by numpy, and the header check reports the upright size."""
    upright = {
        1: STORED, 2: STORED[:, ::-1], 3: STORED[::-1, ::-1], 4: STORED[::-1],
        5: STORED.transpose(1, 0, 2), 6: np.rot90(STORED, -1),
        7: STORED[::-1, ::-1].transpose(1, 0, 2),
        8: np.rot90(STORED, 1),
    }[tag]  # fmt: skip
    exif = Image.Exif()
    exif[0x0112] = tag
    path = tmp_path / "tagged.png"
    Image.fromarray(STORED).save(path, exif=exif)
    assert np.asarray(open_rgb(path)).tolist() == upright.tolist()
    assert check_image(path, "header") == (upright.shape[1], upright.shape[0])


def test_a_tagged_jpeg_is_left_to_pillow_and_an_unreadable_tag_is_upright(tmp_path: Path) -> None:
    """The device decoder does not apply the tag, so a turned JPEG is not handed to it; a tag
    value outside 1-8 reads as stored."""
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(np.zeros((16, 32, 3), np.uint8)).save(tmp_path / "six.jpg", exif=exif)
    assert read_jpeg(tmp_path / "six.jpg") is None
    assert open_rgb(tmp_path / "six.jpg").size == (16, 32)
    exif[0x0112] = 9
    Image.fromarray(np.zeros((16, 32, 3), np.uint8)).save(tmp_path / "nine.jpg", exif=exif)
    assert read_jpeg(tmp_path / "nine.jpg") is not None
    assert check_image(tmp_path / "nine.jpg", "header") == (32, 16)


def test_one_bit_and_grey_images_replicate_their_level(tmp_path: Path) -> None:
    Image.fromarray(np.array([[0, 255]], np.uint8)).convert("1").save(tmp_path / "b.png")
    Image.fromarray(np.array([[3, 250]], np.uint8)).save(tmp_path / "l.png")
    assert _pixels(tmp_path / "b.png") == [[0] * 3, [255] * 3]
    assert _pixels(tmp_path / "l.png") == [[3] * 3, [250] * 3]


def test_a_float_image_is_refused_and_counted_with_its_reason(tmp_path: Path) -> None:
    """Neither reader has a scale for float samples (OpenCV returns no image)."""
    path = tmp_path / "f.tif"
    Image.fromarray(np.array([[0.5, 100.0]], np.float32)).save(path)
    assert check_image(path, "header") == "image mode without an 8-bit reading (32-bit samples)"
    with pytest.raises(CorruptImageError, match=r"f\.tif: .*mode F"):
        open_rgb(path)


def _png_declaring(width: int, height: int) -> bytes:
    import io
    import struct
    import zlib

    buf = io.BytesIO()
    Image.fromarray(np.zeros((2, 2, 3), np.uint8)).save(buf, format="PNG")
    data = buf.getvalue()
    body = data[12:16] + struct.pack(">II", width, height) + data[24:29]
    return data[:12] + body + struct.pack(">I", zlib.crc32(body)) + data[33:]


def test_a_decompression_bomb_is_named_as_one_not_as_corrupt(tmp_path: Path) -> None:
    """A 15000 x 15000 (225 Mpx) header is above Pillow's limit: that is the reason given."""
    path = tmp_path / "bomb.png"
    path.write_bytes(_png_declaring(15_000, 15_000))
    assert check_image(path, "header") == "image above Pillow's decompression-bomb pixel limit"
    with pytest.raises(CorruptImageError, match=r"bomb\.png: .*not corrupt.*MAX_IMAGE_PIXELS"):
        open_rgb(path)


def test_a_truncated_file_is_still_counted_as_corrupt(
    tmp_path: Path, write_image: Callable[..., Path]
) -> None:
    path = write_image(tmp_path / "t.png", 32, 24)
    path.write_bytes(path.read_bytes()[:60])
    assert check_image(path, "full") == "corrupt or truncated image"


@pytest.mark.parametrize("suffix", [".jpg", ".png"])
def test_the_header_check_finds_a_file_cut_short_and_keeps_one_with_bytes_after_its_end(
    tmp_path: Path, suffix: str
) -> None:
    """A JPEG or PNG copied short (its end marker gone) is counted at the split's read with
    the cheap check, where it used to surface at an epoch's first decode; a JPEG with padding or
    an appended block after its end (some cameras write one) still reads."""
    noisy = np.random.default_rng(0).integers(0, 255, (48, 64, 3), dtype=np.uint8)
    whole = tmp_path / f"whole{suffix}"
    Image.fromarray(noisy).save(whole)
    data = whole.read_bytes()
    cut = tmp_path / f"cut{suffix}"
    cut.write_bytes(data[: len(data) * 3 // 4])
    assert check_image(whole, "header") == (64, 48)
    assert check_image(cut, "header") == "corrupt or truncated image"
    if suffix == ".jpg":
        tail = tmp_path / "tail.jpg"
        tail.write_bytes(data + b"\x00" * 7 + b"maker notes after the image")
        assert check_image(tail, "header") == (64, 48)
        assert open_rgb(tail).size == (64, 48)


def test_a_missing_file_is_counted_as_missing(tmp_path: Path) -> None:
    assert check_image(tmp_path / "gone.jpg", "header") == "missing image file"
