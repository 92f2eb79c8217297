"""Training-step time of yolo26n detect in the lucid module: eager vs network + loss replay.

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) \
        python3 benchmarks/yolo_step.py --out docs/benchmarks/yolo-step.md

One step is what ``YOLOModule.training_step`` runs on the GPU — ``forward_network`` and
``compute_loss`` (assignment + dual loss on targets padded to 32 per image) under autocast, then
backward through GradScaler (fp16) or plainly (bf16), an SGD step and ``zero_grad`` — with the
module's own recorders enabled (``capture``) or not (``eager``), or with the network under
``torch.compile(mode="reduce-overhead")`` and the loss under ``torch.compile`` (``compile``;
its compile time falls in the warm-up steps, reported as "ready after"). Input and network are
channels_last; 640x640 images, ~10 boxes per image. Times are medians of ``--steps`` steps
after warm-up, from CUDA events; the data loader is not part of a step (see loader.md).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import torch
from step_timing import median_step_ms

from lucid_train.losses import PaddedTargets
from lucid_train.tasks.task_modules import DetectModule

SIZE = 640
CAPACITY = 32


def _targets(batch: int, g: torch.Generator) -> PaddedTargets:
    counts = torch.randint(4, 16, (batch,), generator=g)
    mask = torch.arange(CAPACITY)[None] < counts[:, None]
    xy = torch.rand(batch, CAPACITY, 2, generator=g) * (SIZE - 96)
    wh = 16 + torch.rand(batch, CAPACITY, 2, generator=g) * 80
    boxes = torch.where(mask[..., None], torch.cat([xy, xy + wh], -1), 0.0)
    labels = torch.where(mask, torch.randint(0, 80, (batch, CAPACITY), generator=g), 0)
    flat = torch.cumsum(mask.flatten().long(), 0).view(batch, CAPACITY) - 1
    return PaddedTargets(
        boxes=boxes,
        labels=labels,
        mask=mask,
        counts=counts,
        instance_index=torch.where(mask, flat, -1),
        difficult=torch.zeros(batch, CAPACITY, dtype=torch.bool),
    )


def measure(arm: str, batch: int, dtype: torch.dtype, steps: int) -> dict[str, float]:
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    module = DetectModule("yolo26n", num_classes=80, img_size=SIZE, loss_capacity=CAPACITY)
    module = module.cuda().to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    for recorder in (module.network_recorder, module.loss_recorder):
        recorder.reset()
        recorder.enabled = arm == "capture"
    module.train()
    optimizer = torch.optim.SGD(module.parameters(), lr=0.001, momentum=0.9)
    scaler = torch.amp.GradScaler("cuda", enabled=dtype == torch.float16)
    images = torch.rand(batch, 3, SIZE, SIZE, generator=g).cuda()
    images = images.contiguous(memory_format=torch.channels_last)
    targets = _targets(batch, g)
    targets = PaddedTargets(**{k: v.cuda() for k, v in vars(targets).items() if v is not None})

    network: Any = module.forward_network
    loss: Any = module.compute_loss
    if arm == "compile":  # the same network and loss under torch.compile, recorders off
        network = torch.compile(module.model, mode="reduce-overhead")
        loss = torch.compile(module._criterion)

    def step() -> None:
        with torch.autocast("cuda", dtype=dtype):
            out = network(images)
            if arm == "compile":
                terms = loss(out, targets, module.o2m_weight, (SIZE, SIZE))
            else:
                terms = loss(out, targets, (SIZE, SIZE))
        scaler.scale(terms.total).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)

    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(8):  # recording happens here
        step()
    torch.cuda.synchronize()
    ready = time.perf_counter() - start
    ms = median_step_ms(step, steps)
    replays = module.network_recorder.stats.replays + module.loss_recorder.stats.replays
    for recorder in (module.network_recorder, module.loss_recorder):
        recorder.reset()
    return {
        "ms": ms,
        "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
        "ready_s": ready,
        "replays": replays,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--batches", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--arms", nargs="+", default=["eager", "capture", "compile"])
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    rows = [
        f"Measured {time.strftime('%Y-%m-%d')} on {torch.cuda.get_device_name()}, torch "
        f"{torch.__version__}; yolo26n detect, {SIZE}x{SIZE}, channels_last, median of "
        f"{args.steps} steps after 8 (recording included in those).",
        "",
        "| batch | precision | arm | step ms | images/s | speed-up vs eager | peak GiB | "
        "replays (net + loss) | ready after (s) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for batch in args.batches:
        for name, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
            base = None
            for arm in args.arms:
                try:
                    r = measure(arm, batch, dtype, args.steps)
                except Exception as error:  # e.g. compile unavailable: say so in the table
                    rows.append(f"| {batch} | {name} | {arm} | failed: {type(error).__name__} |")
                    continue
                base = base or r["ms"]
                rows.append(
                    f"| {batch} | {name} | {arm} | {r['ms']:.1f} | {batch * 1000 / r['ms']:.0f} | "
                    f"{base / r['ms']:.2f}x | {r['peak_gib']:.1f} | {r['replays']:.0f} | "
                    f"{r['ready_s']:.1f} |"
                )
                print(rows[-1], flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
