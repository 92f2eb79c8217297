"""CUDA-event timing of one training step, shared by the step benchmarks (run as scripts from
this folder, so ``from step_timing import ...`` resolves beside them)."""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch


def median_step_ms(step: Callable[[], object], steps: int) -> float:
    """Median milliseconds of ``steps`` calls of ``step``, each timed by CUDA events."""
    times = []
    for _ in range(steps):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        step()
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end))
    return statistics.median(times)
