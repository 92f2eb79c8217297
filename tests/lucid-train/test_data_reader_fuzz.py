"""Every reader, fed generated malformed datasets, does one of three things: loads, refuses with
a one-line `DataFormatError` / `LayoutError` naming the file (and the line, for a text label
file), or skips and counts in its load report. Any other exception, a multi-line message, or a
loaded record that breaks the `Targets` contract is a failure (issue 15, item 4).

Each reader starts from a small valid dataset on disk (two 16x12 images) and hypothesis applies
one to four mutations: fields deleted or set to hostile values (NaN, inf, huge or negative
numbers, wrong types), duplicated ids, tokens of a label line replaced or dropped, invalid UTF-8,
truncated or empty files, missing or corrupt images. Generation is derandomized (the same cases
on every run, no example database), and the outcome counts are printed and recorded as the
test's ``outcomes`` property; docs/data.md keeps the table.
"""

from __future__ import annotations

import copy
import io
import json
import math
import os
import re
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from lucid_train.data import DataFormatError, LayoutError, read_split
from lucid_train.data.image_io import CorruptImageError, Verify, open_rgb
from lucid_train.data.records import DatasetIndex, Task

TASKS: tuple[Task, ...] = ("detect", "segment", "pose", "obb")
WIDTH, HEIGHT = 16, 12


