"""HSV jitter: a random hue shift and saturation / value gains, by one of two rules.

The draws are the authors' (hue shift as a fraction of the colour circle, saturation and value
multiplied by ``1 + gain``); `AugmentConfig.hsv_rule` says how they are applied (assumptions.md
D13):

- ``matrix`` (the default): one 3x3 colour matrix in RGB, about 1.5 ms a 640² image in Pillow.
  Value is exact (every channel, hence the maximum, scales by ``1 + v``); saturation scales the
  distance from the grey of equal luma; hue rotates colours about the grey axis (120° takes red
  to green, like HSV).
- ``authors``: their arithmetic. The 8-bit image goes to 8-bit HSV by OpenCV's integer
  conversion (hue 0..179), through three 256-entry lookup tables (hue added modulo 180,
  saturation and value scaled and clipped, each truncated to a level) and back by OpenCV's
  float32 conversion (``1 - s·f`` rounded once, as its vectorised loop's fused multiply-add, and
  each level truncated): `jitter_levels`, in torch, for a batch with a table set per image, so
  the CPU renderer (one image) and the device renderer (the batch) paint the same levels.
  ``tests/peer/test_hsv_ladder.py`` holds it to their ``RandomHSV`` pixel for pixel; it costs
  about 11 ms a 640² image on one CPU core.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np
import torch
from PIL import Image

from lucid_train.data.augment.config import AugmentConfig, HsvRule

_LUMA = np.array([0.299, 0.587, 0.114])
_SHIFT = 12  # OpenCV's fixed-point reciprocals: value / 2**12
_HUE_RANGE = 180
# For each hue sector, which of (v, v(1 - s), v(1 - s f), v(1 - s (1 - f))) is R, G and B.
_SECTORS = ((0, 3, 1), (2, 0, 1), (1, 0, 3), (1, 2, 0), (3, 1, 0), (0, 1, 2))


@dataclass(frozen=True)
class HsvParams:
    """One draw: ``hue`` shift as a fraction of the circle, ``saturation`` and ``value`` gains."""

    hue: float = 0.0
    saturation: float = 0.0
    value: float = 0.0
    rule: HsvRule = "matrix"

    @classmethod
    def sample(cls, rng: np.random.Generator, cfg: AugmentConfig) -> HsvParams:
        h, s, v = rng.uniform(-1, 1, size=3) * np.array([cfg.hsv_h, cfg.hsv_s, cfg.hsv_v])
        return cls(float(h), float(s), float(v), cfg.hsv_rule)

    @property
    def is_identity(self) -> bool:
        return self.hue == 0 and self.saturation == 0 and self.value == 0

    def matrix(self) -> np.ndarray:
        """``(3, 3)`` float64 colour matrix: value gain · hue rotation · saturation gain."""
        sat = (1 + self.saturation) * np.eye(3) - self.saturation * np.outer(np.ones(3), _LUMA)
        a = 2 * math.pi * self.hue
        k = np.ones(3) / math.sqrt(3)
        cross = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
        rot = math.cos(a) * np.eye(3) + math.sin(a) * cross + (1 - math.cos(a)) * np.outer(k, k)
        out: np.ndarray = (1 + self.value) * rot @ sat
        return out

    def tables(self) -> np.ndarray:
        """``(3, 256)`` uint8 lookup tables for the H, S and V levels (float64, truncated)."""
        x = np.arange(256, dtype=np.float64)
        hue = np.mod(x + self.hue * _HUE_RANGE, _HUE_RANGE)
        sat = np.clip(x * (1 + self.saturation), 0, 255)
        val = np.clip(x * (1 + self.value), 0, 255)
        return np.stack([hue, sat, val]).astype(np.uint8)


def colour_arrays(draws: Sequence[HsvParams]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A batch's draws as `jitter_batch` reads them: ``(B, 3, 3)`` float32 matrices (the identity
    without jitter or under the authors' rule), ``(B, 3, 256)`` uint8 tables (``(0, 3, 256)``
    unless some draw jitters by the authors' rule) and ``(B,)`` bool, which draws jitter."""
    jitter = np.array([not d.is_identity for d in draws], dtype=bool)
    eye = np.eye(3, dtype=np.float32)
    matrices = np.stack(
        [
            d.matrix().astype(np.float32) if j and d.rule == "matrix" else eye
            for d, j in zip(draws, jitter, strict=True)
        ]
    )
    authors = any(j and d.rule == "authors" for d, j in zip(draws, jitter, strict=True))
    tables = np.stack([d.tables() for d in draws]) if authors else np.zeros((0, 3, 256), np.uint8)
    return matrices, tables, jitter


