"""Compact batch transport from loader workers to the device.

A worker returns one `Batch` per step: uint8 images and the targets of all images packed into a
handful of dense tensors (ragged per-image lists would cost one shared-memory segment each).
`Batch` has ``to`` and ``pin_memory``, so DataLoader pinning and Lightning's device transfer handle
it as one object; `Batch.float_images` and `Batch.instance_masks` unpack on the device.

Images travel as ``(B, H, W, 3)`` uint8: `Batch.float_images` permutes them to NCHW, which is a
channels-last tensor for free.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from lucid_train.data.augment.plan import PixelPlan, SizedImage
from lucid_train.data.augment.render_device import PixelBatch, pack_plans
from lucid_train.data.by_value import reduce_fields
from lucid_train.data.targets import Targets


@dataclass
class Sample:
    """One rendered image before batching (numpy, built in a worker).

    Attributes:
        image: ``(S, S, 3)`` uint8 RGB canvas, or None when the device renders ``plan``.
        targets: its targets in canvas pixels.
        instance_map: ``(S/4, S/4)`` int16 (segment) or None.
        image_id: the dataset's image id.
        orig_hw: stored size of the source image ``(height, width)``.
        letterbox: ``(gain, pad_x, pad_y)`` mapping source to canvas pixels (validation), or NaNs
            for augmented training samples (no inverse exists).
        plan: the pixels still to render (device rendering), else None.
        sources: every source ``plan`` reads, by dataset index (decoded, or JPEG files).
        paths: their file names, for error messages.
    """

    image: npt.NDArray[np.uint8] | None
    targets: Targets
    instance_map: npt.NDArray[np.int16] | None
    image_id: int
    orig_hw: tuple[int, int]
    letterbox: tuple[float, float, float]
    plan: PixelPlan | None = None
    sources: dict[int, SizedImage] = field(default_factory=dict)
    paths: dict[int, str] = field(default_factory=dict)
    skipped: tuple[str, ...] = ()  # images found corrupt while preparing it (substituted)


_NOT_TENSORS = ("ready", "skipped")  # Batch fields `Batch.to` and `pin_memory` pass through


@dataclass
class Batch:
    """A packed batch of B images and T instances.

    Attributes:
        images: ``(B, H, W, 3)`` uint8.
        batch_idx: ``(T,)`` int64 image of each instance (sorted, images in order).
        labels: ``(T,)`` int64 contiguous class labels.
        boxes: ``(T, 4)`` float32 xyxy canvas pixels.
        difficult: ``(T,)`` bool.
        rboxes: ``(T, 5)`` float32 ``(cx, cy, w, h, theta)`` long-edge (obb), else ``(0, 5)``.
        keypoints: ``(T, K, 3)`` float32 ``(x, y, visibility)`` (pose), else ``(T, 0, 3)``.
        instance_map: ``(B, H/4, W/4)`` int16 (segment), else ``(B, 0, 0)``.
        image_ids: ``(B,)`` int64 dataset image ids.
        orig_hw: ``(B, 2)`` int64 source sizes.
        letterbox: ``(B, 3)`` float64 ``(gain, pad_x, pad_y)``; NaN for training samples.
        pixels: the pixel work still to do when the device renders (then ``images`` is
            ``(B, 0, 0, 3)`` until `render`), else None.
        ready: the CUDA event after which ``images``, painted ahead on the pinning thread's side
            stream (`pin_memory`), may be read; `render` (and `to`, the device transfer) makes
            the consumer's stream wait on it.
    """

    images: torch.Tensor
    batch_idx: torch.Tensor
    labels: torch.Tensor
    boxes: torch.Tensor
    difficult: torch.Tensor
    rboxes: torch.Tensor
    keypoints: torch.Tensor
    instance_map: torch.Tensor
    image_ids: torch.Tensor
    orig_hw: torch.Tensor
    letterbox: torch.Tensor
    pixels: PixelBatch | None = None
    ready: Any = None
    skipped: tuple[str, ...] = ()  # the samples' `Sample.skipped`, for the epoch's summary

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return reduce_fields(self)  # small tensors by value out of the worker (`by_value`)

    def _map(self, fn: Any) -> Batch:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = value if value is None or f.name in _NOT_TENSORS else fn(value)
        return Batch(**out)

    def to(self, device: torch.device | str, non_blocking: bool = True) -> Batch:
        """Every tensor moved to ``device``. Non-blocking by default: safe on one stream, and a
        real overlap when the batch is pinned (Lightning calls ``to(device)`` without the flag).
        Images painted ahead are awaited first (`render`), so a copy of them reads the paint."""
        batch = self.render() if self.ready is not None else self
        return batch._map(lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> Batch:
        """Every tensor in page-locked memory (called by the DataLoader's pinning thread). With
        CUDA, pixels still to render are painted here, on the GPU's side stream
        (`PixelBatch.paint_ahead`): the training thread then only waits on ``ready``."""
        if self.pixels is None or not torch.cuda.is_available():
            return self._map(lambda t: t.pin_memory())
        images, ready = self.pixels.paint_ahead()
        rest = replace(self, pixels=None)._map(lambda t: t.pin_memory())
        return replace(rest, images=images, ready=ready)

    def render(self) -> Batch:
        """This batch with its images painted where it is, or, when they were painted ahead
        (`pin_memory`), ready for the current stream to read (a no-op once rendered)."""
        if self.ready is not None:
            stream = torch.cuda.current_stream(self.images.device)
            stream.wait_event(self.ready)
            self.images.record_stream(stream)  # allocated on the side stream, freed after use here
            return replace(self, ready=None)
        if self.pixels is None:
            return self
        return replace(self, images=self.pixels.render(), pixels=None)

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def counts(self) -> torch.Tensor:
        """``(B,)`` int64 instances per image."""
        return torch.bincount(self.batch_idx, minlength=len(self))

    def float_images(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """``(B, 3, H, W)`` in ``[0, 1]``, channels-last in memory."""
        if self.pixels is not None or self.ready is not None:
            raise RuntimeError(
                "Batch.float_images: the images are not rendered yet; call Batch.render() after "
                "the transfer (LucidDataModule does it in on_after_batch_transfer)"
            )
        return self.images.permute(0, 3, 1, 2).to(dtype).div_(255)

    def instance_masks(self) -> torch.Tensor:
        """``(T, H/4, W/4)`` bool, one mask per instance, expanded from ``instance_map``."""
        counts = self.counts()
        starts = torch.cumsum(counts, 0) - counts  # (B,) first instance of each image
        local = (
            torch.arange(self.batch_idx.numel(), device=self.batch_idx.device)
            - starts[self.batch_idx]
        )
        maps = self.instance_map[self.batch_idx].to(torch.int64)  # (T, h, w)
        return maps == (local + 1)[:, None, None]


def collate(samples: Sequence[Sample]) -> Batch:
    """Pack rendered samples into one `Batch` (runs in the worker)."""
    n = [len(s.targets) for s in samples]
    targets = [s.targets for s in samples]
    k = targets[0].num_keypoints
    t_all = Targets.concat(targets)
    if t_all.keypoints is not None and t_all.keypoint_vis is not None:
        kp = np.concatenate([t_all.keypoints, t_all.keypoint_vis[..., None].astype(np.float32)], -1)
    else:
        kp = np.zeros((len(t_all), k, 3), np.float32)
    if samples[0].instance_map is not None:
        imap = np.stack([s.instance_map for s in samples if s.instance_map is not None])
    else:
        imap = np.zeros((len(samples), 0, 0), np.int16)
    pixels = None
    if samples[0].plan is not None:
        plans = [s.plan for s in samples if s.plan is not None]
        sources = {i: im for s in samples for i, im in s.sources.items()}
        paths = {i: p for s in samples for i, p in s.paths.items()}
        pixels = pack_plans(plans, sources, paths)
        images = torch.zeros((len(samples), 0, 0, 3), dtype=torch.uint8)
    else:
        images = torch.from_numpy(np.stack([s.image for s in samples if s.image is not None]))
    return Batch(
        images=images,
        batch_idx=torch.repeat_interleave(
            torch.arange(len(samples)), torch.tensor(n, dtype=torch.int64)
        ),
        labels=torch.from_numpy(t_all.labels),
        boxes=torch.from_numpy(t_all.boxes),
        difficult=torch.from_numpy(t_all.difficult),
        rboxes=torch.from_numpy(
            t_all.rboxes if t_all.rboxes is not None else np.zeros((0, 5), np.float32)
        ),
        keypoints=torch.from_numpy(kp),
        instance_map=torch.from_numpy(imap),
        image_ids=torch.tensor([s.image_id for s in samples], dtype=torch.int64),
        orig_hw=torch.tensor([s.orig_hw for s in samples], dtype=torch.int64),
        letterbox=torch.tensor([s.letterbox for s in samples], dtype=torch.float64),
        pixels=pixels,
        skipped=tuple(path for s in samples for path in s.skipped),
    )
