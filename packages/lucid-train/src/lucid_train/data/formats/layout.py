"""Which on-disk layout a dataset folder uses, and reading a split through the right reader.

Layouts probed (for a split such as ``train``):

* ``coco``: ``annotations/{split}.json`` (or ``instances_{split}[2017].json``,
  ``person_keypoints_{split}[2017].json``) with images in ``images/{split}``, ``{split}2017`` or
  ``{split}``.
* ``coco-split-folders``: ``{split}/_annotations.coco.json`` with the images beside it.
* ``yolo``: ``data.yaml`` (or exactly one other ``*.yaml``) at the root.
* ``dota``: ``{split}/images`` beside ``{split}/labelTxt``.

A folder that matches none, or more than one, is refused with the list of layouts probed and what
each expects; pass ``layout=`` to choose explicitly (assumptions.md D8). A split that holds no
usable image (none found, or every one skipped) is refused by `read_split` with the folder, what
was looked for and what was skipped, before anything trains on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from lucid_train.data.formats.coco import read_coco
from lucid_train.data.formats.dota import read_dota
from lucid_train.data.formats.yolo_txt import MissingLabels, read_yolo
from lucid_train.data.image_io import IMAGE_SUFFIXES, Verify
from lucid_train.data.records import DataFormatError, DatasetIndex, Task
from lucid_train.errors import LucidError

Layout = Literal["coco", "coco-split-folders", "yolo", "dota"]
LAYOUTS: tuple[Layout, ...] = ("coco", "coco-split-folders", "yolo", "dota")

_EXPECTS: dict[Layout, str] = {
    "coco": "annotations/{split}.json or annotations/instances_{split}[2017].json with images in "
    "images/{split}, {split}2017 or {split}",
    "coco-split-folders": "{split}/_annotations.coco.json with the images beside it",
    "yolo": "data.yaml (or one other *.yaml) at the root, images/<split> and labels/<split>",
    "dota": "{split}/images beside {split}/labelTxt",
}


# Other names exporters give a split (Roboflow's COCO export writes valid/).
_SPLIT_ALIASES: dict[str, tuple[str, ...]] = {
    "train": ("training",),
    "val": ("valid", "validation"),
    "test": ("testing",),
}


class LayoutError(LucidError, ValueError):
    """A dataset folder's layout is unknown or ambiguous."""


class EmptySplitError(DataFormatError):
    """A split holds no usable image: none was found, or every one was skipped."""


@dataclass(frozen=True)
class LayoutMatch:
    """Where one layout found a split: the annotation source and the image folder."""

    layout: Layout
    annotations: Path
    images: Path


def _coco_match(root: Path, split: str, task: Task) -> LayoutMatch | None:
    names = [f"{split}.json", f"instances_{split}.json", f"instances_{split}2017.json"]
    if task == "pose":
        names = [f"person_keypoints_{split}2017.json", f"person_keypoints_{split}.json", *names]
    ann = next(
        (root / "annotations" / n for n in names if (root / "annotations" / n).is_file()), None
    )
    if ann is None:
        # A folder where the annotation file belongs would read as "no layout" (a copy gone wrong).
        folder = next(
            (root / "annotations" / n for n in names if (root / "annotations" / n).is_dir()), None
        )
        if folder is not None:
            raise LayoutError(
                f"{folder}: a folder where the COCO annotation file of split {split!r} belongs; "
                "put the JSON file there"
            )
        return None
    for cand in (
        root / "images" / split,
        root / f"{split}2017",
        root / split,
        root / "images" / f"{split}2017",
    ):
        if cand.is_dir():
            return LayoutMatch("coco", ann, cand)
    return None


def _yaml(root: Path) -> Path | None:
    if (root / "data.yaml").is_file():
        return root / "data.yaml"
    yamls = sorted(root.glob("*.yaml"))
    return yamls[0] if len(yamls) == 1 else None


def probe_layouts(root: Path, split: str, task: Task) -> list[LayoutMatch]:
    """Every layout under which ``root`` holds ``split``."""
    found: list[LayoutMatch] = []
    if (m := _coco_match(root, split, task)) is not None:
        found.append(m)
    if (root / split / "_annotations.coco.json").is_file():
        found.append(
            LayoutMatch("coco-split-folders", root / split / "_annotations.coco.json", root / split)
        )
    if (y := _yaml(root)) is not None:
        found.append(LayoutMatch("yolo", y, root))
    if (root / split / "images").is_dir() and (root / split / "labelTxt").is_dir():
        found.append(LayoutMatch("dota", root / split / "labelTxt", root / split / "images"))
    return found


