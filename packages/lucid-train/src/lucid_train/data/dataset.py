"""Map-style datasets for training and validation, and the epoch-aware sampler that drives them.

Seeding (assumptions.md D11): the training sampler yields ``(epoch, position)`` keys. The dataset
turns a key into the epoch's shuffled index and into the sample's seed
``SeedSequence([seed, epoch, position])``, so every sample of every epoch has its own stream:
distinct across workers and epochs, and the same whatever ``num_workers`` is.

Mosaic partners (assumptions.md D11, D23) come from a pool that is a function of the epoch
permutation alone, never of worker timing, so a resumed run draws the same ones:

- ``buffer`` (the authors' rule, the default): the images of the
  ``buffer_length(n, pool_size) - 1`` epoch positions up to and including the sample's own, the
  "recently loaded" images of a loader that reads the permutation in order (at an epoch's start
  the previous epoch's tail; none before epoch 0). Mixup partners are any image of the split,
  as the authors' ``MixUp`` draws them.
- ``batch``: the block of ``pool_size`` consecutive positions holding the sample (its batch), for
  mosaic and mixup partners alike; a worker finds them among the images it decodes for that batch
  anyway (a small per-worker decode cache serves the repeats).
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Literal

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset, Sampler

from lucid_train.data.augment.config import AugmentConfig
from lucid_train.data.augment.letterbox import letterbox
from lucid_train.data.augment.pipeline import TrainAugment
from lucid_train.data.augment.plan import SizedImage
from lucid_train.data.augment.warp import scaling, transform_targets, warp_image
from lucid_train.data.image_io import CorruptImageError, open_rgb, read_jpeg
from lucid_train.data.masks import MASK_STRIDE, instance_map
from lucid_train.data.ram_cache import RamImages
from lucid_train.data.records import DatasetSchema, ImageRecord
from lucid_train.data.targets import Targets
from lucid_train.data.transport import Sample

_NAN3 = (math.nan, math.nan, math.nan)
MosaicPool = Literal["buffer", "batch"]
MOSAIC_POOLS: tuple[MosaicPool, ...] = ("buffer", "batch")


def buffer_length(n: int, batch: int) -> int:
    """The authors' mosaic buffer bound ``min(n, 8 batch, 1000)`` (8.4.190 ``BaseDataset``). Their
    buffer drops its oldest image once it holds that many, so it keeps one fewer."""
    return min(n, 8 * batch, 1000)


def epoch_permutation(seed: int, epoch: int, n: int) -> np.ndarray:
    """The shuffled order ``(n,)`` int64 of one epoch."""
    return np.random.default_rng(np.random.SeedSequence([seed, epoch, 0x5EED])).permutation(n)


def load_size(height: int, width: int, size: int) -> tuple[int, int]:
    """``(height, width)`` of a source resized as the authors' ``load_image`` does: the long side
    to ``size``, each side rounded up and capped at ``size`` (8.4.190 ``BaseDataset``)."""
    r = size / max(height, width)
    return min(math.ceil(height * r), size), min(math.ceil(width * r), size)


def load_resized(image: Image.Image, targets: Targets, size: int) -> tuple[Image.Image, Targets]:
    """``image`` and ``targets`` resized to `load_size` by a bilinear resample without
    antialiasing, as their ``cv2.resize(INTER_LINEAR)`` (same pixel-centre convention; Pillow's
    affine to shrink, its separable resize to enlarge): the first of the authors' two resamples
    (assumptions.md D24)."""
    h, w = load_size(image.height, image.width, size)
    if (h, w) == (image.height, image.width):
        return image, targets
    m = scaling(w / image.width, h / image.height)
    moved = transform_targets(targets, m, (0.0, 0.0, float(w), float(h)))
    if w > image.width:
        # An enlargement: Pillow's separable resize, which widens its filter only to shrink, so
        # here the same two bilinear taps as the affine, 2.5x faster and rounded where the
        # affine truncates: equal to cv2's INTER_LINEAR on 77 % of pixels against the affine's
        # 65 %, both never a level further (tests/peer/test_load_resize_ladder.py).
        return image.resize((w, h), Image.Resampling.BILINEAR, reducing_gap=None), moved
    return warp_image(image, m, (w, h)), moved


class _DecodeCache:
    """A small per-worker LRU of decoded images (mosaic partners repeat within a batch), or the
    split's `RamImages` when it is cached whole. With ``encoded``, JPEG files the device can
    decode are read but not decoded (`read_jpeg`); other files are decoded here. With
    ``resize``, decoded sources are resized to that side first (`load_resized`)."""

    def __init__(
        self,
        records: Sequence[ImageRecord],
        capacity: int,
        ram: RamImages | None = None,
        *,
        encoded: bool = False,
        resize: int | None = None,
    ) -> None:
        self.records = records
        self.capacity = capacity
        self.ram = ram
        self.encoded = encoded
        self.resize = resize
        self.items: OrderedDict[int, tuple[SizedImage, Targets]] = OrderedDict()
        self.hits = 0
        self.misses = 0
        self.skipped: list[str] = []  # corrupt files met since the last `take_skipped`

    def take_skipped(self) -> tuple[str, ...]:
        out, self.skipped = tuple(self.skipped), []
        return out

    def __call__(self, index: int) -> tuple[SizedImage, Targets]:
        rec = self.records[index]
        if self.ram is not None and self.resize is None:
            return self.ram.image(index), rec.targets
        item = self.items.get(index)
        if item is None:
            self.misses += 1
            item = self._decode(index)
            self.items[index] = item
            if len(self.items) > self.capacity:
                self.items.popitem(last=False)
        else:
            self.hits += 1
            self.items.move_to_end(index)
        return item

    def _encoded(self, rec: ImageRecord) -> bool:
        """Whether ``rec`` is left to the device decoder: asked for, and no resize to do first
        (nvJPEG decodes at the stored size; the record's declared size decides)."""
        if not self.encoded:
            return False
        if self.resize is None:
            return True
        return load_size(rec.height, rec.width, self.resize) == (rec.height, rec.width)

    def _decode(self, index: int) -> tuple[SizedImage, Targets]:
        """The image and targets of record ``index`` (load-resized when asked); a file that no
        longer decodes (it turned corrupt after the split was read) is noted in `skipped` and
        stands in by the next record that decodes, targets and all, as the authors' loader drops
        corrupt images."""
        n = len(self.records)
        for step in range(n):
            at = (index + step) % n
            rec = self.records[at]
            image: SizedImage
            try:
                if self.ram is not None:
                    image = self.ram.image(at)
                else:
                    image = (read_jpeg(rec.path) if self._encoded(rec) else None) or open_rgb(
                        rec.path
                    )
            except CorruptImageError:
                self.skipped.append(str(rec.path))
                continue
            if self.resize is not None and isinstance(image, Image.Image):
                return load_resized(image, rec.targets, self.resize)
            return image, rec.targets
        raise CorruptImageError(f"{self.records[index].path}: no image of the split decodes now")


def _rings(targets: Targets) -> list[np.ndarray]:
    return list(targets.polygons) if targets.polygons is not None else []


class TrainDataset(Dataset[Sample]):
    """Augmented training samples, keyed by ``(epoch, position)`` (see `EpochSampler`).

    Args:
        records: the split's images.
        schema: label meaning (flip index, task).
        size: output canvas side.
        cfg: augmentation settings.
        seed: base seed of shuffling and augmentation.
        pool_size: the batch size: the ``batch`` pool's block, and what sizes the ``buffer``.
        mosaic_pool: where mosaic (and mixup) partners come from (see the module docstring).
        close_mosaic_from: first epoch trained with `AugmentConfig.without_mosaic`, or None.
        cache_images: decoded images each worker keeps.
        ram: the split decoded in RAM (``cache="ram"``), index-aligned with ``records``.
        render: ``cpu`` paints samples here (Pillow); ``device`` returns their `PixelPlan` for
            `Batch.render` to paint on the accelerator.
        decode: with ``render="device"``, ``device`` leaves JPEG files to the device decoder;
            ``cpu`` decodes every source here.
        load_resize: resize each source to the long side ``size`` first, as the authors'
            ``load_image`` (their two resamples, D24; `LucidDataModule`'s default); a source
            that needs it is then decoded here.
    """

    def __init__(
        self,
        records: Sequence[ImageRecord],
        schema: DatasetSchema,
        size: int,
        cfg: AugmentConfig,
        *,
        seed: int = 0,
        pool_size: int = 16,
        mosaic_pool: MosaicPool = "buffer",
        close_mosaic_from: int | None = None,
        cache_images: int = 64,
        ram: RamImages | None = None,
        render: Literal["cpu", "device"] = "cpu",
        decode: Literal["cpu", "device"] = "cpu",
        load_resize: bool = False,
    ) -> None:
        if render not in ("cpu", "device") or decode not in ("cpu", "device"):
            raise ValueError(f"render, decode: expected 'cpu' or 'device', got {render}, {decode}")
        if mosaic_pool not in MOSAIC_POOLS:
            raise ValueError(f"mosaic_pool: expected one of {MOSAIC_POOLS}, got {mosaic_pool!r}")
        if not records:
            raise ValueError("TrainDataset: the split holds no images")
        self.records = list(records)
        self.schema = schema
        self.size = size
        self.cfg = cfg
        self.seed = seed
        self.pool_size = max(1, pool_size)
        self.mosaic_pool: MosaicPool = mosaic_pool
        self.window = max(1, buffer_length(len(self.records), self.pool_size) - 1)
        self.close_mosaic_from = close_mosaic_from
        self.render = render
        self.cache = _DecodeCache(
            self.records,
            max(cache_images, 2 * self.pool_size),
            ram,
            encoded=render == "device" and decode == "device",
            resize=size if load_resize else None,
        )
        self._perms: OrderedDict[int, np.ndarray] = OrderedDict()

    def __len__(self) -> int:
        return len(self.records)

    def config_for(self, epoch: int) -> AugmentConfig:
        """The augmentation settings in force at ``epoch`` (close-mosaic applied)."""
        if self.close_mosaic_from is not None and epoch >= self.close_mosaic_from:
            return self.cfg.without_mosaic()
        return self.cfg

    def permutation(self, epoch: int) -> np.ndarray:
        perm = self._perms.get(epoch)
        if perm is None:
            perm = self._perms[epoch] = epoch_permutation(self.seed, epoch, len(self))
            if len(self._perms) > 2:  # this epoch's and the previous one's (the buffer's tail)
                self._perms.popitem(last=False)
        return perm

    def partners(self, epoch: int, position: int) -> tuple[Sequence[int], Sequence[int]]:
        """The mosaic and the mixup partner pools of the sample at ``position`` of ``epoch``."""
        perm = self.permutation(epoch)
        if self.mosaic_pool == "batch":
            start = (position // self.pool_size) * self.pool_size
            block = perm[start : start + self.pool_size].tolist()
            return block, block
        first = position - self.window + 1
        recent = perm[max(first, 0) : position + 1].tolist()
        if first < 0 and epoch > 0:  # the loader read the previous epoch's tail just before
            recent = self.permutation(epoch - 1)[len(perm) + first :].tolist() + recent
        return recent, range(len(self))

    def augment(self, epoch: int) -> TrainAugment:
        return TrainAugment(self.config_for(epoch), self.size, self.cache, self.schema.flip_index)

    def __getitem__(self, key: tuple[int, int]) -> Sample:
        epoch, position = key
        index = int(self.permutation(epoch)[position])
        pool, mix_pool = self.partners(epoch, position)
        seed = np.random.SeedSequence([self.seed, epoch, position])
        try:
            self.cache.take_skipped()
            sample = self._render(epoch, index, seed, pool, mix_pool)
            sample.skipped = self.cache.take_skipped()
            return sample
        except Exception as exc:
            # A worker's traceback reaches the main process with its notes: name the sample.
            exc.add_note(
                f"lucid data: while preparing training sample (epoch {epoch}, position "
                f"{position}): {self.records[index].path} and its mosaic/mixup partners among "
                f"{[str(self.records[i].path.name) for i in pool]}"
            )
            raise

    def _render(
        self,
        epoch: int,
        index: int,
        seed: np.random.SeedSequence,
        pool: Sequence[int],
        mix_pool: Sequence[int],
    ) -> Sample:
        aug = self.augment(epoch)
        rec = self.records[index]
        params = aug.sample(index, seed, pool, mix_pool)
        if self.render == "cpu":
            image, targets = aug.apply(params)
            return _sample(image, targets, self.schema, rec, _NAN3)
        plan, targets, sources = aug.plan(params)
        sample = _sample(None, targets, self.schema, rec, _NAN3, side=self.size)
        sample.plan, sample.sources = plan, sources
        sample.paths = {i: str(self.records[i].path) for i in sources}
        return sample


class EvalDataset(Dataset[Sample]):
    """Letterboxed validation / test samples in record order (``ram``: the split decoded in
    RAM)."""

    def __init__(
        self,
        records: Sequence[ImageRecord],
        schema: DatasetSchema,
        size: int,
        ram: RamImages | None = None,
    ) -> None:
        self.records = list(records)
        self.schema = schema
        self.size = size
        self.ram = ram

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> Sample:
        rec = self.records[index]
        source = self.ram.image(index) if self.ram is not None else open_rgb(rec.path)
        image, targets, params = letterbox(source, rec.targets, self.size)
        return _sample(image, targets, self.schema, rec, (params.gain, params.pad_x, params.pad_y))


def _sample(
    image: Image.Image | None,
    targets: Targets,
    schema: DatasetSchema,
    rec: ImageRecord,
    lb: tuple[float, float, float],
    *,
    side: int = 0,
) -> Sample:
    """A sample of ``image`` (None: rendered later on a ``side`` x ``side`` canvas)."""
    h, w = (image.height, image.width) if image is not None else (side, side)
    imap = None
    if schema.task == "segment":
        imap = instance_map(_rings(targets), h, w, MASK_STRIDE)
    pixels = None if image is None else np.asarray(image, np.uint8)
    return Sample(pixels, targets, imap, rec.image_id, (rec.height, rec.width), lb)


class EpochSampler(Sampler[tuple[int, int]]):
    """Yields ``(epoch, position)`` keys for `TrainDataset`; Lightning calls `set_epoch`.

    Under data parallelism (assumptions.md T87) rank ``r``'s ``k``-th batch of ``batch_size``
    holds the epoch positions ``[(world k + r) b, (world k + r + 1) b)``: the batch a single
    process with batch ``b`` trains ``world k + r``-th, so one global batch is ``world``
    consecutive single-process batches (mosaic partners included, drawn from the block of
    ``b`` positions). Every rank yields the same count, whole global batches only (at least
    one: a set smaller than a global batch wraps round). Build the trainer with
    ``use_distributed_sampler=False`` so Lightning keeps this sampler.

    Args:
        length: the epoch's positions.
        rank, world_size: this process among the data-parallel ones.
        batch_size: images per batch on one device (the loader's ``batch_size``).
    """

    def __init__(
        self, length: int, *, rank: int = 0, world_size: int = 1, batch_size: int = 1
    ) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(
                f"expected 0 <= rank < world_size, got rank={rank}, world_size={world_size}"
            )
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.length = length
        self.rank = rank
        self.world_size = world_size
        self.batch_size = batch_size
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        if self.world_size == 1:
            return self.length
        return max(self.length // (self.world_size * self.batch_size), 1) * self.batch_size

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return self.keys(self.epoch)

    def keys(self, epoch: int) -> Iterator[tuple[int, int]]:
        """The keys of ``epoch``, whatever epoch is set (a loader running ahead reads them)."""
        b, world = self.batch_size, self.world_size
        for i in range(len(self)):
            k, j = divmod(i, b)
            yield (epoch, ((world * k + self.rank) * b + j) % self.length)


WORKER_NICE = 10  # a loader worker's priority below the training process's, feeding a GPU


def worker_init(worker_id: int, nice: int = 0) -> None:
    """One intra-op thread per worker: the workers already use every core between them. With
    ``nice`` the worker also lowers its priority by that much, so that the training process's
    threads get a core whenever they want one. Feeding a GPU, the workers run ahead of the
    step, on every core but the training process's, and the training thread, which launches
    the GPU's work, lost its core for milliseconds at a time: single host ops of 4-9 ms (a
    kernel launch, a small CPU op) with the GPU idle, in the GPU profile of 2026-12-02. A
    system that refuses the change keeps the priority."""
    del worker_id
    torch.set_num_threads(1)
    if nice and hasattr(os, "nice"):
        with contextlib.suppress(OSError):
            os.nice(nice)
    threading.Thread(
        target=exit_with_parent, args=(os.getppid(),), name="lucid-parent-watch", daemon=True
    ).start()


def exit_with_parent(parent: int, every_s: float = 1.0) -> None:
    """End this worker once the process that started it is gone (killed: nothing will read
    what the worker holds). torch's own check runs between batches only, and a worker that runs
    ahead has a full pipe to the dead process: it blocks writing, lives on, and holds a shell
    that pipes the fit's output (`tee`) open with it."""
    while os.getppid() == parent:
        time.sleep(every_s)
    os._exit(0)