def _png(width: int = WIDTH, height: int = HEIGHT) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.full((height, width, 3), 90, np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


PNG, PNG_OTHER_SIZE = _png(), _png(20, 10)

# Hostile values for JSON / YAML fields and number tokens.
NASTY: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    1,
    2,
    3,
    10**30,
    -(10**30),
    1e308,
    -1e308,
    math.nan,
    math.inf,
    -math.inf,
    0.5,
    "",
    "x",
    "1",
    "ünï",
    [],
    [1],
    [1, 2, 3, 4],
    [[1, 2]],
    {},
    {"a": 1},
]
values = st.one_of(
    # a fresh copy each draw: a drawn list or dict is mutated by later mutations, and a shared
    # one grew into itself over thousands of cases (a circular document)
    st.sampled_from(NASTY).map(copy.deepcopy),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
)
TOKENS = [
    "nan",
    "inf",
    "-inf",
    "-0.1",
    "1.5",
    "abc",
    "1e999",
    "-1e999",
    "0x10",
    "1,2",
    "1_0",
    "٣",
    "0.5",
    "0",
    "1",
    "2",
    "3",
    "99",
    "-1",
    "1e-320",
    "plane",
    "no-such-class",
]
tokens = st.one_of(st.sampled_from(TOKENS), st.text(max_size=4).filter(lambda s: s.strip() != ""))
BAD_UTF8 = [b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x00", b"\xef\xbb\xbf"]


@dataclass
class Case:
    """One generated dataset: its files (path relative to the root -> bytes, None = absent)."""

    task: Task
    files: dict[str, bytes | None]
    line_files: frozenset[str] = frozenset()  # label files whose refusals must name a line
    ops: list[str] = field(default_factory=list)
    verify: Verify = "header"

    def write(self, root: Path) -> None:
        for rel, data in self.files.items():
            if data is not None:
                (root / rel).parent.mkdir(parents=True, exist_ok=True)
                (root / rel).write_bytes(data)


# -- whole-file damage, shared by every format -----------------------------------------------


@st.composite
def _damage_bytes(draw: st.DrawFn, data: bytes) -> tuple[bytes | None, str]:
    kind = draw(st.sampled_from(["truncate", "bad-utf8", "empty", "delete", "crlf", "bom"]))
    if kind == "truncate":
        return data[: draw(st.integers(0, max(0, len(data) - 1)))], kind
    if kind == "bad-utf8":
        at = draw(st.integers(0, len(data)))
        return data[:at] + draw(st.sampled_from(BAD_UTF8)) + data[at:], kind
    if kind == "empty":
        return b"", kind
    if kind == "delete":
        return None, kind
    if kind == "crlf":
        return data.replace(b"\n", b"\r\n"), kind
    return b"\xef\xbb\xbf" + data, kind


@st.composite
def _damage_image(draw: st.DrawFn, case: Case, images: list[str]) -> None:
    rel = draw(st.sampled_from(images))
    kind = draw(st.sampled_from(["delete", "garbage", "truncate", "other-size"]))
    case.files[rel] = {
        "delete": None,
        "garbage": b"not an image",
        "truncate": PNG[: len(PNG) // 2],
        "other-size": PNG_OTHER_SIZE,
    }[kind]
    case.ops.append(f"image {rel}: {kind}")


@st.composite
def _edit_line(draw: st.DrawFn, lines: list[str]) -> str:
    """Replace, drop or insert one token of one line of ``lines`` (in place); says what it did."""
    li = draw(st.integers(0, len(lines) - 1))
    toks = lines[li].split()
    ti = draw(st.integers(0, max(0, len(toks) - 1)))
    action = draw(st.sampled_from(["replace", "replace", "drop", "add"]))
    if action == "replace" and toks:
        toks[ti] = draw(tokens)
    elif action == "drop" and toks:
        del toks[ti]
    else:
        toks.insert(ti, draw(tokens))
    lines[li] = " ".join(toks)
    return f"{li + 1} {action} -> {lines[li]!r}"


# -- COCO JSON ---------------------------------------------------------------------------------

COCO_IMAGES = ["images/train/a.png", "images/train/b.png"]


def _coco_doc() -> dict[str, Any]:
    ring = [1.0, 1.0, 9.0, 1.0, 9.0, 7.0, 1.0, 7.0]
    ann = {"iscrowd": 0, "bbox": [1.0, 1.0, 8.0, 6.0], "segmentation": [ring], "area": 48.0}
    kpts = [2.0, 2.0, 2, 5.0, 5.0, 1, 0.0, 0.0, 0]
    return {
        "images": [
            {"id": 1, "file_name": "a.png", "width": WIDTH, "height": HEIGHT},
            {"id": 2, "file_name": "b.png", "width": WIDTH, "height": HEIGHT},
        ],
        "annotations": [
            {**ann, "id": 1, "image_id": 1, "category_id": 1, "keypoints": kpts},
            {**ann, "id": 2, "image_id": 1, "category_id": 3, "keypoints": list(kpts)},
            {**ann, "id": 3, "image_id": 2, "category_id": 1, "keypoints": list(kpts)},
        ],
        "categories": [
            {
                "id": 1,
                "name": "cat",
                "keypoints": ["left_eye", "right_eye", "nose"],
                "skeleton": [[1, 2]],
            },
            {"id": 3, "name": "dog"},
        ],
    }


COCO_KEYS = {
    "images": ["id", "file_name", "width", "height"],
    "annotations": [
        "id",
        "image_id",
        "category_id",
        "bbox",
        "segmentation",
        "keypoints",
        "iscrowd",
        "difficult",
    ],
    "categories": ["id", "name", "keypoints", "skeleton"],
}


# Annotation changes a reader must skip and count, not refuse.
COCO_SKIPS: list[tuple[str, Any]] = [
    ("bbox", [1.0, 1.0, -3.0, 2.0]),
    ("bbox", [30.0, 30.0, 5.0, 5.0]),
    ("iscrowd", 1),
    ("segmentation", {"counts": [1, 2], "size": [HEIGHT, WIDTH]}),
    ("segmentation", [[1.0, 1.0, 5.0, 5.0]]),
    ("segmentation", [[1.0, 1.0, 5.0, 1.0, 5.0, 5.0]]),
]


@st.composite
def _coco_mutation(draw: st.DrawFn, doc: dict[str, Any]) -> str:
    kind = draw(
        st.sampled_from(["set", "set", "delete", "element", "duplicate", "top", "inner", "skip"])
    )
    if kind == "skip" and isinstance(doc.get("annotations"), list) and doc["annotations"]:
        i = draw(st.integers(0, len(doc["annotations"]) - 1))
        key, value = draw(st.sampled_from(COCO_SKIPS))
        if isinstance(doc["annotations"][i], dict):
            doc["annotations"][i][key] = value
        return f"annotations[{i}].{key} = {value!r}"
    part = draw(st.sampled_from(sorted(COCO_KEYS)))
    items = doc.get(part)
    if kind == "top" or not isinstance(items, list) or not items:
        key = draw(st.sampled_from(sorted(COCO_KEYS)))
        doc[key] = draw(values)
        return f"top {key} = {doc[key]!r}"
    i = draw(st.integers(0, len(items) - 1))
    if kind == "duplicate":
        items.append(json.loads(json.dumps(items[i])))
        return f"duplicate {part}[{i}]"
    if kind == "element" or not isinstance(items[i], dict):
        items[i] = draw(values)
        return f"{part}[{i}] = {items[i]!r}"
    key = draw(st.sampled_from(COCO_KEYS[part]))
    if kind == "delete":
        items[i].pop(key, None)
        return f"del {part}[{i}].{key}"
    if kind == "inner" and isinstance(items[i].get(key), list) and items[i][key]:
        seq = items[i][key]
        if isinstance(seq[0], list) and seq[0]:
            seq = seq[0]
        j = draw(st.integers(0, len(seq) - 1))
        seq[j] = draw(values)
        return f"{part}[{i}].{key}[..{j}] = {seq[j]!r}"
    items[i][key] = draw(values)
    return f"{part}[{i}].{key} = {items[i][key]!r}"


@st.composite
def coco_cases(draw: st.DrawFn) -> Case:
    task = draw(st.sampled_from(TASKS))
    doc = _coco_doc()
    case = Case(task, {"annotations/train.json": None, **dict.fromkeys(COCO_IMAGES, PNG)})
    for _ in range(draw(st.integers(1, 3))):
        case.ops.append(draw(_coco_mutation(doc)))
    data = json.dumps(doc).encode()
    if draw(st.integers(0, 5)) == 0:
        damaged, kind = draw(_damage_bytes(data))
        case.ops.append(f"json: {kind}")
        case.files["annotations/train.json"] = damaged
    else:
        case.files["annotations/train.json"] = data
    if draw(st.integers(0, 5)) == 0:
        draw(_damage_image(case, COCO_IMAGES))
    return case


# -- YOLO txt + data.yaml ----------------------------------------------------------------------

YOLO_IMAGES = ["images/train/a.png", "images/train/b.png"]
YOLO_LABELS = ["labels/train/a.txt", "labels/train/b.txt"]
YOLO_LINES = {
    "detect": ["0 0.5 0.5 0.25 0.25", "1 0.3 0.4 0.2 0.1"],
    "segment": ["0 0.1 0.1 0.6 0.1 0.6 0.5 0.1 0.5", "1 0.2 0.2 0.5 0.2 0.4 0.6"],
    "pose": [
        "0 0.5 0.5 0.2 0.2 0.4 0.4 2 0.5 0.5 1 0 0 0",
        "1 0.3 0.3 0.1 0.1 0.3 0.3 2 0 0 0 0 0 0",
    ],
    "obb": ["0 0.1 0.1 0.6 0.1 0.6 0.5 0.1 0.5", "1 0.2 0.2 0.4 0.2 0.4 0.4 0.2 0.4"],
}


def _yaml_value(v: Any) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(_yaml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_yaml_value(x)}" for k, x in v.items()) + "}"
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


@st.composite
def yolo_cases(draw: st.DrawFn) -> Case:
    task = draw(st.sampled_from(TASKS))
    cfg: dict[str, Any] = {
        "path": ".",
        "train": "images/train",
        "val": "images/train",
        "nc": 2,
        "names": {0: "cat", 1: "dog"},
    }
    if task == "pose":
        cfg |= {"kpt_shape": [3, 3], "flip_idx": [1, 0, 2]}
    labels = {rel: list(YOLO_LINES[task]) for rel in YOLO_LABELS}
    case = Case(task, dict.fromkeys(YOLO_IMAGES, PNG), line_files=frozenset(YOLO_LABELS))
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["token", "token", "token", "line", "yaml", "yaml-text"]))
        if kind == "yaml":
            key = draw(st.sampled_from(["path", "train", "nc", "names", "kpt_shape", "flip_idx"]))
            cfg[key] = draw(values)
            case.ops.append(f"data.yaml {key} = {cfg[key]!r}")
            continue
        if kind == "yaml-text":
            cfg["__text__"] = draw(st.text(alphabet=":-[]{}'\"#|&* \n0a", max_size=12))
            case.ops.append(f"data.yaml + {cfg['__text__']!r}")
            continue
        rel = draw(st.sampled_from(YOLO_LABELS))
        lines = labels[rel]
        if kind == "line" or not lines:
            lines.append(" ".join(draw(st.lists(tokens, max_size=12))))
            case.ops.append(f"{rel} + {lines[-1]!r}")
            continue
        case.ops.append(f"{rel}:{draw(_edit_line(lines))}")
    extra = cfg.pop("__text__", "")
    text = "".join(f"{k}: {_yaml_value(v)}\n" for k, v in cfg.items()) + extra
    case.files["data.yaml"] = text.encode()
    for rel, lines in labels.items():
        case.files[rel] = "".join(line + "\n" for line in lines).encode()
    if draw(st.integers(0, 4)) == 0:
        rel = draw(st.sampled_from([*YOLO_LABELS, "data.yaml"]))
        damaged, kind = draw(_damage_bytes(case.files[rel] or b""))
        case.files[rel] = damaged
        case.ops.append(f"{rel}: {kind}")
    if draw(st.integers(0, 5)) == 0:
        draw(_damage_image(case, YOLO_IMAGES))
    return case


