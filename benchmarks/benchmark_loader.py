"""Loader benchmark: training images per second at 640 with the full augmentation.

Not a test. It generates a COCO-layout set of JPEG photos-like images (default 640x480, noise
plus shapes, about COCO's size and entropy) in a temporary folder, then measures:

* ``per_worker``: one process rendering samples through `TrainDataset` + `collate` (decode,
  mosaic + fused affine, mixup, copy-paste, HSV, flip, packing), i.e. images/s of one worker;
* ``loader``: the real `LucidDataModule` train DataLoader with ``--workers`` processes, batch
  ``--batch``, pinned memory when CUDA is present, after warm-up batches; with ``--epochs N``,
  whole epochs 1 .. N-1 after a first, the window `peer_speed.py` times a fit over;
* ``val_loader_img_s`` (with ``--val-passes N``): the val split's loader (decode and letterbox,
  the same images) over passes 1 .. N-1.

With ``--render device`` a worker only plans and packs (decode with ``--decode cpu``, label
work, masks), and ``loader`` includes painting each batch on the GPU (and nvJPEG decode with
``--decode device``), as a training step receives it. The defaults are a fit's: ``--render
auto`` takes what ``lucid fit --data.render auto`` would for ``--variant`` on this machine's
first GPU (`lucid_train.data.render_choice`), and the mosaic partner pool is the data module's
default (the authors' buffer since 2026-12-04); the load-time resize is the data module's
default too, and so are mixup and copy-paste (the authors' `default.yaml`).

Run (no dependencies beyond torch, numpy, pillow, lightning, pycocotools)::

    PYTHONPATH=packages/lucid-kernels/src:packages/lucid-train/src \\
        python3 benchmarks/benchmark_loader.py --out loader.json
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageDraw

from lucid_train.data.augment.config import AugmentConfig
from lucid_train.data.datamodule import LucidDataModule
from lucid_train.data.dataset import MOSAIC_POOLS
from lucid_train.data.render_choice import auto_render
from lucid_train.data.transport import collate


def _write_set(root: Path, n: int, width: int, height: int, seed: int) -> float:
    """A COCO-layout segment set of noisy JPEGs; returns the mean file size in KB."""
    rng = np.random.default_rng(seed)
    img_dir = root / "images" / "train"
    img_dir.mkdir(parents=True)
    images: list[dict[str, Any]] = []
    anns: list[dict[str, Any]] = []
    for i in range(n):
        base = rng.integers(0, 255, (height // 8, width // 8, 3), dtype=np.uint8)
        img = Image.fromarray(base).resize((width, height), Image.Resampling.BILINEAR)
        noise = rng.normal(0, 12, (height, width, 3))
        img = Image.fromarray(np.clip(np.asarray(img) + noise, 0, 255).astype(np.uint8))
        draw = ImageDraw.Draw(img)
        for _ in range(8):
            cx, cy = rng.uniform(40, width - 40), rng.uniform(40, height - 40)
            r = rng.uniform(10, 60)
            a = rng.uniform(0, 2 * np.pi) + np.arange(12) * np.pi / 6
            ring = np.stack([cx + r * np.cos(a), cy + r * np.sin(a)], -1)
            colour = tuple(int(v) for v in rng.integers(0, 255, 3))
            draw.polygon([(float(x), float(y)) for x, y in ring], fill=colour)
            lo, hi = ring.min(0), ring.max(0)
            anns.append({
                "id": len(anns) + 1, "image_id": i + 1, "category_id": 1, "iscrowd": 0,
                "bbox": [float(lo[0]), float(lo[1]), float(hi[0] - lo[0]), float(hi[1] - lo[1])],
                "area": float(np.pi * r * r), "segmentation": [ring.reshape(-1).tolist()],
            })  # fmt: skip
        img.save(img_dir / f"{i:06d}.jpg", quality=90)
        images.append({"id": i + 1, "file_name": f"{i:06d}.jpg", "width": width, "height": height})
    doc = {"images": images, "annotations": anns, "categories": [{"id": 1, "name": "blob"}]}
    (root / "annotations").mkdir()
    for split in ("train", "val"):
        (root / "annotations" / f"{split}.json").write_text(json.dumps(doc))
    (root / "images" / "val").symlink_to(img_dir)
    return float(np.mean([p.stat().st_size for p in img_dir.iterdir()]) / 1024)


def measure(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    augment = AugmentConfig(mixup=args.mixup, copy_paste=args.copy_paste)
    dm = LucidDataModule(
        args.task, root, img_size=args.size, batch_size=args.batch, num_workers=args.workers,
        augment=augment, persistent_workers=True, render=args.render, decode=args.decode,
        mosaic_pool=args.mosaic_pool,
    )  # fmt: skip
    dm.setup("fit")
    torch.set_num_threads(1)
    ds = dm.train_dataset()
    for p in range(args.batch):  # warm the decode cache like a worker's first batch
        ds[(0, p)]
    t0 = time.perf_counter()
    done = 0
    while done < args.per_worker_images:
        collate([ds[(1, (done + j) % len(ds))] for j in range(args.batch)])
        done += args.batch
    per_worker = done / (time.perf_counter() - t0)
    cache = {"hits": ds.cache.hits, "misses": ds.cache.misses}

    loader = dm.train_dataloader()
    if args.epochs:
        loader_rate = _epochs_rate(dm, loader, args.epochs)
    else:
        loader_rate = _batches_rate(dm, loader, args.warmup, args.batches)
    out: dict[str, Any] = {
        "per_worker_img_s": round(per_worker, 1),
        "loader_img_s": round(loader_rate, 1),
        "decode_cache": cache,
    }
    if args.val_passes:  # the val split's loader (decode and letterbox), passes after the first
        out["val_loader_img_s"] = round(_epochs_rate(dm, dm.val_dataloader(), args.val_passes), 1)
    return out


def _take(dm: LucidDataModule, batch: Any) -> int:
    """One batch as a training step receives it: on the GPU, painted there when rendering is."""
    if torch.cuda.is_available():
        batch = batch.to("cuda")
    batch = dm.on_after_batch_transfer(batch, 0)  # device rendering paints here
    return len(batch)


def _batches_rate(dm: LucidDataModule, loader: Any, warmup: int, batches: int) -> float:
    """Images/s over ``batches`` after ``warmup``, restarting the loader at an epoch's end."""
    it = iter(loader)
    for _ in range(warmup):
        next(it)
    t0, seen = time.perf_counter(), 0
    for _ in range(batches):
        try:
            batch = next(it)
        except StopIteration:
            it = iter(loader)
            batch = next(it)
        seen += _take(dm, batch)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return seen / (time.perf_counter() - t0)


