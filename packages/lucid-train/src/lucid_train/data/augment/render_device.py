"""The device renderer: a batch of `PixelPlan` s painted in one pass on the accelerator.

The loader worker packs the plans of a batch and each source it reads, once, into a `PixelBatch`
(`pack_plans`); after the transfer, `PixelBatch.render` paints every sample with tensor ops on
whatever device the batch is on (CUDA in training, the CPU in tests). The semantics are
`render_cpu`'s, step for step:

- geometry: each output pixel centre is mapped back through its plane's tiles; the last tile
  whose whole-pixel source crop holds the point paints it (tiles are pasted in order), by
  bilinear interpolation between the four nearest source pixels clamped to that crop; no tile:
  the fill grey. That is Pillow's affine transform (a point outside the source is fill,
  neighbours clamp at its edge), including its truncation to 8 bits. Mosaic seams under rotation
  or shear are hard-edged here where Pillow's alpha paste antialiases them (the default recipe
  has neither);
- mixup: the partner's plane blended with Pillow's weights and truncation;
- copy-paste: where the rings' mask (rasterised by Pillow in the worker, shipped as bits) is set,
  the pixel comes from the mirrored image;
- HSV: the colour matrix as Pillow rounds it, or the authors' 8-bit HSV round trip
  (`AugmentConfig.hsv_rule`), by the CPU renderer's own arithmetic (`hsv.jitter_batch`);
- flip.

Coordinates are float32 on the device where Pillow uses float64, so a pixel can differ from the
CPU renderer by a level where an interpolation weight rounds the other way (and at tile seams);
`tests/lucid-train/test_data_render.py` holds the bound. Sources are either decoded rows shipped
by the worker or JPEG files decoded on the device (`decode_jpeg`, nvJPEG on CUDA): ahead, in the
loader's pinning thread (`PixelBatch.pin_memory`), or at the render when the batch is not pinned.
A pinned training batch is painted there too, on the same side stream (`paint_ahead`).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import torch
from PIL import Image

from lucid_train.data.augment.copy_paste import paste_mask
from lucid_train.data.augment.hsv import colour_arrays, jitter_batch
from lucid_train.data.augment.plan import PixelPlan, SizedImage
from lucid_train.data.augment.warp import pixel_crop
from lucid_train.data.by_value import reduce_fields
from lucid_train.data.image_io import CorruptImageError, EncodedImage

MAX_TILES = 4  # a mosaic plane; a letterboxed plane has one
CHUNK_PIXELS = 1 << 24  # output pixels painted at once (bounds the temporaries to ~2 GB)
_EPS = 1e-3  # of a level: float32 noise must not move a truncation across an integer
_HOST = ("jpeg", "jpeg_ends", "jpeg_hw")  # read by the decoder from host memory
_JPEG_LOCK = threading.Lock()  # one decode at a time on the stream: its freed blocks stay idle


@functools.cache
def _decode_stream(device: torch.device) -> torch.cuda.Stream:
    """The side stream the pinning thread decodes and paints ahead on."""
    return torch.cuda.Stream(device)  # type: ignore[no-untyped-call]


@functools.cache
def _jpeg_stream(device: torch.device) -> torch.cuda.Stream:
    """The stream that is current while nvJPEG decodes (`PixelBatch._decode` says why)."""
    return torch.cuda.Stream(device)  # type: ignore[no-untyped-call]


@dataclass
class PixelBatch:
    """The pixel work of one batch of B samples (J with mixup, P with a paste), as tensors.

    Attributes:
        size, fill: output side and padding grey.
        rows: ``(N, 3)`` uint8 RGB rows of the sources decoded in the worker, one after another.
        source_rows: ``(Ns,)`` int64 first row of each source (decoded ones first, then encoded).
        source_hw: ``(Ns, 2)`` int64 stored size of each source.
        jpeg, jpeg_ends: the JPEG files of the remaining sources, end to end ``(bytes,)`` uint8,
            and where each ends; decoded where the batch is rendered, and kept on the CPU, which
            is where the decoder reads them from.
        jpeg_hw: ``(Nj, 2)`` int64 their stored sizes (host), to check what the decoder returns.
        jpeg_paths: their paths, for the error when one does not decode.
        decoded, ready: the JPEG sources decoded ahead on the device as ``(Nj rows, 3)`` uint8
            rows and the CUDA event that says so (`pin_memory` does it, in the loader's pinning
            thread, off the training loop's), else None.
        slots: ``(B + J, T)`` int64 tile of each plane's slots, -1 when empty (T: the most
            tiles a plane of this batch has, at most `MAX_TILES`).
        tile_source: ``(K,)`` int64 source of each tile.
        tile_inverse: ``(K, 2, 3)`` float64 output pixels → source pixels.
        tile_crop: ``(K, 4)`` int64 whole-pixel source crop ``(x0, y0, x1, y1)`` the tile paints
            (a point maps inside it, half-open) and its interpolation clamps to.
        mix_sample, mix_ratio: ``(J,)`` sample of each partner plane and the weight of its base.
        paste_sample: ``(P,)`` int64; paste_bits: ``(P, S*S/8)`` uint8 packed masks.
        hsv: ``(B, 3, 3)`` float32 colour matrices (the identity where there is no jitter, or
            where the authors' rule applies it).
        hsv_tables: ``(B, 3, 256)`` uint8 lookup tables of the authors' rule (`HsvParams.tables`),
            ``(0, 3, 256)`` under the matrix rule; jitter: ``(B,)`` bool, the sample has a
            colour jitter (one without keeps its levels).
        flip: ``(B,)`` bool.
        axis_aligned: every tile maps output rows to source rows and columns to columns (no
            rotation or shear, as in the default recipe): the geometry is then worked out per
            row and per column, and only the reads and the blend run per pixel.
        any_hsv: some sample has a colour jitter (else the colour pass is skipped).
    """

    size: int
    fill: int
    rows: torch.Tensor
    source_rows: torch.Tensor
    source_hw: torch.Tensor
    slots: torch.Tensor
    tile_source: torch.Tensor
    tile_inverse: torch.Tensor
    tile_crop: torch.Tensor
    mix_sample: torch.Tensor
    mix_ratio: torch.Tensor
    paste_sample: torch.Tensor
    paste_bits: torch.Tensor
    hsv: torch.Tensor
    hsv_tables: torch.Tensor
    jitter: torch.Tensor
    flip: torch.Tensor
    axis_aligned: bool = False
    any_hsv: bool = True
    jpeg: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.uint8))
    jpeg_ends: torch.Tensor = field(default_factory=lambda: torch.zeros(0, dtype=torch.int64))
    jpeg_hw: torch.Tensor = field(default_factory=lambda: torch.zeros((0, 2), dtype=torch.int64))
    jpeg_paths: tuple[str, ...] = ()
    decoded: torch.Tensor | None = None
    ready: Any = None

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return reduce_fields(self)  # small tensors by value out of the worker (`by_value`)

    def _map(self, fn: Any, *, host_too: bool) -> PixelBatch:
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            moved = isinstance(value, torch.Tensor) and (host_too or f.name not in _HOST)
            out[f.name] = fn(value) if moved else value
        return PixelBatch(**out)

    def to(self, device: torch.device | str, non_blocking: bool = True) -> PixelBatch:
        """Every tensor but the JPEG files moved to ``device``."""
        return self._map(lambda t: t.to(device, non_blocking=non_blocking), host_too=False)

    def pin_memory(self) -> PixelBatch:
        """Pinned, and with CUDA its JPEG files decoded ahead on a side stream: the DataLoader
        calls this in its pinning thread, so nvJPEG's host work overlaps the training step."""
        out = self._map(lambda t: t if t.is_cuda else t.pin_memory(), host_too=True)
        if out.jpeg_paths and out.decoded is None and torch.cuda.is_available():
            device = torch.device("cuda", torch.cuda.current_device())
            stream = _decode_stream(device)
            with torch.cuda.stream(stream):
                out.decoded = out._decode(device)
                out.ready = torch.cuda.Event()  # type: ignore[no-untyped-call]
                out.ready.record(stream)
        return out

    def paint_ahead(self) -> tuple[torch.Tensor, Any]:
        """Moved to the current CUDA device and painted there on the side stream: ``(B, S, S, 3)``
        uint8 and the event that says so. The pinning thread calls this (through
        `Batch.pin_memory`), so the paint costs the training thread nothing and runs on the GPU
        beside the previous step's work; the consumer waits on the event (`Batch.render`). The
        paint is `render`'s, so its pixels are the same bits."""
        device = torch.device("cuda", torch.cuda.current_device())
        stream = _decode_stream(device)
        with torch.cuda.stream(stream):
            pinned = self._map(lambda t: t if t.is_cuda else t.pin_memory(), host_too=False)
            # From page-locked memory, queued on the side stream; JPEG sources decode in render.
            image = pinned.to(device).render()
            ready = torch.cuda.Event()  # type: ignore[no-untyped-call]
            ready.record(stream)
        return image, ready

    @property
    def batch_size(self) -> int:
        return int(self.hsv.shape[0])

    def render(self) -> torch.Tensor:
        """``(B, S, S, 3)`` uint8 on the batch's device: the samples' images."""
        rows = self._all_rows()
        b, s = self.batch_size, self.size
        # Without mixup or a paste the flip is a column order, folded into the geometry.
        mixes = bool(self.mix_sample.numel() or self.paste_sample.numel())  # shapes, not values
        fold_flip = self.axis_aligned and not mixes
        planes = self._planes(rows, fold_flip)  # (B + J, S, S, 3) float32, whole levels
        image = planes[:b]
        if self.mix_sample.numel():
            r = self.mix_ratio.to(planes.dtype)[:, None, None, None]
            base = image[self.mix_sample]
            # Image.blend(base, other, 1 - r) truncates base + (1 - r) * (other - base).
            blended = (base + (1 - r) * (planes[b:] - base) + _EPS).floor().clamp_(0, 255)
            image = image.index_copy(0, self.mix_sample, blended)
        if self.paste_sample.numel():
            bits = torch.stack([(self.paste_bits >> (7 - k)) & 1 for k in range(8)], -1)
            mask = bits.reshape(-1, s, s).bool()  # (P, S, S)
            chosen = image[self.paste_sample]
            pasted = torch.where(mask[..., None], chosen.flip(2), chosen)
            image = image.index_copy(0, self.paste_sample, pasted)
        if self.any_hsv:
            image = jitter_batch(image, self.hsv, self.hsv_tables, self.jitter)
        if not fold_flip:
            image = torch.where(self.flip[:, None, None, None], image.flip(2), image)
        return image.to(torch.uint8)

    def _all_rows(self) -> torch.Tensor:
        if not self.jpeg_paths:
            return self.rows
        decoded = self.decoded
        if decoded is None:
            decoded = self._decode(self.rows.device)
        elif self.ready is not None:
            current = torch.cuda.current_stream(decoded.device)
            current.wait_event(self.ready)
            decoded.record_stream(current)  # allocated on the decode stream, used on this one
        return decoded if not self.rows.numel() else torch.cat([self.rows, decoded])

    def _decode(self, device: torch.device) -> torch.Tensor:
        """The JPEG sources decoded on ``device`` as rows, checked against their headers, ready
        for the current stream to read.

        On CUDA the decode runs with a stream of its own current, idle on the host's word.
        torchvision's decoder (0.26) takes its outputs from the current stream's cached blocks
        and has nvJPEG write them without waiting for that stream's queued work, so a block
        freed there while queued kernels still read it is overwritten under them (pytorch/vision
        PR 9606 shows it). On the paint stream those readers are the previous batch's index
        tensors: wrong pixels, or a device-side assert (the likely cause of the one a detect fit
        at batch 16 hit on 2026-12-02). This stream's blocks are read by nothing queued: its own
        work is done, and the rows it hands out are marked as used by the caller's stream.
        """
        ends = self.jpeg_ends.tolist()
        files = [self.jpeg[a:b] for a, b in zip([0, *ends[:-1]], ends, strict=True)]
        if device.type != "cuda":
            return self._decode_files(files, device)
        caller = torch.cuda.current_stream(device)
        with _JPEG_LOCK:
            stream = _jpeg_stream(device)
            stream.synchronize()  # the last decode's copies out of nvJPEG's blocks are done
            with torch.cuda.stream(stream):
                rows = self._decode_files(files, device)
        caller.wait_stream(stream)
        rows.record_stream(caller)
        return rows

    def _decode_files(self, files: list[torch.Tensor], device: torch.device) -> torch.Tensor:
        from torchvision.io import ImageReadMode, decode_jpeg

        try:
            images = decode_jpeg(files, mode=ImageReadMode.RGB, device=device)
        except RuntimeError as exc:
            raise CorruptImageError(
                f"one of {list(self.jpeg_paths)}: the device JPEG decoder failed ({exc}); "
                "re-encode the file, or train with --data.decode cpu to find it by name"
            ) from exc
        parts = []
        for image, (h, w), path in zip(images, self.jpeg_hw.tolist(), self.jpeg_paths, strict=True):
            if tuple(image.shape) != (3, h, w):
                raise CorruptImageError(
                    f"{path}: decoded to {tuple(image.shape[1:])} where its header said {(h, w)}; "
                    "re-encode the file"
                )
            parts.append(image.permute(1, 2, 0).reshape(-1, 3))
        return torch.cat(parts)

    def _planes(self, rows: torch.Tensor, fold_flip: bool = False) -> torch.Tensor:
        n, s = self.slots.shape[0], self.size
        # One 8-byte word per source pixel (RGB + pad as int16), so each neighbour is a single
        # aligned gather instead of three byte loads.
        words = torch.zeros((rows.shape[0] + 1, 4), dtype=torch.int16, device=rows.device)
        words[:-1, :3] = rows
        table = words.view(torch.int64).view(-1)
        # Per tile: its crop, first row, row width and height, gathered as one row.
        crop = self.tile_crop
        hw = self.source_hw[self.tile_source]
        tiles = torch.cat([crop, self.source_rows[self.tile_source, None], hw[:, 1:], hw[:, :1]], 1)
        tiles = tiles.to(torch.int32)
        out = torch.empty((n, s, s, 3), dtype=torch.float32, device=rows.device)
        step = max(1, CHUNK_PIXELS // (s * s))
        for p0 in range(0, n, step):
            slots = self.slots[p0 : p0 + step]
            if self.axis_aligned:
                flip = self.flip[p0 : p0 + step] if fold_flip else None
                self._paint_separable(table, tiles, slots, flip, out[p0 : p0 + step])
            else:
                out[p0 : p0 + step] = self._paint(table, tiles, slots)
        return out

    def _paint_separable(
        self,
        table: torch.Tensor,
        tiles: torch.Tensor,
        slots: torch.Tensor,
        flip: torch.Tensor | None,
        out: torch.Tensor,
    ) -> None:
        """`_paint` for axis-aligned tiles, into ``out``: a source x depends on the output
        column alone and a source y on the row, so coordinates, crops, clamps and weights are
        ``(p, T, S)`` vectors; per pixel remain the tile choice (mosaic), four reads and the
        blend. ``flip``: mirror these planes by reversing their columns."""
        s, device = self.size, table.device
        centre = torch.arange(s, device=device, dtype=torch.float32) + 0.5  # (S,)
        k = slots.clamp(min=0)  # (p, T)
        inv = self.tile_inverse.to(torch.float32)[k]  # (p, T, 2, 3)
        sx = inv[..., 0, 0, None] * centre + inv[..., 0, 2, None]  # (p, T, S) by column
        sy = inv[..., 1, 1, None] * centre + inv[..., 1, 2, None]  # (p, T, S) by row
        t = tiles[k]  # (p, T, 7): x0 y0 x1 y1 base width height
        box = t[..., :4].to(torch.float32)
        valid = (slots >= 0)[..., None]
        cover_x = valid & (sx >= box[..., 0:1]) & (sx < box[..., 2:3])  # (p, T, S)
        cover_y = valid & (sy >= box[..., 1:2]) & (sy < box[..., 3:4])
        sx, sy = sx - 0.5, sy - 0.5
        fx, fy = sx.floor(), sy.floor()
        dx, dy = sx - fx, sy - fy
        xi, yi = fx.to(torch.int32), fy.to(torch.int32)
        x0, y0, x1, y1, base, width, height = (v[..., None] for v in t.unbind(-1))
        # Clamped to the crop as Pillow clamps; then into the source, which changes nothing
        # for a painted pixel and keeps an unpainted one's (discarded) reads inside the table.
        # (An empty crop may start at the source's far edge; the crops start at 0 or after.)
        x0, y0 = torch.minimum(x0, width - 1), torch.minimum(y0, height - 1)
        last_x, last_y = torch.minimum(x1 - 1, width - 1), torch.minimum(y1 - 1, height - 1)
        xa = torch.maximum(torch.minimum(xi, last_x), x0)
        xb = torch.maximum(torch.minimum(xi + 1, last_x), x0)
        ya = torch.maximum(torch.minimum(yi, last_y), y0)
        yb = torch.maximum(torch.minimum(yi + 1, last_y), y0)
        top_row, bottom_row = base + ya * width, base + yb * width  # (p, T, S) by row
        if flip is not None:  # the mirrored plane's column j is the plane's column S - 1 - j
            f = flip[:, None, None]
            xa, xb, dx, cover_x = (torch.where(f, v.flip(-1), v) for v in (xa, xb, dx, cover_x))
        columns, lines = (xa, xb, dx), (top_row, bottom_row, dy)
        if slots.shape[1] == 1:  # one tile a plane (letterbox): broadcast rows against columns
            painted = cover_y[:, 0, :, None] & cover_x[:, 0, None, :]  # (p, S, S)
            xa, xb, dx = (v[:, 0, None, :] for v in columns)
            top_row, bottom_row, dy = (v[:, 0, :, None] for v in lines)
        else:  # the last tile whose crop holds the pixel paints it (tiles pasted in order)
            covered = cover_y[..., :, None] & cover_x[..., None, :]  # (p, T, S, S)
            painted = covered.any(1)
            last = covered.shape[1] - 1 - covered.flip(1).to(torch.uint8).argmax(1, keepdim=True)
            grid = (-1, -1, s, s)
            xa, xb, dx = (v[:, :, None, :].expand(grid).gather(1, last)[:, 0] for v in columns)
            top_row, bottom_row, dy = (
                v[:, :, :, None].expand(grid).gather(1, last)[:, 0] for v in lines
            )

        def at(row: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
            return table[row + col].view(torch.int16).view(*painted.shape, 4)[..., :3].float()

        value = _blend(at, top_row, bottom_row, xa, xb, dx[..., None], dy[..., None])
        fill = torch.full((), float(self.fill), device=device)
        torch.where(painted[..., None], value, fill, out=out)

    def _paint(self, table: torch.Tensor, tiles: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        s, device = self.size, table.device
        centre = torch.arange(s, device=device, dtype=torch.float32) + 0.5
        x, y = centre[None, None, None, :], centre[None, None, :, None]
        k = slots.clamp(min=0)  # (p, T)
        inv = self.tile_inverse.to(torch.float32)[k][..., None, None]  # (p, T, 2, 3, 1, 1)
        sx = inv[:, :, 0, 0] * x + inv[:, :, 0, 1] * y + inv[:, :, 0, 2]  # (p, T, S, S)
        sy = inv[:, :, 1, 0] * x + inv[:, :, 1, 1] * y + inv[:, :, 1, 2]
        box = tiles[k, :4].to(torch.float32)[..., None, None]  # (p, T, 4, 1, 1)
        covered = (
            (slots >= 0)[..., None, None]
            & (sx >= box[:, :, 0])
            & (sx < box[:, :, 2])
            & (sy >= box[:, :, 1])
            & (sy < box[:, :, 3])
        )
        painted = covered.any(1)  # (p, S, S)
        # Tiles are pasted in order, so where whole-pixel crops overlap at a seam the last wins.
        last = covered.shape[1] - 1 - covered.flip(1).to(torch.uint8).argmax(1, keepdim=True)
        sx = sx.gather(1, last)[:, 0] - 0.5
        sy = sy.gather(1, last)[:, 0] - 0.5
        tile = k[:, :, None, None].expand(-1, -1, s, s).gather(1, last)[:, 0]  # (p, S, S)
        x0i, y0i, x1i, y1i, base, width, _ = tiles[tile].unbind(-1)  # each (p, S, S) int32
        fx, fy = sx.floor(), sy.floor()
        dx, dy = (sx - fx)[..., None], (sy - fy)[..., None]
        xi, yi = fx.to(torch.int32), fy.to(torch.int32)
        xa = torch.maximum(torch.minimum(xi, x1i - 1), x0i)
        xb = torch.maximum(torch.minimum(xi + 1, x1i - 1), x0i)
        ya = torch.maximum(torch.minimum(yi, y1i - 1), y0i)
        yb = torch.maximum(torch.minimum(yi + 1, y1i - 1), y0i)
        top_row, bottom_row = base + ya * width, base + yb * width
        blank = table.shape[0] - 1  # the zero word: unpainted pixels read it harmlessly

        def at(row: torch.Tensor, col: torch.Tensor) -> torch.Tensor:
            index = torch.where(painted, row + col, blank)
            return table[index].view(torch.int16).view(*index.shape, 4)[..., :3].float()

        value = _blend(at, top_row, bottom_row, xa, xb, dx, dy)
        return torch.where(painted[..., None], value, float(self.fill))


def _blend(
    at: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    top_row: torch.Tensor,
    bottom_row: torch.Tensor,
    xa: torch.Tensor,
    xb: torch.Tensor,
    dx: torch.Tensor,
    dy: torch.Tensor,
) -> torch.Tensor:
    """Pillow's bilinear blend of the four neighbours that ``at(row, col)`` reads, truncated to
    whole levels (``dx``, ``dy``: the weights, broadcasting over the channels)."""
    top = at(top_row, xa)
    top = (at(top_row, xb) - top).mul_(dx).add_(top)
    bottom = at(bottom_row, xa)
    bottom = (at(bottom_row, xb) - bottom).mul_(dx).add_(bottom)
    return (bottom - top).mul_(dy).add_(top).add_(_EPS).floor_()


def pack_plans(
    plans: Sequence[PixelPlan], sources: Mapping[int, SizedImage], paths: Mapping[int, str]
) -> PixelBatch:
    """Pack one batch's plans and every source they read (in the worker). ``sources`` holds a
    decoded `PIL.Image` or an `EncodedImage` per dataset index; ``paths`` names them."""
    if not plans:
        raise ValueError("pack_plans: an empty batch")
    size, fill = plans[0].size, plans[0].fill
    order = list(dict.fromkeys(i for p in plans for i in p.sources))
    decoded = [i for i in order if not isinstance(sources[i], EncodedImage)]
    encoded = [i for i in order if isinstance(sources[i], EncodedImage)]
    slot_of = {index: k for k, index in enumerate(decoded + encoded)}
    hw = np.array([(sources[i].height, sources[i].width) for i in decoded + encoded], np.int64)
    first_row = np.concatenate([[0], np.cumsum(hw[:, 0] * hw[:, 1])[:-1]]).astype(np.int64)
    # each decoded source copied once, straight into its rows (a concatenation copies twice)
    rows = np.empty((int((hw[: len(decoded), 0] * hw[: len(decoded), 1]).sum()), 3), np.uint8)
    for k, i in enumerate(decoded):
        start = int(first_row[k])
        pixels = np.asarray(_rgb(sources[i], paths.get(i, str(i))), np.uint8).reshape(-1, 3)
        rows[start : start + len(pixels)] = pixels
    planes = [p.base for p in plans] + [p.mixup[0] for p in plans if p.mixup is not None]
    # As many slots as the batch's fullest plane: a batch of letterboxed planes (no mosaic, as in
    # the close-mosaic epochs) paints one tile per pixel, not four.
    width = max(1, max(len(tiles) for tiles in planes))
    slots = np.full((len(planes), width), -1, np.int64)
    tile_source: list[int] = []
    inverse: list[np.ndarray] = []
    crop: list[tuple[int, int, int, int]] = []
    for k, tiles in enumerate(planes):
        if len(tiles) > MAX_TILES:
            raise ValueError(f"pack_plans: {len(tiles)} tiles in one plane (at most {MAX_TILES})")
        for t, tile in enumerate(tiles):
            h, w = (int(v) for v in hw[slot_of[tile.source]])
            r = tile.region or (0.0, 0.0, float(w), float(h))
            slots[k, t] = len(tile_source)
            tile_source.append(slot_of[tile.source])
            inverse.append(np.linalg.inv(tile.matrix)[:2])
            crop.append(pixel_crop(r, w, h))
    aligned = all(m[0, 1] == 0 and m[1, 0] == 0 for m in inverse)
    mixed = [b for b, p in enumerate(plans) if p.mixup is not None]
    pasted = [b for b, p in enumerate(plans) if p.paste]
    bits = [
        np.packbits(np.asarray(paste_mask(list(plans[b].paste), (size, size))) > 0) for b in pasted
    ]
    matrices, tables, jitter = colour_arrays([p.hsv for p in plans])
    files = [_jpeg(sources[i]) for i in encoded]
    return PixelBatch(
        size=size,
        fill=fill,
        rows=torch.from_numpy(rows),
        source_rows=torch.from_numpy(first_row),
        source_hw=torch.from_numpy(hw),
        slots=torch.from_numpy(slots),
        tile_source=torch.tensor(tile_source, dtype=torch.int64),
        tile_inverse=torch.from_numpy(np.stack(inverse).astype(np.float64)),
        tile_crop=torch.tensor(crop, dtype=torch.int64),
        mix_sample=torch.tensor(mixed, dtype=torch.int64),
        mix_ratio=torch.tensor([plans[b].mixup[1] for b in mixed], dtype=torch.float32),  # type: ignore[index]
        paste_sample=torch.tensor(pasted, dtype=torch.int64),
        paste_bits=torch.from_numpy(
            np.stack(bits) if bits else np.zeros((0, size * size // 8), np.uint8)
        ),
        hsv=torch.from_numpy(matrices),
        hsv_tables=torch.from_numpy(tables),
        jitter=torch.from_numpy(jitter),
        flip=torch.tensor([p.flip for p in plans]),
        axis_aligned=aligned,
        any_hsv=bool(jitter.any()),
        jpeg=torch.frombuffer(bytearray(b"".join(files)), dtype=torch.uint8)
        if files
        else torch.zeros(0, dtype=torch.uint8),
        jpeg_ends=torch.tensor(np.cumsum([len(f) for f in files]), dtype=torch.int64),
        jpeg_hw=torch.from_numpy(hw[len(decoded) :].copy()),
        jpeg_paths=tuple(paths.get(i, str(i)) for i in encoded),
    )


def _jpeg(image: SizedImage) -> bytes:
    assert isinstance(image, EncodedImage)
    return image.data


def _rgb(image: SizedImage, name: str) -> Image.Image:
    if not isinstance(image, Image.Image):
        raise TypeError(f"{name}: expected a decoded image, got {type(image).__name__}")
    return image
