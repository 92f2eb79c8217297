"""Training-step time of a generic conv net: eager vs lucid-capture replay vs torch.compile.

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:):tests/support \
        python3 benchmarks/capture_step.py --out docs/benchmarks/capture-step.md

One step = forward under bf16 autocast + loss + backward + SGD step + zero_grad. Times are the
median of ``--steps`` steps after warm-up, from CUDA events; peak memory is
``max_memory_allocated`` from the arm's setup (recording or compilation included) to its last
step. ``compile`` is
``torch.compile(mode="reduce-overhead")`` on the same network; its compile time is reported too.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from step_timing import median_step_ms

from lucid_capture import NetworkRecorder
from lucid_testing.capture_models import ConvBNNet, loss_of


def make_step(arm: str, batch: int) -> tuple[Callable[[], None], float]:
    torch.manual_seed(0)
    net = ConvBNNet(attention=True, width=32).cuda().to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch, 3, 128, 128, device="cuda").to(memory_format=torch.channels_last)
    forward: Callable[..., Any]
    if arm == "eager":
        forward = net
    elif arm == "capture":
        forward = NetworkRecorder(net)
    else:
        forward = torch.compile(net, mode="reduce-overhead")

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = loss_of(forward(x))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    start = time.perf_counter()
    for _ in range(3):  # recording / compilation happen here
        step()
    torch.cuda.synchronize()
    return step, time.perf_counter() - start


def measure(arm: str, batch: int, steps: int) -> dict[str, float]:
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()  # the peak includes recording / compilation
    step, ready_s = make_step(arm, batch)
    for _ in range(10):
        step()
    torch.cuda.synchronize()
    ms = median_step_ms(step, steps)
    return {
        "ms": ms,
        "peak_mib": torch.cuda.max_memory_allocated() / 2**20,
        "ready_s": ready_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--batches", type=int, nargs="+", default=[8, 128])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--arms", nargs="+", default=["eager", "capture", "compile"])
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    rows = [
        f"Measured {time.strftime('%Y-%m-%d')} on {torch.cuda.get_device_name()}, torch "
        f"{torch.__version__}; ConvBNNet(attention=True, width=32), 128x128 input, bf16 autocast, "
        "channels_last, median of {args.steps} steps.".replace("{args.steps}", str(args.steps)),
        "",
        "| batch | arm | step ms | speed-up vs eager | peak MiB | ready after (s) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for batch in args.batches:
        base = None
        for arm in args.arms:
            try:
                r = measure(arm, batch, args.steps)
            except Exception as error:  # e.g. compile unavailable: say so in the table
                rows.append(f"| {batch} | {arm} | failed: {type(error).__name__} | | | |")
                continue
            base = base or r["ms"]
            rows.append(
                f"| {batch} | {arm} | {r['ms']:.2f} | {base / r['ms']:.2f}x | "
                f"{r['peak_mib']:.0f} | {r['ready_s']:.1f} |"
            )
            print(rows[-1], flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