# -- DOTA labelTxt -----------------------------------------------------------------------------

DOTA_IMAGES = ["train/images/a.png", "train/images/b.png"]
DOTA_LABELS = ["train/labelTxt/a.txt", "train/labelTxt/b.txt"]


@st.composite
def dota_cases(draw: st.DrawFn) -> Case:
    header = ["imagesource:GoogleEarth", "gsd:0.5"]
    labels = {
        rel: [*header, "1 1 9 1 9 7 1 7 plane 0", "2 2 6 2 6 5 2 5 ship 1"] for rel in DOTA_LABELS
    }
    case = Case("obb", dict.fromkeys(DOTA_IMAGES, PNG), line_files=frozenset(DOTA_LABELS))
    for _ in range(draw(st.integers(1, 4))):
        rel = draw(st.sampled_from(DOTA_LABELS))
        lines = labels[rel]
        if draw(st.integers(0, 4)) == 0:
            lines.append(" ".join(draw(st.lists(tokens, max_size=12))))
            case.ops.append(f"{rel} + {lines[-1]!r}")
            continue
        case.ops.append(f"{rel}:{draw(_edit_line(lines))}")
    for rel, lines in labels.items():
        case.files[rel] = "".join(line + "\n" for line in lines).encode()
    if draw(st.integers(0, 4)) == 0:
        rel = draw(st.sampled_from(DOTA_LABELS))
        damaged, kind = draw(_damage_bytes(case.files[rel] or b""))
        case.files[rel] = damaged
        case.ops.append(f"{rel}: {kind}")
    if draw(st.integers(0, 5)) == 0:
        draw(_damage_image(case, DOTA_IMAGES))
    return case


