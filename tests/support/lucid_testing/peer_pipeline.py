"""Our training pipeline against the authors' (Ultralytics 8.4.190), in distribution.

The two pipelines cannot agree bit for bit (their draws come from Python's `random` and
numpy's global state, ours from per-sample seed sequences), so both are fed the same source
images and each sample's statistics are gathered; `compare` states a distance and a threshold per
statistic. Used by ``benchmarks/peer_pipeline.py`` (thousands of samples) and
``tests/peer/test_pipeline_distribution.py`` (a few hundred).

Sets (written with numpy and Pillow, in the YOLO layout both readers take):

* ``small``: textured scenes of 3 classes, many small objects (sides log-uniform in 4-80 px on
  sources of 480-640 x 360-640), as the held-out third-party set of issue 37;
* ``pattern``: per-pixel binary colour noise saved as PNG, one box each: the high-frequency test
  pattern whose energy after the warp measures the resampling's sharpness;
* ``flat``: one flat saturated orange (180, 110, 60): after HSV the painted pixels' mean is the
  colour jitter alone, so its spread measures all three HSV gains together;
* ``grey``: flat grey 150 (not the pad grey), which hue and saturation leave alone in both
  pipelines: its spread after HSV is the value gain alone.

Our samples are drawn through `TrainDataset` (its partner pools, its augmentation) and painted by
both renderers from the same plans: the CPU renderer (Pillow) and the device renderer on CPU
tensors (`PixelBatch.render`, as the GPU tests compare them). Labels are the same bits either way.
Theirs come from their ``build_yolo_dataset`` with their default hyperparameters, read in a
shuffled order by one process (one loader worker's view; their mosaic buffer is per worker).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from lucid_train.data.augment.config import AugmentConfig
from lucid_train.data.augment.render_cpu import render_cpu
from lucid_train.data.augment.render_device import pack_plans
from lucid_train.data.dataset import MosaicPool, TrainDataset, load_size
from lucid_train.data.formats.layout import read_split

FILL = 114
NAMES = ("box", "disc", "tri")


# --------------------------------------------------------------------------- the source sets


def _write_yaml(root: Path) -> None:
    names = "\n".join(f"  {k}: {n}" for k, n in enumerate(NAMES))
    (root / "data.yaml").write_text(
        f"path: {root}\ntrain: images/train\nval: images/train\nnames:\n{names}\n"
    )


def write_set(root: Path, kind: str, n: int, seed: int = 0) -> Path:
    """Write ``n`` images of set ``kind`` (``small``, ``pattern``, ``flat``, ``grey``) under
    ``root``."""
    rng = np.random.default_rng(seed)
    images, labels = root / "images" / "train", root / "labels" / "train"
    images.mkdir(parents=True)
    labels.mkdir(parents=True)
    for i in range(n):
        w, h = int(rng.integers(480, 641)), int(rng.integers(360, 641))
        rows: list[str] = []
        if kind == "small":
            img = _scene(rng, w, h, rows)
            img.save(images / f"{i:05d}.jpg", quality=90)
        elif kind == "pattern":
            noise = (rng.random((h, w, 3)) < 0.5).astype(np.uint8) * 255
            Image.fromarray(noise).save(images / f"{i:05d}.png")
            rows.append(f"0 0.5 0.5 {0.5:.6f} {0.5:.6f}")
        elif kind in ("flat", "grey"):
            colour = (180, 110, 60) if kind == "flat" else (150, 150, 150)
            Image.new("RGB", (w, h), colour).save(images / f"{i:05d}.png")
            rows.append(f"0 0.5 0.5 {0.5:.6f} {0.5:.6f}")
        else:
            raise ValueError(f"unknown set {kind!r}")
        (labels / f"{i:05d}.txt").write_text("\n".join(rows) + "\n")
    _write_yaml(root)
    return root


def _scene(rng: np.random.Generator, w: int, h: int, rows: list[str]) -> Image.Image:
    """A textured background and 5-20 objects, log-uniform 4-80 px; their boxes into ``rows``."""
    coarse = rng.integers(40, 216, (h // 16 + 1, w // 16 + 1, 3), dtype=np.uint8)
    base = Image.fromarray(coarse).resize((w, h), Image.Resampling.BILINEAR)
    px = np.asarray(base, np.float64) + rng.normal(0, 10, (h, w, 3))
    img = Image.fromarray(np.clip(px, 0, 255).astype(np.uint8))
    draw = ImageDraw.Draw(img)
    for _ in range(int(rng.integers(5, 21))):
        side = float(np.exp(rng.uniform(np.log(4), np.log(80))))
        bw = side * float(rng.uniform(0.6, 1.6))
        bh = side * float(rng.uniform(0.6, 1.6))
        x0, y0 = float(rng.uniform(0, w - bw)), float(rng.uniform(0, h - bh))
        cls = int(rng.integers(0, 3))
        colour = tuple(int(v) for v in rng.integers(0, 256, 3))
        box = (x0, y0, x0 + bw, y0 + bh)
        if cls == 0:
            draw.rectangle(box, fill=colour)
        elif cls == 1:
            draw.ellipse(box, fill=colour)
        else:
            draw.polygon([(x0, y0 + bh), (x0 + bw / 2, y0), (x0 + bw, y0 + bh)], fill=colour)
        cx, cy = (x0 + bw / 2) / w, (y0 + bh / 2) / h
        rows.append(f"{cls} {cx:.6f} {cy:.6f} {bw / w:.6f} {bh / h:.6f}")
    return img


# --------------------------------------------------------------------------- per-sample records


@dataclass
class Samples:
    """What one pipeline produced, sample by sample (pixels reduced to statistics)."""

    counts: list[int] = field(default_factory=list)  # targets per sample
    boxes: list[np.ndarray] = field(default_factory=list)  # (N, 4) xyxy output pixels
    sources_targets: list[int] = field(default_factory=list)  # targets in the sources used
    affine_scale: list[float] = field(default_factory=list)
    letterbox_gain: list[float] = field(default_factory=list)  # the sample's own image
    total_scale: list[float] = field(default_factory=list)  # its source pixels -> output
    centre: list[tuple[float, float]] = field(default_factory=list)  # mosaic, canvas fraction
    sources: list[list[int]] = field(default_factory=list)  # main image and partners
    channel_mean: list[np.ndarray] = field(default_factory=list)  # (3,) per sample
    channel_std: list[np.ndarray] = field(default_factory=list)
    painted_mean: list[np.ndarray] = field(default_factory=list)  # (3,) off the pad grey
    sharpness: list[float] = field(default_factory=list)

    pixels: str = "stats"  # what add_pixels keeps: "stats", "painted" (flat) or "sharpness"

    def add_labels(
        self,
        boxes: np.ndarray,
        sources: list[int],
        sources_targets: int,
        *,
        scale: float,
        gain: float,
        total: float,
        centre: tuple[float, float] | None,
    ) -> None:
        """Record one sample's labels and geometry: its ``(N, 4)`` xyxy output ``boxes``, the
        source images it used (its own first) and their targets, its affine scale, its own
        image's letterbox gain and source -> output scale, and the mosaic centre (None: none)."""
        self.counts.append(len(boxes))
        self.boxes.append(boxes)
        self.sources_targets.append(sources_targets)
        self.affine_scale.append(scale)
        self.letterbox_gain.append(gain)
        self.total_scale.append(total)
        if centre is not None:
            self.centre.append(centre)
        self.sources.append(sources)

    def add_pixels(self, image: np.ndarray) -> None:
        """Reduce one ``(S, S, 3)`` uint8 RGB image to the statistics ``pixels`` names."""
        if self.pixels == "sharpness":
            self.sharpness.append(high_frequency_energy(image))
            return
        x = image.reshape(-1, 3).astype(np.float32)
        if self.pixels == "painted":
            painted = ~(x == FILL).all(-1)
            self.painted_mean.append(x[painted].mean(0) if painted.any() else np.full(3, np.nan))
            return
        mean = x.mean(0)
        self.channel_mean.append(mean)
        self.channel_std.append(np.sqrt(np.maximum((x * x).mean(0) - mean * mean, 0)))