def resolve_layout(
    root: Path | str, split: str, task: Task, layout: Layout | Literal["auto"] = "auto"
) -> LayoutMatch:
    """The one layout ``root`` uses for ``split``, or a `LayoutError` that lists what was probed."""
    root = Path(root)
    if root.is_file() and root.suffix == ".yaml":
        return LayoutMatch("yolo", root, root.parent)
    if root.is_file():
        raise LayoutError(
            f"{root}: a file, not a dataset folder; pass the folder that holds the splits, or "
            "a YOLO data .yaml"
        )
    if not root.is_dir():
        raise LayoutError(f"{root}: no such dataset folder")
    found = probe_layouts(root, split, task)
    probed = "; ".join(f"{name}: {_EXPECTS[name].format(split=split)}" for name in LAYOUTS)
    if layout != "auto":
        match = [m for m in found if m.layout == layout]
        if not match:
            raise LayoutError(
                f"{root}: split {split!r} not found in layout {layout!r}, which expects "
                f"{_EXPECTS[layout].format(split=split)}"
            )
        return match[0]
    if not found:
        raise LayoutError(
            f"{root}: unknown dataset layout for split {split!r}. Layouts probed: {probed}"
            + _alias_hint(root, split, task)
        )
    if len(found) > 1:
        names = ", ".join(m.layout for m in found)
        raise LayoutError(
            f"{root}: ambiguous dataset layout for split {split!r}: it matches {names}. "
            "Pass layout= "
            f"with one of them to choose. Layouts probed: {probed}"
        )
    return found[0]


def read_split(
    root: Path | str,
    split: str,
    *,
    task: Task,
    layout: Layout | Literal["auto"] = "auto",
    verify: Verify = "header",
    missing_labels: MissingLabels = "error",
) -> DatasetIndex:
    """Read ``split`` of the dataset at ``root`` (a folder, or a YOLO ``data.yaml``).

    Raises:
        LayoutError: the folder's layout is unknown or ambiguous.
        EmptySplitError: the split holds no usable image.
        DataFormatError: a file of the split breaks its format.
    """
    m = resolve_layout(root, split, task, layout)
    if m.layout in ("coco", "coco-split-folders"):
        index = read_coco(m.annotations, m.images, task=task, verify=verify)
    elif m.layout == "yolo":
        index = read_yolo(
            m.annotations, split, task=task, verify=verify, missing_labels=missing_labels
        )
    elif task != "obb":
        raise LayoutError(
            f"{root}: the DOTA layout holds rotated boxes; use task='obb', got {task!r}"
        )
    else:
        index = read_dota(Path(root), split, verify=verify)
    if not index.records:
        raise EmptySplitError(_empty_split_message(m, split, index))
    return index


def _empty_split_message(m: LayoutMatch, split: str, index: DatasetIndex) -> str:
    suffixes = "/".join(sorted(s.lstrip(".") for s in IMAGE_SUFFIXES))
    looked = {
        "coco": f"the images listed in {m.annotations}, under {m.images}",
        "coco-split-folders": f"the images listed in {m.annotations}, under {m.images}",
        "yolo": f"{suffixes} images of split {split!r} as {m.annotations} names them",
        "dota": f"{suffixes} images in {m.images} with labels in {m.annotations}",
    }[m.layout]
    skipped = "; ".join(f"{n} x {reason}" for reason, n in sorted(index.report.counts.items()))
    return (
        f"{m.images}: split {split!r} holds no usable image (looked for {looked}; "
        f"{'skipped: ' + skipped if skipped else 'found none'}); add images there or point "
        "--data.root at the dataset folder"
    )


def refuse_unannotated(index: DatasetIndex, split: str) -> None:
    """Refuse a split whose images hold no annotation at all (crowd regions count as one):
    it would train on backgrounds only, or score nothing, without a word.

    Raises:
        EmptySplitError: naming the split, its source and the flag that accepts it.
    """
    if any(len(r.targets) or r.scored for r in index.records):
        return
    raise EmptySplitError(
        f"{index.report.source}: split {split!r} has {len(index.records)} image(s) and not one "
        "annotation, so it would train or score nothing; check the annotation file, or pass "
        "--data.allow_empty true to use it as it is"
    )


def _alias_hint(root: Path, split: str, task: Task) -> str:
    """For a split not found: the other name of it that ``root`` does hold, and the flag."""
    for alias in _SPLIT_ALIASES.get(split, ()):
        found = probe_layouts(root, alias, task)
        if found:
            return (
                f". It holds split {alias!r} ({found[0].layout}): pass --data.{split}_split {alias}"
            )
    return ""