def _epochs_rate(dm: LucidDataModule, loader: Any, epochs: int) -> float:
    """Images/s over whole epochs 1 .. ``epochs`` - 1, as `peer_speed.py` times a fit: epoch 0
    starts the workers and the device's kernels, and each later epoch sets the sampler's epoch
    and restarts the iterator as Lightning does, so the fit's loader (`EpochLoader`) hands over
    the batches its workers prepared ahead. Without the set epoch it restarted its workers
    every epoch: 170 img/s for the detect s row of 2026-12-06, whose fit took 932."""
    sampler = getattr(loader, "sampler", None)
    seen, elapsed = 0, 0.0
    for epoch in range(epochs):
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(epoch)
        t0 = time.perf_counter()
        n = sum(_take(dm, batch) for batch in loader)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        if epoch:
            seen, elapsed = seen + n, elapsed + time.perf_counter() - t0
    return seen / elapsed


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The options, ``--render auto`` resolved as a fit resolves it (its reason in
    ``render_why``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON file for the results")
    parser.add_argument("--task", default="segment", choices=["detect", "segment", "pose", "obb"])
    parser.add_argument("--size", type=int, default=640)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    parser.add_argument("--images", type=int, default=256, help="images in the generated set")
    parser.add_argument("--per-worker-images", type=int, default=128)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--batches", type=int, default=16)
    parser.add_argument("--val-passes", type=int, default=0,
                        help="also time the val loader over passes 1 .. N-1 (0: not)")  # fmt: skip
    parser.add_argument(
        "--epochs",
        type=int,
        default=0,
        help="time whole epochs 1 .. N-1 as a fit's speed is timed (N >= 2; default 0: "
        "--warmup then --batches batches)",
    )
    parser.add_argument("--mixup", type=float, default=AugmentConfig().mixup)
    parser.add_argument("--copy-paste", type=float, default=AugmentConfig().copy_paste)
    where = "device" if torch.cuda.is_available() else "cpu"
    parser.add_argument("--render", default="auto", choices=["auto", "cpu", "device"])
    parser.add_argument("--variant", default="n", help="the model scale --render auto is for")
    parser.add_argument("--decode", default=where, choices=["cpu", "device"])
    pool = inspect.signature(LucidDataModule).parameters["mosaic_pool"].default
    parser.add_argument("--mosaic-pool", default=pool, choices=list(MOSAIC_POOLS))
    parser.add_argument(
        "--source", type=Path, default=None, help="an existing COCO-layout set instead"
    )
    args = parser.parse_args(argv)
    if args.epochs == 1 or args.epochs < 0:
        parser.error("--epochs: 0, or at least 2 (epoch 0 is not timed)")
    if args.val_passes == 1 or args.val_passes < 0:
        parser.error("--val-passes: 0, or at least 2 (pass 0 is not timed)")
    args.render_why = None
    if args.render == "auto":
        card = torch.cuda.get_device_name() if torch.cuda.is_available() else None
        args.render, args.render_why = auto_render(args.task, args.variant, args.workers, card=card)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.source or Path(tmp)
        mean_kb = None if args.source else _write_set(root, args.images, 640, 480, seed=0)
        result = measure(root, args)
    result.update(
        task=args.task, size=args.size, batch=args.batch, workers=args.workers, cpus=os.cpu_count(),
        mixup=args.mixup, copy_paste=args.copy_paste, render=args.render, decode=args.decode,
        render_why=args.render_why, variant=args.variant,
        mosaic_pool=args.mosaic_pool, epochs=args.epochs, val_passes=args.val_passes,
        mean_jpeg_kb=mean_kb, torch=torch.__version__,
        python=platform.python_version(), cuda=torch.cuda.is_available(),
    )  # fmt: skip
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