def high_frequency_energy(image: np.ndarray) -> float:
    """Mean squared 4-neighbour Laplacian of the grey level over pixels whose 3 x 3 neighbourhood
    is painted (not the pad grey), or NaN when none is."""
    grey = image.astype(np.float64).mean(-1)
    painted = ~(image == FILL).all(-1)
    inner = painted[1:-1, 1:-1].copy()
    for dy, dx in ((-1, 0), (1, 0), (0, -1), (0, 1), (-1, -1), (-1, 1), (1, -1), (1, 1)):
        inner &= painted[1 + dy : painted.shape[0] - 1 + dy, 1 + dx : painted.shape[1] - 1 + dx]
    lap = grey[:-2, 1:-1] + grey[2:, 1:-1] + grey[1:-1, :-2] + grey[1:-1, 2:] - 4 * grey[1:-1, 1:-1]
    return float((lap[inner] ** 2).mean()) if inner.any() else math.nan


# --------------------------------------------------------------------------- theirs


def theirs(
    root: Path,
    n: int,
    *,
    size: int,
    mosaic: bool,
    seed: int,
    batch: int = 16,
    hsv: bool = True,
    pixels: str = "stats",
) -> Samples:
    """``n`` samples of their training dataset (default hyp; ``mosaic=False``: after their
    ``close_mosaic``), read in shuffled epochs by one process."""
    from ultralytics.cfg import get_cfg
    from ultralytics.data import build_yolo_dataset
    from ultralytics.data.augment import Mosaic, RandomPerspective
    from ultralytics.utils import LOGGER

    LOGGER.setLevel("ERROR")
    overrides: dict[str, Any] = {"imgsz": size, "task": "detect", "workers": 0}
    if not hsv:
        overrides.update(hsv_h=0.0, hsv_s=0.0, hsv_v=0.0)
    cfg = get_cfg(overrides=overrides)
    data = {"names": dict(enumerate(NAMES)), "nc": len(NAMES), "channels": 3}
    ds = build_yolo_dataset(cfg, str(root / "images" / "train"), batch, data, mode="train")
    if not mosaic:
        ds.close_mosaic(hyp=cfg)
    n_src = [len(lb["cls"]) for lb in ds.labels]
    shapes = [tuple(int(v) for v in lb["shape"]) for lb in ds.labels]  # (h, w)
    drawn: dict[str, Any] = {}
    get_indexes, mosaic_params, affine_params = (
        Mosaic.get_indexes,
        Mosaic.get_params,
        RandomPerspective.get_params,
    )

    def rec_indexes(self: Any) -> Any:
        drawn["partners"] = out = get_indexes(self)
        return out

    def rec_mosaic(self: Any, labels: Any) -> Any:
        out = mosaic_params(self, labels)
        tile = out["layout"][0]
        drawn["centre"] = (tile["x2a"] / (2 * size), tile["y2a"] / (2 * size))
        return out

    def rec_affine(self: Any, labels: Any) -> Any:
        out = affine_params(self, labels)
        drawn["scale"] = float(out["scale"])
        return out

    out = Samples(pixels=pixels)
    random.seed(seed)
    np.random.seed(seed)
    order = np.random.default_rng(seed)
    Mosaic.get_indexes, Mosaic.get_params = rec_indexes, rec_mosaic  # type: ignore[method-assign]
    RandomPerspective.get_params = rec_affine  # type: ignore[method-assign]
    try:
        while len(out.counts) < n:
            for i in order.permutation(len(ds)).tolist():
                if len(out.counts) >= n:
                    break
                drawn.clear()
                item = ds[i]
                img = item["img"].numpy().transpose(1, 2, 0)  # RGB after their Format
                xywh = item["bboxes"].numpy().astype(np.float64) * size
                boxes = np.concatenate(
                    [xywh[:, :2] - xywh[:, 2:] / 2, xywh[:, :2] + xywh[:, 2:] / 2], 1
                )
                used = [i, *drawn.get("partners", [])]
                h0, w0 = shapes[i]
                r = size / max(h0, w0)
                gain = min(math.ceil(w0 * r), size) / w0  # their load_image resize
                out.add_labels(
                    boxes,
                    used,
                    sum(n_src[k] for k in used),
                    scale=drawn["scale"],
                    gain=gain,
                    total=gain * drawn["scale"],
                    centre=drawn.get("centre"),
                )
                out.add_pixels(img)
    finally:
        Mosaic.get_indexes, Mosaic.get_params = get_indexes, mosaic_params  # type: ignore[method-assign]
        RandomPerspective.get_params = affine_params  # type: ignore[method-assign]
    return out