# -- image files -------------------------------------------------------------------------------

# (mode, format) pairs Pillow writes; every one must read as 8-bit RGB of its header's size.
IMAGE_KINDS: list[tuple[str, str]] = [
    ("RGB", "PNG"), ("L", "PNG"), ("1", "PNG"), ("LA", "PNG"), ("RGBA", "PNG"), ("P", "PNG"),
    ("I;16", "PNG"), ("I", "TIFF"), ("RGB", "JPEG"), ("L", "JPEG"), ("CMYK", "JPEG"),
    ("RGB", "BMP"), ("P", "BMP"), ("RGB", "TIFF"), ("CMYK", "TIFF"), ("I;16", "TIFF"),
    ("F", "TIFF"), ("RGBA", "WEBP"), ("RGB", "GIF"),
]  # fmt: skip
MAGIC = [b"", b"\x89PNG", b"\xff\xd8\xff", b"BM", b"II*\x00", b"RIFF", b"GIF89a", b"\x00" * 8]


def _encoded(mode: str, fmt: str, width: int, height: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    if mode in ("I;16", "I"):
        im = Image.fromarray(rng.integers(0, 65535, (height, width), dtype=np.uint16))
        im = im if mode == "I;16" else im.convert("I")
    elif mode == "F":
        im = Image.fromarray(rng.random((height, width), dtype=np.float32))
    else:
        rgb = Image.fromarray(rng.integers(0, 255, (height, width, 3), dtype=np.uint8))
        im = rgb.convert(mode) if mode not in ("P",) else rgb.quantize(8)
    buf = io.BytesIO()
    im.save(buf, format=fmt)
    return buf.getvalue()


def _png_with_size(data: bytes, width: int, height: int) -> bytes:
    """``data`` (a PNG) with its IHDR declaring ``width`` x ``height``, CRC kept valid."""
    import struct
    import zlib

    ihdr = data[12:29]  # type + 13 bytes of fields
    body = ihdr[:4] + struct.pack(">II", width, height) + ihdr[12:]
    return data[:12] + body + struct.pack(">I", zlib.crc32(body)) + data[33:]


@st.composite
def _image_bytes(draw: st.DrawFn) -> tuple[bytes, str]:
    mode, fmt = draw(st.sampled_from(IMAGE_KINDS))
    width, height = draw(st.integers(1, 24)), draw(st.integers(1, 24))
    data = _encoded(mode, fmt, width, height, draw(st.integers(0, 3)))
    what = f"{mode} {fmt} {width}x{height}"
    kind = draw(st.sampled_from(["as is", "as is", "truncate", "magic", "flip", "huge", "tail"]))
    if kind == "truncate":
        data = data[: draw(st.integers(0, max(0, len(data) - 1)))]
    elif kind == "magic":
        head = draw(st.sampled_from(MAGIC))
        data = head + data[len(head) :] if head else data[draw(st.integers(1, 8)) :]
    elif kind == "flip" and data:
        at = draw(st.integers(0, len(data) - 1))
        data = data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1 :]
    elif kind == "huge" and fmt == "PNG":
        side = st.sampled_from([0, 1, 2**15, 2**16 - 1, 15_000, 2**31 - 1, 2**32 - 1])
        data = _png_with_size(data, draw(side), draw(side))
    elif kind == "tail":
        data = data + draw(st.binary(max_size=16))
    return data, f"{what}: {kind}"


