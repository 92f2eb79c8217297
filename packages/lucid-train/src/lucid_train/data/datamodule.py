"""`LucidDataModule`: the splits of one dataset (or a built-in synthetic set) as DataLoaders.

Batches are `lucid_train.data.transport.Batch` objects. Training loaders use `EpochSampler` (per
sample seeds from ``(seed, epoch, position)``, close-mosaic from ``trainer.max_epochs``), worker
processes with one thread each, pinned memory when CUDA is present, and ``drop_last`` so every
step has the full batch shape. Layout verdicts happen in `setup`, not in ``__init__``, so a config
with a placeholder path still parses.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any, Literal

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch.utils.data import DataLoader

from lucid_train.arg_types import ImageSide, NonNegativeInt, PositiveInt, check_image_side
from lucid_train.data.augment.config import AugmentConfig
from lucid_train.data.builtin_sets.synthetic import SyntheticSpec, synthetic_dataset
from lucid_train.data.classes import (
    annotated_classes,
    check_split_classes,
    repeated_names_line,
    restrict_classes,
    unannotated_line,
)
from lucid_train.data.dataset import (
    MOSAIC_POOLS,
    WORKER_NICE,
    EpochSampler,
    EvalDataset,
    MosaicPool,
    TrainDataset,
    worker_init,
)
from lucid_train.data.epoch_loader import EpochLoader
from lucid_train.data.formats.coco_documents import coco_document, scored_ground_truth
from lucid_train.data.formats.layout import Layout, read_split, refuse_unannotated
from lucid_train.data.formats.yolo_txt import MissingLabels
from lucid_train.data.image_io import Verify
from lucid_train.data.ram_cache import RamImages
from lucid_train.data.records import TASKS, DatasetIndex, DatasetSchema, Task
from lucid_train.data.render_choice import auto_render
from lucid_train.data.transport import Batch, collate
from lucid_train.distributed import device_batch_size
from lucid_train.errors import check_range


class LucidDataModule(L.LightningDataModule):
    """Training and evaluation data for one task.

    Args:
        task: ``detect``, ``segment``, ``pose`` or ``obb``.
        root: dataset folder (or YOLO ``data.yaml``); None uses the built-in synthetic set.
        format: on-disk layout, or ``auto`` to probe (`lucid_train.data.formats.layout`).
        img_size: square canvas side of every batch (a multiple of 32).
        batch_size: images per optimizer-step batch over all devices together, the authors'
            ``batch``: each of ``N`` data-parallel ranks loads ``batch_size / N`` (which must
            divide evenly; assumptions.md T86), its mosaic partner pool too.
        num_workers: loader processes per rank; None picks ``min(device batch, cpu count / N -
            1)``.
        augment: training augmentation; None takes the defaults of record (the authors'
            ``default.yaml``), or `AugmentConfig.for_variant` with ``scale_policy``.
        variant: the model scale ``n s m l x`` (``lucid fit`` sets it from ``--model``).
        scale_policy: train with the recipe study's per-scale augmentation of ``variant``
            (assumptions.md D1) instead of the defaults of record.
        seed: shuffling and augmentation seed.
        train_split, val_split, test_split: split names on disk.
        cache_dir: where synthetic sets are generated (default `synthetic.default_cache_dir`).
        synthetic: size of the synthetic set.
        verify, missing_labels: passed to the readers.
        pin_memory: None pins when CUDA is available.
        persistent_workers: keep workers alive between epochs (the epoch still reaches them
            through the sampler's keys, so the batches are the same); starting them afresh each
            epoch cost seconds per epoch in a short fit.
        cache: ``ram`` decodes every image of the splits in use once, at setup, and serves
            samples from memory (`lucid_train.data.ram_cache`; the size is printed first);
            ``none`` decodes per sample. A cache that would not fit says so and the run goes on
            without it.
        render: where training samples are painted: ``device`` renders each batch's pixels on
            the accelerator after the transfer (`Batch.render`), ``cpu`` in the loader workers
            (Pillow); ``auto`` takes ``device`` when the trainer runs on CUDA, except where
            the workers keep up with the model's step (a detect fit at m or l with enough
            workers, on a card whose step rates are measured, the H100:
            `lucid_train.data.render_choice`, its figures there), and says why in the fit's
            log. The labels are the same bits either way (assumptions.md D18).
        decode: with device rendering, ``device`` leaves JPEG files to the device decoder
            (nvJPEG), ``cpu`` decodes in the workers; ``auto`` follows ``render``.
        mosaic_pool: where mosaic partners come from (assumptions.md D23): ``buffer`` (the
            default since 2026-12-04), the authors' rule, the images of the last
            ``min(n, 8 batch, 1000) - 1`` epoch positions (mixup partners from the whole split);
            ``batch``, the sample's own batch (mixup too): fewer decodes, less varied batches.
        load_resize: resize each training source to the long side ``img_size`` before the
            augmentation, as the authors' ``load_image`` does (on by default: their pixels are
            resampled twice; ``False`` resamples once, sharper; assumptions.md D24). A source
            that needs the resize is decoded in the workers; one already at that side may still
            be left to the device decoder.
        allow_empty: accept a split whose images hold no annotation at all (every image a
            background); without it such a split is refused, since it trains or scores nothing.
        classes: the dataset's category ids to train and score (annotations of others are
            skipped and counted); by default a fit takes every category with an annotation in
            train or val, a COCO category without any left out (assumptions.md D22). Validate
            and test take the checkpoint's.
    """

    def __init__(
        self,
        task: Task,
        root: str | Path | None = None,
        *,
        format: Layout | Literal["auto"] = "auto",
        img_size: ImageSide = 640,
        batch_size: PositiveInt = 16,
        num_workers: NonNegativeInt | None = None,
        augment: AugmentConfig | None = None,
        variant: str | None = None,
        scale_policy: bool = False,
        seed: int = 0,
        train_split: str = "train",
        val_split: str = "val",
        test_split: str | None = None,
        cache_dir: str | Path | None = None,
        synthetic: SyntheticSpec | None = None,
        verify: Verify = "header",
        missing_labels: MissingLabels = "error",
        pin_memory: bool | None = None,
        persistent_workers: bool = True,
        cache: Literal["none", "ram"] = "none",
        render: Literal["auto", "cpu", "device"] = "auto",
        decode: Literal["auto", "cpu", "device"] = "auto",
        mosaic_pool: MosaicPool = "buffer",
        load_resize: bool = True,
        allow_empty: bool = False,
        classes: Sequence[int] | None = None,
    ) -> None:
        super().__init__()
        if mosaic_pool not in MOSAIC_POOLS:
            raise ValueError(f"mosaic_pool: expected one of {MOSAIC_POOLS}, got {mosaic_pool!r}")
        for name, value in (("render", render), ("decode", decode)):
            if value not in ("auto", "cpu", "device"):
                raise ValueError(f"{name}: expected 'auto', 'cpu' or 'device', got {value!r}")
        if cache not in ("none", "ram"):
            raise ValueError(f"cache: expected 'none' or 'ram', got {cache!r}")
        if task not in TASKS:
            raise ValueError(f"task: expected one of {list(TASKS)}, got {task!r}")
        # the parser checks these ranges (`lucid_train.arg_types`); Python callers are checked here
        try:
            check_image_side(img_size)
        except ValueError as err:
            raise ValueError(f"img_size: {err}") from None
        check_range("batch_size", batch_size, low=0, low_open=True)
        check_range("num_workers", num_workers, low=0)
        if scale_policy and augment is None and not variant:
            raise ValueError("scale_policy: needs the model scale, variant='n' ... 'x'")
        self.task: Task = task
        self.variant = variant
        self.data = None if root is None else Path(root)
        self.layout: Layout | Literal["auto"] = format
        # plain ints: the parser's range types are int subclasses, which no checkpoint may hold
        self.img_size = int(img_size)
        self.batch_size = int(batch_size)
        self._auto_workers = num_workers is None
        self.num_workers = self._workers(1) if num_workers is None else int(num_workers)
        self.augment = augment or (
            AugmentConfig.for_variant(variant) if scale_policy and variant else AugmentConfig()
        )
        self.seed = seed
        self.splits = {"train": train_split, "val": val_split, "test": test_split or val_split}
        self._test_is_val = test_split is None
        self.cache_dir = cache_dir
        self.synthetic = synthetic
        self.verify: Verify = verify
        self.missing_labels: MissingLabels = missing_labels
        self.pin_memory = torch.cuda.is_available() if pin_memory is None else pin_memory
        self.persistent_workers = persistent_workers
        self.indices: dict[str, DatasetIndex] = {}
        self._ground_truth: dict[str, tuple[DatasetIndex, dict[str, Any]]] = {}
        self.cache = cache
        self.render: Literal["auto", "cpu", "device"] = render
        self.decode: Literal["auto", "cpu", "device"] = decode
        self.mosaic_pool: MosaicPool = mosaic_pool
        self.load_resize = load_resize
        self._said = ""  # the last `pipeline_line` logged
        self.allow_empty = allow_empty
        # the category ids of the model's classes; a fit's default (None) is set in `setup`
        self.classes = None if classes is None else tuple(int(c) for c in classes)
        self.ram: dict[str, RamImages] = {}  # by split key, filled in setup with cache="ram"
        self.close_mosaic_from: int | None = None
        self._root: Path | None = None

    @property
    def root(self) -> Path:
        """The dataset folder (the synthetic cache folder when ``data`` is None)."""
        if self._root is None:
            self._root = (
                self.data
                if self.data is not None
                else synthetic_dataset(self.task, cache_dir=self.cache_dir, spec=self.synthetic)
            )
        return self._root

    def _source(self, index: DatasetIndex, stage: str) -> Path:
        """The file a split was read from (its COCO JSON), else its folder, for errors."""
        return index.coco_json or self.root / self.splits[stage]

    def _index(self, stage: str) -> DatasetIndex:
        split = self.splits[stage]
        key = f"{stage}:{split}"
        if key not in self.indices:
            self.indices[key] = read_split(
                self.root,
                split,
                task=self.task,
                layout=self.layout,
                verify=self.verify,
                missing_labels=self.missing_labels,
            )
            if not self.allow_empty:
                refuse_unannotated(self.indices[key], split)
            if self.classes is not None:
                self.indices[key] = restrict_classes(self.indices[key], self.classes)
        return self.indices[key]

    def setup(self, stage: str | None = None) -> None:
        """Read the splits the stage needs; learn ``max_epochs`` for close-mosaic."""
        if stage in (None, "fit"):
            train, val = self._index("train"), self._index("val")
            sources = (self._source(train, "train"), self._source(val, "val"))
            check_split_classes(train, val, sources)
            if self.classes is None and (kept := annotated_classes([train, val])) is not None:
                rank_zero_info(unannotated_line(train.schema, kept))  # assumptions D22
                self.classes = kept
                self.indices = {k: restrict_classes(v, kept) for k, v in self.indices.items()}
                train, val = self._index("train"), self._index("val")
            if (shared := repeated_names_line(train.schema)) is not None:
                rank_zero_warn(shared)
        if stage == "validate":
            self._index("val")
        if stage == "test":
            if self._test_is_val:  # the default: said, so a val score is not read as a test one
                val_name = self.splits["val"]
                rank_zero_info(
                    f"lucid data: no --data.test_split given; testing on the {val_name!r} split "
                    "(the test/ metrics are that split's)"
                )
            self._index("test")
        if self.cache == "ram":
            stages = {"fit": ("train", "val"), "validate": ("val",), "test": ("test",)}
            for name in stages.get(stage or "fit", ("train", "val")):
                self._ram(name)
        trainer = getattr(self, "trainer", None)
        max_epochs = getattr(trainer, "max_epochs", None)
        if max_epochs is not None and max_epochs > 0 and self.augment.close_mosaic:
            self.close_mosaic_from = max(0, max_epochs - self.augment.close_mosaic)

    def _ram(self, stage: str) -> RamImages | None:
        """The stage's split decoded in RAM (filled on first use), or None without the cache."""
        if self.cache != "ram":
            return None
        key = f"{stage}:{self.splits[stage]}"
        if key not in self.ram:
            self.ram[key] = RamImages(self._index(stage).records, self.splits[stage])
        try:
            self.ram[key].fill()
        except MemoryError as exc:
            print(f"lucid data: {exc}; training without the cache")
            self.cache = "none"
            self.ram.clear()
            return None
        return self.ram[key]

    def _workers(self, world: int) -> int:
        cpus = os.cpu_count() or 1
        return min(device_batch_size(self.batch_size, world), max(cpus // world - 1, 0))

    @property
    def world_size(self) -> int:
        """Data-parallel ranks of the attached trainer (1 without one)."""
        return int(getattr(getattr(self, "trainer", None), "world_size", 1) or 1)

    @property
    def device_batch_size(self) -> int:
        """Images per batch on this rank: ``batch_size`` split over the ranks (T86)."""
        return device_batch_size(self.batch_size, self.world_size)

    def _cuda_device(self) -> torch.device | None:
        """The attached trainer's device where it is a CUDA one (else None)."""
        strategy = getattr(getattr(self, "trainer", None), "strategy", None)
        device = getattr(strategy, "root_device", None)
        return device if isinstance(device, torch.device) and device.type == "cuda" else None

    def _card(self) -> str | None:
        """The attached trainer's CUDA device by name (None: not on CUDA)."""
        device = self._cuda_device()
        return None if device is None else torch.cuda.get_device_name(device)

    def _on_cuda(self) -> bool:
        return self._cuda_device() is not None

    def pipeline_line(self) -> str:
        """Where the training samples are made, in one line for the fit's log (the ``auto``
        settings resolved)."""
        render, decode = self.render_modes()
        if render == "cpu":
            where = "painted in the loader workers"
        elif decode == "cpu":
            where = "painted on the GPU after the transfer, decoded in the workers"
        else:
            jpegs = "JPEGs already at their load size" if self.load_resize else "JPEGs"
            where = f"painted on the GPU after the transfer, {jpegs} decoded by nvJPEG"
        resize = (
            f"each source resized to the long side {self.img_size} as loaded (the authors' rule)"
            if self.load_resize
            else "each source resampled once (--data.load_resize false)"
        )
        pool = "the authors' buffer of recent images" if self.mosaic_pool == "buffer" else (
            "the sample's own batch (--data.mosaic_pool batch)"
        )  # fmt: skip
        chosen = f"auto: {self.auto_render()[1]}" if self.render == "auto" else self.render
        return (
            f"lucid data: training samples {where} (--data.render {chosen}; --data.decode "
            f"{self.decode}); {resize}; mosaic partners from {pool}{self._closing_phrase()}"
        )

    def _closing_phrase(self) -> str:
        """When mosaic stops (``close_mosaic``), said up front: a run shorter than the setting
        trains without it throughout, as the authors' trainer does."""
        epochs = getattr(getattr(self, "trainer", None), "max_epochs", None)
        closes, n = self.close_mosaic_from, self.augment.close_mosaic
        if not self.augment.mosaic or closes is None or not epochs or epochs < 0:
            return ""
        flag = f"--data.augment.close_mosaic {n}"
        if closes == 0:
            return f"; no mosaic, mixup or copy-paste in any of the {epochs} epochs ({flag})"
        last = epochs - closes
        return f"; mosaic, mixup and copy-paste off for the last {last} of {epochs} epochs ({flag})"

    def auto_render(self) -> tuple[Literal["cpu", "device"], str]:
        """What ``render="auto"`` takes for the attached trainer, and why
        (`lucid_train.data.render_choice`: the CPU where its workers keep up with the step)."""
        workers = self._workers(self.world_size) if self._auto_workers else self.num_workers
        return auto_render(self.task, self.variant, workers, card=self._card())

    def render_modes(self) -> tuple[Literal["cpu", "device"], Literal["cpu", "device"]]:
        """``(render, decode)`` with ``auto`` resolved for the attached trainer."""
        render: Literal["cpu", "device"] = (
            self.auto_render()[0] if self.render == "auto" else self.render
        )
        decode: Literal["cpu", "device"] = render if self.decode == "auto" else self.decode
        if render == "cpu":
            decode = "cpu"
        return render, decode

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Paint a plain batch's pixels where it now is (device rendering; else a no-op). A
        training module that reshapes its batches first (ours pad targets on the host) renders
        in its step instead."""
        return batch.render() if isinstance(batch, Batch) else batch

    @property
    def schema(self) -> DatasetSchema:
        """Label meaning of the dataset (read on first use)."""
        return self._index("val").schema

    def split_index(self, stage: str = "train") -> DatasetIndex:
        """The records of a stage's split as read (annotations before augmentation)."""
        return self._index(stage)

    def image_files(self, stage: str = "val") -> dict[int, Path]:
        """The image file of each dataset image id of a split."""
        return {r.image_id: r.path for r in self._index(stage).records}

    def coco_ground_truth(self, stage: str = "val") -> dict[str, Any]:
        """COCO ground truth of a split for `lucid_train.evaluation.CocoEvaluator`: what the
        reader kept of the dataset's own JSON when it came from one
        (`lucid_train.data.formats.coco_documents.scored_ground_truth`), else built from the
        records. Built once per split read: every later call returns the same document, not
        to be changed."""
        index = self._index(stage)
        cached = self._ground_truth.get(stage)
        if cached is not None and cached[0] is index:
            return cached[1]
        doc = scored_ground_truth(index) if index.coco_json is not None else coco_document(index)
        self._ground_truth[stage] = (index, doc)
        return doc

    def _loader(
        self,
        dataset: Any,
        *,
        sampler: Any = None,
        shuffle: bool = False,
        drop_last: bool = False,
        kind: type[DataLoader[Batch]] = DataLoader,
    ) -> DataLoader[Batch]:
        workers = self._workers(self.world_size) if self._auto_workers else self.num_workers
        return kind(
            dataset,
            batch_size=self.device_batch_size,
            sampler=sampler,
            shuffle=shuffle,
            drop_last=drop_last,
            num_workers=workers,
            collate_fn=collate,
            pin_memory=self.pin_memory,
            worker_init_fn=partial(worker_init, nice=WORKER_NICE if self._on_cuda() else 0)
            if workers
            else None,
            persistent_workers=self.persistent_workers and workers > 0,
            prefetch_factor=4 if workers else None,
        )

    def train_dataset(self) -> TrainDataset:
        index = self._index("train")
        render, decode = self.render_modes()
        line = self.pipeline_line()
        if line != self._said:  # once per fit's settings, not per loader Lightning builds
            self._said = line
            rank_zero_info(line)
        return TrainDataset(
            index.records,
            index.schema,
            self.img_size,
            self.augment,
            seed=self.seed,
            pool_size=self.device_batch_size,
            mosaic_pool=self.mosaic_pool,
            load_resize=self.load_resize,
            close_mosaic_from=self.close_mosaic_from,
            ram=self._ram("train"),
            render=render,
            decode=decode,
        )

    def train_dataloader(self) -> DataLoader[Batch]:
        dataset = self.train_dataset()
        trainer = getattr(self, "trainer", None)
        rank = int(getattr(trainer, "global_rank", 0) or 0)
        world = int(getattr(trainer, "world_size", 1) or 1)
        batch = self.device_batch_size
        sampler = EpochSampler(len(dataset), rank=rank, world_size=world, batch_size=batch)
        drop_last = len(sampler) >= batch
        # its workers prepare the next epoch's batches while this one trains (`epoch_loader`)
        return self._loader(dataset, sampler=sampler, drop_last=drop_last, kind=EpochLoader)

    def val_dataloader(self) -> DataLoader[Batch]:
        index = self._index("val")
        return self._loader(
            EvalDataset(index.records, index.schema, self.img_size, self._ram("val"))
        )

    def test_dataloader(self) -> DataLoader[Batch]:
        index = self._index("test")
        return self._loader(
            EvalDataset(index.records, index.schema, self.img_size, self._ram("test"))
        )