# --------------------------------------------------------------------------- ours


def ours(
    root: Path,
    n: int,
    *,
    size: int,
    mosaic: bool,
    seed: int,
    batch: int = 16,
    hsv: bool = True,
    pool: MosaicPool = "buffer",
    cfg: AugmentConfig | None = None,
    renderers: Sequence[str] = ("cpu", "device"),
    pixels: str = "stats",
    load_resize: bool = False,
) -> dict[str, Samples]:
    """``n`` samples of our `TrainDataset` (default `AugmentConfig`, or ``cfg``; without mosaic:
    its close-mosaic settings), painted by each of ``renderers`` from the same plans. The label
    statistics are filled in every returned `Samples` alike; pixels per renderer."""
    import torch

    cfg = cfg or AugmentConfig()
    if not hsv:
        cfg = replace(cfg, hsv_h=0.0, hsv_s=0.0, hsv_v=0.0)
    if not mosaic:
        cfg = cfg.without_mosaic()
    index = read_split(root, "train", task="detect")
    ds = TrainDataset(index.records, index.schema, size, cfg, seed=seed, pool_size=batch,
                      mosaic_pool=pool, load_resize=load_resize)  # fmt: skip
    n_src = [len(r.targets) for r in ds.records]
    out = {name: Samples(pixels=pixels) for name in renderers}
    labels = out[renderers[0]] if renderers else Samples()
    pending: list[Any] = []

    def flush() -> None:
        if "device" in out and pending:
            sources = {k: v for _, images in pending for k, v in images.items()}
            with torch.no_grad():
                painted = pack_plans([p for p, _ in pending], sources, {}).render().numpy()
            for image in painted:
                out["device"].add_pixels(image)
        pending.clear()

    epoch = 0
    while len(labels.counts) < n:
        aug, perm = ds.augment(epoch), ds.permutation(epoch)
        for position in range((len(ds) // batch) * batch or len(ds)):  # drop_last's batches
            if len(labels.counts) >= n:
                break
            i = int(perm[position])
            mosaic_pool, mix_pool = ds.partners(epoch, position)
            params = aug.sample(
                i, np.random.SeedSequence([seed, epoch, position]), mosaic_pool, mix_pool
            )
            plan, targets, images = aug.plan(params)
            g = params.geometry
            used = [i, *(g.mosaic.partners if g.mosaic is not None else ())]
            main = plan.base[0].matrix
            total = math.sqrt(abs(np.linalg.det(main[:2, :2])))
            h0, w0 = ds.records[i].height, ds.records[i].width
            if load_resize:  # the plan's matrices start from the resized source
                total *= load_size(h0, w0, size)[1] / w0
            centre = (g.mosaic.cx, g.mosaic.cy) if g.mosaic is not None else None
            for name, s in out.items():
                s.add_labels(
                    targets.boxes.astype(np.float64),
                    used,
                    sum(n_src[k] for k in used),
                    scale=g.affine.scale,
                    gain=size / max(h0, w0),
                    total=total,
                    centre=centre,
                )
                if name == "cpu":
                    s.add_pixels(np.asarray(render_cpu(plan, images)))  # type: ignore[arg-type]
            if "device" in out:
                pending.append((plan, images))
                if len(pending) == batch:
                    flush()
        epoch += 1
    flush()
    return out


# --------------------------------------------------------------------------- distances


def ks(a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov statistic: the largest gap between the two empirical CDFs."""
    x, y = np.sort(np.asarray(a, np.float64)), np.sort(np.asarray(b, np.float64))
    x, y = x[np.isfinite(x)], y[np.isfinite(y)]
    grid = np.concatenate([x, y])
    cx = np.searchsorted(x, grid, side="right") / len(x)
    cy = np.searchsorted(y, grid, side="right") / len(y)
    return float(np.abs(cx - cy).max())


def rel(a: float, b: float) -> float:
    """``a / b - 1``: ours relative to theirs."""
    return float(a / b - 1.0)


@dataclass(frozen=True)
class Row:
    """One statistic: its values on both sides, the distance, the threshold and the verdict."""

    stat: str
    distance: str
    value: float
    threshold: float
    ours: float | None = None
    theirs: float | None = None

    @property
    def passed(self) -> bool:
        return abs(self.value) <= self.threshold

    def as_dict(self) -> dict[str, Any]:
        def r(v: float | None) -> float | None:
            return None if v is None else round(float(v), 5)

        return {
            "stat": self.stat,
            "distance": self.distance,
            "value": r(self.value),
            "threshold": self.threshold,
            "ours": r(self.ours),
            "theirs": r(self.theirs),
            "pass": self.passed,
        }


@dataclass(frozen=True)
class Thresholds:
    """Thresholds: ``ks_sample`` for per-sample statistics (about the 0.1 % two-sample critical
    value at 2,000 a side), ``ks_box`` for per-box ones (boxes of one image are not independent),
    ``share`` for absolute differences of fractions, ``mean`` / ``spread`` for relative
    differences of means and standard deviations."""

    ks_sample: float = 0.06
    ks_box: float = 0.05
    share: float = 0.02
    mean: float = 0.05
    spread: float = 0.08
    sharpness: float = 0.10
    distinct: float = 0.10


def _boxes(s: Samples) -> np.ndarray:
    return np.concatenate([b for b in s.boxes if len(b)] or [np.zeros((0, 4))])


def _distinct(s: Samples, batch: int) -> float:
    groups = [s.sources[k : k + batch] for k in range(0, len(s.sources) - batch + 1, batch)]
    return float(np.mean([len({i for used in g for i in used}) for g in groups]))


def _clipped(boxes: np.ndarray, size: int) -> float:
    eps = 1e-3
    edge = (boxes[:, :2] <= eps).any(1) | (boxes[:, 2:] >= size - eps).any(1)
    return float(edge.mean()) if len(boxes) else 0.0


def compare_labels(
    o: Samples, t: Samples, size: int, th: Thresholds, *, batch: int = 16
) -> list[Row]:
    """Label and geometry statistics (the same for both our renderers)."""
    rows = [
        Row("targets per image", "KS", ks(o.counts, t.counts), th.ks_sample),
        Row(
            "targets per image",
            "mean, relative",
            rel(np.mean(o.counts), np.mean(t.counts)),
            th.mean,
            np.mean(o.counts),
            np.mean(t.counts),
        ),
    ]
    bo, bt = _boxes(o), _boxes(t)
    wo, ho = bo[:, 2] - bo[:, 0], bo[:, 3] - bo[:, 1]
    wt, ht = bt[:, 2] - bt[:, 0], bt[:, 3] - bt[:, 1]
    for name, a, b in (
        ("box width", wo, wt),
        ("box height", ho, ht),
        ("box aspect (long / short)", np.maximum(wo / ho, ho / wo), np.maximum(wt / ht, ht / wt)),
        ("box area", wo * ho, wt * ht),
    ):
        rows.append(Row(name, "KS", ks(a, b), th.ks_box))
    for side in (32, 16):
        so, st = float((wo * ho < side * side).mean()), float((wt * ht < side * side).mean())
        rows.append(Row(f"share of boxes under {side}²", "difference", so - st, th.share, so, st))
    kept_o = float(np.sum(o.counts) / max(np.sum(o.sources_targets), 1))
    kept_t = float(np.sum(t.counts) / max(np.sum(t.sources_targets), 1))
    rows.append(
        Row(
            "share of source targets kept (1 - dropped)",
            "difference",
            kept_o - kept_t,
            th.share,
            kept_o,
            kept_t,
        )
    )
    co, ct = _clipped(bo, size), _clipped(bt, size)
    rows.append(
        Row("share of boxes clipped at the border", "difference", co - ct, th.share, co, ct)
    )
    rows.append(Row("affine scale", "KS", ks(o.affine_scale, t.affine_scale), th.ks_sample))
    rows.append(
        Row(
            "affine scale",
            "std, relative",
            rel(np.std(o.affine_scale), np.std(t.affine_scale)),
            th.spread,
            np.std(o.affine_scale),
            np.std(t.affine_scale),
        )
    )
    go, gt = np.mean(o.letterbox_gain), np.mean(t.letterbox_gain)
    rows.append(
        Row(
            "letterbox / load gain of the sample's image",
            "mean, relative",
            rel(go, gt),
            0.01,
            go,
            gt,
        )
    )
    rows.append(
        Row(
            "source -> output scale of the sample's image",
            "KS",
            ks(o.total_scale, t.total_scale),
            th.ks_sample,
        )
    )
    if o.centre and t.centre:
        for k, axis in enumerate("xy"):
            a, b = [c[k] for c in o.centre], [c[k] for c in t.centre]
            rows.append(
                Row(f"mosaic centre {axis} (canvas fraction)", "KS", ks(a, b), th.ks_sample)
            )
        do, dt = _distinct(o, batch), _distinct(t, batch)
        rows.append(
            Row(
                f"distinct source images per {batch} samples",
                "mean, relative",
                rel(do, dt),
                th.distinct,
                do,
                dt,
            )
        )
    return rows


def compare_pixels(o: Samples, t: Samples, th: Thresholds, *, sharpness: bool = False) -> list[Row]:
    """Per-channel pixel mean and std (of each sample's image), or the sharpness of the pattern."""
    if sharpness:
        eo, et = float(np.nanmean(o.sharpness)), float(np.nanmean(t.sharpness))
        return [
            Row(
                "high-frequency energy of the pattern after the warp",
                "mean, relative",
                rel(eo, et),
                th.sharpness,
                eo,
                et,
            )
        ]
    rows = []
    mo, mt = np.stack(o.channel_mean), np.stack(t.channel_mean)
    so, st = np.stack(o.channel_std), np.stack(t.channel_std)
    for c, name in enumerate("RGB"):
        rows.append(
            Row(
                f"pixel mean {name}",
                "mean, relative",
                rel(mo[:, c].mean(), mt[:, c].mean()),
                0.02,
                mo[:, c].mean(),
                mt[:, c].mean(),
            )
        )
        rows.append(Row(f"pixel mean {name} per image", "KS", ks(mo[:, c], mt[:, c]), th.ks_sample))
        rows.append(
            Row(
                f"pixel std {name}",
                "mean, relative",
                rel(so[:, c].mean(), st[:, c].mean()),
                th.mean,
                so[:, c].mean(),
                st[:, c].mean(),
            )
        )
    return rows


def compare_hsv(o: Samples, t: Samples, th: Thresholds, colour: str = "flat colour") -> list[Row]:
    """On a flat set: the spread of each sample's painted colour, i.e. of the HSV jitter."""
    rows = []
    po, pt = np.stack(o.painted_mean), np.stack(t.painted_mean)
    for c, name in enumerate("RGB"):
        a, b = po[:, c][np.isfinite(po[:, c])], pt[:, c][np.isfinite(pt[:, c])]
        rows.append(
            Row(
                f"{colour} after HSV, {name} mean",
                "mean, relative",
                rel(a.mean(), b.mean()),
                th.mean,
                a.mean(),
                b.mean(),
            )
        )
        rows.append(
            Row(
                f"{colour} after HSV, {name} spread",
                "std, relative",
                rel(a.std(), b.std()),
                th.spread,
                a.std(),
                b.std(),
            )
        )
    return rows


Comparison = Callable[..., list[Row]]
