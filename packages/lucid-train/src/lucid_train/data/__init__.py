"""Data: the `Targets` record, the readers of each format (`formats`), augmentation (`augment`),
the DataModule and the built-in synthetic sets (`builtin_sets`).

Get batches for a task with `LucidDataModule` (``root=None`` uses the built-in synthetic set)::

    dm = LucidDataModule("detect", img_size=320, batch_size=16)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))  # a `Batch`
"""

from lucid_train.data.augment import AugmentConfig, LetterboxParams, TrainAugment
from lucid_train.data.builtin_sets.synthetic import SyntheticSpec, synthetic_dataset
from lucid_train.data.datamodule import LucidDataModule
from lucid_train.data.dataset import EpochSampler, EvalDataset, TrainDataset
from lucid_train.data.formats.coco import read_coco
from lucid_train.data.formats.coco_documents import coco_document, write_coco
from lucid_train.data.formats.dota import read_dota, tile_dota
from lucid_train.data.formats.layout import (
    EmptySplitError,
    LayoutError,
    probe_layouts,
    read_split,
    resolve_layout,
)
from lucid_train.data.formats.yolo_txt import read_yolo, write_yolo
from lucid_train.data.image_io import CorruptImageError
from lucid_train.data.records import (
    DataFormatError,
    DatasetIndex,
    DatasetSchema,
    ImageRecord,
    LoadReport,
    Task,
)
from lucid_train.data.targets import Targets, TargetsError
from lucid_train.data.transport import Batch, Sample, collate

__all__ = [
    "AugmentConfig",
    "Batch",
    "CorruptImageError",
    "DataFormatError",
    "DatasetIndex",
    "DatasetSchema",
    "EmptySplitError",
    "EpochSampler",
    "EvalDataset",
    "ImageRecord",
    "LayoutError",
    "LetterboxParams",
    "LoadReport",
    "LucidDataModule",
    "Sample",
    "SyntheticSpec",
    "Targets",
    "TargetsError",
    "Task",
    "TrainAugment",
    "TrainDataset",
    "coco_document",
    "collate",
    "probe_layouts",
    "read_coco",
    "read_dota",
    "read_split",
    "read_yolo",
    "resolve_layout",
    "synthetic_dataset",
    "tile_dota",
    "write_coco",
    "write_yolo",
]