@cache
def _forward_tables(device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """OpenCV's rounded fixed-point reciprocals, indexed by level: 255 / v for S, 30 / diff
    for H."""
    i = torch.arange(256, dtype=torch.float64).clamp(min=1)
    sdiv = torch.round((255 << _SHIFT) / i).to(torch.int32)
    hdiv = torch.round((_HUE_RANGE << _SHIFT) / (6 * i)).to(torch.int32)
    sdiv[0] = hdiv[0] = 0
    return sdiv.to(device), hdiv.to(device)


@cache
def _inverse_tables(device: torch.device) -> torch.Tensor:
    """``(3, 180 * 256)`` float32: what R, G and B are of V at each (H, S) level pair, in
    OpenCV's float32 operations (``1 - s·f`` rounded once, as its fused multiply-add)."""
    f32 = torch.float32
    h = torch.arange(_HUE_RANGE, dtype=f32) * torch.tensor(6 / _HUE_RANGE, dtype=f32)
    s = torch.arange(256, dtype=f32) * torch.tensor(1 / 255, dtype=f32)
    sector = h.trunc()
    frac = (h - sector)[:, None]
    # a float32 product is exact in float64, so 1 - s·f there, then float32, is rounded once
    sd = s[None].double()
    ones = torch.ones(_HUE_RANGE, 256, dtype=f32)
    one_minus_s = (1 - s).expand(_HUE_RANGE, 256)
    one_minus_sf = (1 - sd * frac.double()).float()
    one_minus_s_rest = (1 - sd * (1 - frac).double()).float()  # 1 - f in float32, as theirs
    corners = torch.stack([ones, one_minus_s, one_minus_sf, one_minus_s_rest])  # (4, H, S)
    pick = torch.tensor(_SECTORS)[sector.long()]  # (H, 3): the corner each channel takes
    rgb = torch.gather(corners.permute(1, 2, 0), 2, pick[:, None].expand(-1, 256, -1))
    return rgb.permute(2, 0, 1).reshape(3, -1).contiguous().to(device)


def jitter_levels(planes: torch.Tensor, tables: torch.Tensor) -> torch.Tensor:
    """``(3, N, H, W)`` R, G and B planes of whole levels (any real or integer dtype) through 8-bit
    HSV and each image's ``(N, 3, 256)`` tables; returns the jittered planes as uint8."""
    device = planes.device
    sdiv, hdiv = _forward_tables(device)
    r, g, b = planes.to(torch.int32, memory_format=torch.contiguous_format)
    v = torch.maximum(torch.maximum(r, g), b)
    diff = v - torch.minimum(torch.minimum(r, g), b)
    half = 1 << (_SHIFT - 1)
    s = (diff * _lookup(sdiv, v) + half) >> _SHIFT
    h = torch.where(v == r, g - b, torch.where(v == g, b - r + 2 * diff, r - g + 4 * diff))
    h = (h * _lookup(hdiv, diff) + half) >> _SHIFT
    h = torch.where(h < 0, h + _HUE_RANGE, h)
    # each image's three tables as one flat row of 768: H at 0, S at 256, V at 512
    n = planes.shape[1]
    flat = tables.to(device, torch.int32).reshape(-1)
    row = torch.arange(0, n * 768, 768, device=device, dtype=torch.int32)[:, None, None]
    hs = _lookup(flat, h + row) * 256 + _lookup(flat, s + (row + 256))
    value = _lookup(flat, v + (row + 512)).to(torch.float32)
    value *= torch.tensor(1 / 255, dtype=torch.float32)
    rgb = _inverse_tables(device).index_select(1, hs.reshape(-1)).reshape(3, *hs.shape)
    return (rgb * value * 255).to(torch.uint8)  # levels in [0, 255]: the cast truncates


def jitter_batch(
    image: torch.Tensor, matrices: torch.Tensor, tables: torch.Tensor, jitter: torch.Tensor
) -> torch.Tensor:
    """A painted ``(B, S, S, 3)`` float32 batch of whole levels jittered as the CPU renderer
    jitters each sample: through ``tables`` ``(B, 3, 256)`` where there are any (the authors'
    rule; a sample whose ``jitter`` is False keeps its levels), else through ``matrices``
    ``(B, 3, 3)`` as Pillow's matrix convert rounds (float32 products, + 0.5, truncation, clipped
    to 0..255; the identity matrix of a sample without jitter keeps its whole levels)."""
    if tables.numel():
        planes = jitter_levels(image.permute(3, 0, 1, 2), tables)
        jittered = planes.permute(1, 2, 3, 0).to(image.dtype)
        return torch.where(jitter[:, None, None, None], jittered, image)
    m = matrices.to(image.dtype)[:, None, None]  # (B, 1, 1, 3 out, 3 in)
    out = image[..., 0:1] * m[..., 0]
    out.addcmul_(image[..., 1:2], m[..., 1]).addcmul_(image[..., 2:3], m[..., 2])
    return out.add_(0.5).floor_().clamp_(0, 255)


def _lookup(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    return table.index_select(0, index.reshape(-1)).reshape(index.shape)


def apply_hsv(image: Image.Image, params: HsvParams) -> Image.Image:
    """Jittered RGB copy of ``image`` by ``params.rule`` (identity parameters return it as is)."""
    if params.is_identity:
        return image
    if params.rule == "authors":
        levels = torch.from_numpy(np.array(image.convert("RGB"))).permute(2, 0, 1)[:, None]
        out = jitter_levels(levels, torch.from_numpy(params.tables())[None])[:, 0].numpy()
        return Image.merge("RGB", [Image.fromarray(plane) for plane in out])
    coeffs = tuple(float(v) for row in params.matrix() for v in (*row, 0.0))
    return image.convert("RGB", coeffs)
