"""What a reader returns: image records, the label schema, and the load report.

Every reader (COCO, YOLO txt, DOTA) produces a `DatasetIndex`: the records of one split, the
`DatasetSchema` that says what the labels mean, and a `LoadReport` that counts everything it
skipped. Nothing is dropped without a count: the report is logged once at the end of loading.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from lucid_train.data.targets import Targets
from lucid_train.errors import LucidError

Task = Literal["detect", "segment", "pose", "obb"]
TASKS: tuple[Task, ...] = ("detect", "segment", "pose", "obb")

logger = logging.getLogger("lucid_train.data")


class DataFormatError(LucidError, ValueError):
    """A dataset file breaks its format; the message names the file (and line) and the fix."""


@dataclass(frozen=True)
class ImageRecord:
    """One image of a split.

    Attributes:
        image_id: the dataset's own image id (COCO ``id``; running index for YOLO txt / DOTA).
        path: the image file.
        height, width: the stored image size in pixels, as declared (COCO) or read from the header.
        targets: its annotations in pixels of the stored image.
        scored: COCO reader only: the positions in the file's ``annotations`` list of what
            evaluation scores for this image: each target's annotation in target order, then
            its crowd regions (`lucid_train.data.formats.coco_documents.scored_ground_truth`).
    """

    image_id: int
    path: Path
    height: int
    width: int
    targets: Targets
    scored: tuple[int, ...] = ()


@dataclass(frozen=True)
class DatasetSchema:
    """What labels mean, shared by both splits of a dataset.

    Attributes:
        task: the task the records are read for; it decides which optional fields exist.
        class_names: name of each contiguous label ``0 .. C-1``.
        category_ids: the dataset's own id of each contiguous label (COCO category ids; for
            YOLO txt the class index itself), used to map predictions back for evaluation.
        keypoint_names: K names (pose only).
        flip_index: for each keypoint, the index it becomes after a horizontal flip (pose only).
        skeleton: 0-based keypoint index pairs, for plots (pose only).
    """

    task: Task
    class_names: tuple[str, ...]
    category_ids: tuple[int, ...]
    keypoint_names: tuple[str, ...] = ()
    flip_index: tuple[int, ...] = ()
    skeleton: tuple[tuple[int, int], ...] = ()

    def __post_init__(self) -> None:
        if len(self.class_names) != len(self.category_ids):
            raise ValueError(
                f"expected one category id per class name, got {len(self.category_ids)} ids for "
                f"{len(self.class_names)} names"
            )
        if self.flip_index and sorted(self.flip_index) != list(range(len(self.keypoint_names))):
            raise ValueError(f"flip_index must permute 0..K-1, got {list(self.flip_index)}")

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def num_keypoints(self) -> int:
        return len(self.keypoint_names)


# A box reaching further than this past its image is counted when clipped (less: rounding).
CLIP_NOTED_PX = 1.0
CLIPPED = f"box more than {CLIP_NOTED_PX:g} px outside the image: clipped to it"


@dataclass
class LoadReport:
    """Counts of what loading skipped or adjusted (a value clipped, a row read as a box), by
    reason, with the first few places for each reason."""

    source: str
    counts: dict[str, int] = field(default_factory=dict)
    examples: dict[str, list[str]] = field(default_factory=dict)
    max_examples: int = 5

    def skip(self, reason: str, where: str) -> None:
        """Count one skipped item (an image or an instance) for ``reason`` at ``where``."""
        self.counts[reason] = self.counts.get(reason, 0) + 1
        shown = self.examples.setdefault(reason, [])
        if len(shown) < self.max_examples:
            shown.append(where)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def summary(self) -> str:
        if not self.counts:
            return f"{self.source}: nothing skipped"
        lines = [f"{self.source}: skipped or adjusted {self.total} item(s):"]
        for reason, count in sorted(self.counts.items()):
            lines.append(f"  {count} x {reason}, e.g. {'; '.join(self.examples[reason])}")
        return "\n".join(lines)

    def log(self) -> None:
        """One warning with the summary when anything was skipped (nothing otherwise)."""
        if self.counts:
            logger.warning(self.summary())


@dataclass
class DatasetIndex:
    """The records of one split with their schema and load report.

    Attributes:
        schema: label meaning.
        records: images in a stable order (sorted by image id).
        report: what was skipped while reading.
        coco_json: the COCO annotation file the records came from, if any; evaluation scores
            against it directly so crowd regions and areas are the dataset's own.
    """

    schema: DatasetSchema
    records: list[ImageRecord]
    report: LoadReport
    coco_json: Path | None = None

    def __len__(self) -> int:
        return len(self.records)