@st.composite
def image_cases(draw: st.DrawFn) -> Case:
    """A YOLO detect split of two images, one or both replaced by generated image bytes (the
    file keeps its ``.png`` name: readers go by content), read with ``verify='full'``."""
    labels = {rel: b"0 0.5 0.5 0.25 0.25\n" for rel in YOLO_LABELS}
    yaml = b"path: .\ntrain: images/train\nnames: [cat]\n"
    case = Case("detect", {"data.yaml": yaml, **labels, **dict.fromkeys(YOLO_IMAGES, PNG)})
    case.verify = "full"
    for rel in draw(st.sampled_from([YOLO_IMAGES[:1], YOLO_IMAGES[1:], YOLO_IMAGES])):
        data, what = draw(_image_bytes())
        case.files[rel] = data
        case.ops.append(f"{rel}: {what}")
    return case


# -- the contract ------------------------------------------------------------------------------


def _check_loaded(index: DatasetIndex) -> None:
    """What a loaded split must hold beyond `Targets`' own checks (shapes, finiteness)."""
    assert index.records, "a split that loads holds at least one image"
    for rec in index.records:
        assert rec.width > 0 and rec.height > 0, rec
        t = rec.targets
        if len(t):
            assert int(t.labels.max()) < index.schema.num_classes, (rec.path, t.labels)
        if index.schema.task == "pose":
            assert t.keypoints is not None
            assert t.keypoints.shape[1] == index.schema.num_keypoints


