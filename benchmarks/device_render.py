"""Device rendering's parts at batch 64, 640 px, on the GPU machine (not a test).

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) python3 benchmarks/device_render.py --out OUT

For ``--decode cpu`` and ``device``: the GPU time of `Batch.render` for one batch (CUDA events,
mean of 5) and its host time, a profiler table of one render (``OUT/prof-<decode>.txt``), and a
loop of 20 batches as a training step receives them (``next`` on the real DataLoader with 14
workers, ``.to("cuda")``, ``.render()``), with the time spent waiting on the workers. The set:
512 generated 640x480 JPEGs (`benchmark_loader`), detect, default augmentation.
Writes ``OUT/device-render.json``.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch
from benchmark_loader import _write_set

from lucid_train.data import LucidDataModule
from lucid_train.data.augment import AugmentConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--workers", type=int, default=14)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp())
    _write_set(root, 512, 640, 480, seed=0)
    res: dict[str, float] = {}
    for decode in ("cpu", "device"):
        dm = LucidDataModule("detect", root, img_size=640, batch_size=args.batch,
                             num_workers=args.workers, augment=AugmentConfig(), render="device",
                             decode=decode)  # fmt: skip
        dm.setup("fit")
        loader = dm.train_dataloader()
        it = iter(loader)
        batch = next(it).to("cuda")
        for _ in range(2):
            batch.render()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        start.record()
        for _ in range(5):
            batch.render()
        end.record()
        host = (time.perf_counter() - t0) / 5
        torch.cuda.synchronize()
        res[f"{decode}/render_gpu_ms"] = start.elapsed_time(end) / 5
        res[f"{decode}/render_host_ms"] = host * 1e3
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            batch.render()
            torch.cuda.synchronize()
        table = prof.key_averages().table(sort_by="cuda_time_total", row_limit=25)
        (args.out / f"prof-{decode}.txt").write_text(table)
        wait, seen = 0.0, 0
        t0 = time.perf_counter()
        for _ in range(20):
            a = time.perf_counter()
            try:
                x = next(it)
            except StopIteration:
                it = iter(loader)
                x = next(it)
            wait += time.perf_counter() - a
            seen += len(x.to("cuda").render())
        torch.cuda.synchronize()
        res[f"{decode}/loop_img_s"] = seen / (time.perf_counter() - t0)
        res[f"{decode}/wait_ms"] = wait / 20 * 1e3
        print(json.dumps(res, indent=1), flush=True)
    (args.out / "device-render.json").write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