def _check_decoded(index: DatasetIndex, case: Case) -> None:
    """Every image a full check kept decodes to 8-bit RGB of its header's size, or is refused
    in one line naming it (`CorruptImageError`), never anything else."""
    for rec in index.records:
        refusal = ""
        try:
            image = open_rgb(rec.path)
        except CorruptImageError as err:
            refusal = str(err)
        except Exception as err:
            pytest.fail(f"{type(err).__name__} escaped open_rgb for {case.ops}: {err}")
        if refusal:
            assert "\n" not in refusal and str(rec.path) in refusal, (case.ops, refusal)
            continue
        assert image.mode == "RGB" and image.size == (rec.width, rec.height), case.ops


def outcome(case: Case, layout: str) -> str:
    """Read ``case`` from a fresh folder and classify the result ('loaded', 'skipped',
    'refused'); anything outside the contract fails the test with the case's mutations."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "ds"
        case.write(root)
        try:
            index = read_split(root, "train", task=case.task, layout=layout, verify=case.verify)  # type: ignore[arg-type]
        except (DataFormatError, LayoutError) as err:
            msg = str(err)
            assert "\n" not in msg, f"multi-line refusal for {case.ops}: {msg!r}"
            assert str(root) in msg, f"refusal names no file of the dataset for {case.ops}: {msg}"
            for rel in case.line_files:
                path = re.escape(str(root / rel))
                if (root / rel).is_file() and re.match(path + r"(?!:\d+)", msg):
                    pytest.fail(f"refusal names label file {rel} without a line: {msg}")
            return "refused"
        except Exception as err:
            pytest.fail(f"{type(err).__name__} escaped the reader for {case.ops}: {err}")
        _check_loaded(index)
        if case.verify == "full":
            _check_decoded(index, case)
        return "skipped" if index.report.total else "loaded"


FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
READERS: dict[str, tuple[Callable[[], st.SearchStrategy[Case]], str, int]] = {
    "coco": (coco_cases, "coco", 400),
    "yolo": (yolo_cases, "yolo", 400),
    "dota": (dota_cases, "dota", 200),
    "images": (image_cases, "yolo", 300),
}
# `benchmarks/fuzz_readers.py` runs every reader this many times longer (the committed run).
SCALE = int(os.environ.get("LUCID_FUZZ_SCALE", "1"))


@pytest.mark.parametrize("reader", sorted(READERS))
def test_reader_fuzz_loads_refuses_with_one_line_or_counts_a_skip(
    reader: str, record_property: Callable[[str, object], None], capsys: pytest.CaptureFixture[str]
) -> None:
    """Generated malformed datasets: every case loads, is refused with one line naming the file
    (and line), or skips and counts; the fuzzer reaches all three outcomes."""
    strategy, layout, n = READERS[reader]
    n *= SCALE
    counts: Counter[str] = Counter()

    @settings(FUZZ, max_examples=n)
    @given(case=strategy())
    def run(case: Case) -> None:
        counts[outcome(case, layout)] += 1

    run()
    record_property("outcomes", dict(counts))
    with capsys.disabled():
        print(f"\n{reader} fuzz: {sum(counts.values())} cases, {dict(sorted(counts.items()))}")
    assert sum(counts.values()) >= n
    assert set(counts) == {"loaded", "skipped", "refused"}, counts


def test_fuzz_harness_fails_on_an_escaped_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    """The harness itself: a reader that raises anything but our errors fails the case."""
    import lucid_train.data as data

    def broken(*args: object, **kw: object) -> None:
        raise KeyError("id")

    monkeypatch.setattr(data, "read_split", broken)
    monkeypatch.setitem(globals(), "read_split", broken)
    case = Case("detect", {"x.txt": b""})
    with pytest.raises(pytest.fail.Exception, match="KeyError escaped"):
        outcome(case, "coco")
