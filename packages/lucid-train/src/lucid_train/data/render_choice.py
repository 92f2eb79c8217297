"""Where ``--data.render auto`` paints a CUDA fit's training samples: the rule and its figures.

Painted on the GPU, a batch takes device time from the step; painted in the loader workers it
takes none, but then the workers must keep up with the step. Measured (H100, detect, 640 px,
batch 64, 14 workers; ``docs/benchmarks/peer-speed.md``, "Where augmentation runs"):

- yolo26m: device render 478.6 images/s, CPU render 499.6 and 498.7 (two machines): the fit
  with the CPU render runs at its workers' rate, about 36 images/s a worker, 4 % ahead;
- the replayed step alone (no loader, ``step-profile.md``) runs 1,190 images/s at n and 491 at
  m; the fits with the device render 817 at s and 376 at l.

So ``auto`` takes the CPU where the workers' rate covers the step's own rate at the model's
scale, and the device elsewhere: at n and s that would take 33 and 23 workers. Both rates scale
with the pixels a batch holds, so the rule does not depend on the image size. Segment, pose and
OBB, whose CPU render carries masks or keypoints, and x keep the device: not measured. The
rates are the H100's; another card keeps the device until its own are measured. They predate the
fused BatchNorm + SiLU (assumptions M17), which made the s and m steps about 8 % faster (m: 116
ms a step, 550 images/s; a CPU-painted m fit then ran 556 images/s, so 14 workers still kept up).
"""

from __future__ import annotations

import os
from typing import Literal

__all__ = ["CPU_RENDER_IMG_S_PER_WORKER", "STEP_IMG_S", "auto_render", "usable_cpus"]

CPU_RENDER_IMG_S_PER_WORKER = 36.0
"""Images a second one loader worker paints at 640 px (499.6 / 14 in the m fit, 510 / 14 for
the loader alone in ``loader.md``)."""

STEP_IMG_S = {"H100": {"n": 1190.0, "s": 817.0, "m": 491.0, "l": 376.0}}
"""Images a second of a detect fit's replayed step at batch 64, by card (a name the device's
contains) and scale (n, m: the step alone; s, l: the fit with the device render, a floor of
the step's rate). A card not listed keeps the device: a faster step than the H100's may outrun
the workers."""


def usable_cpus() -> int:
    """The cores this process may run on (its affinity where the platform says)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else (os.cpu_count() or 1)


def auto_render(
    task: str, variant: str | None, workers: int, *, card: str | None
) -> tuple[Literal["cpu", "device"], str]:
    """``(render, why)`` for ``--data.render auto`` on the CUDA device named ``card`` (None: no
    CUDA device); ``why`` says it in the fit's log."""
    if card is None:
        return "cpu", "no CUDA device"
    rates = next((r for name, r in STEP_IMG_S.items() if name in card), None)
    if rates is None:
        return "device", f"no step rates measured on the {card}"
    step = rates.get(variant or "") if task == "detect" else None
    if step is None:
        model = f"yolo26{variant}" if variant else "a model of unknown scale"
        return "device", f"the CPU render is not measured against {task} at {model}"
    busy = min(workers, usable_cpus())
    rate = busy * CPU_RENDER_IMG_S_PER_WORKER
    if rate >= step:
        return "cpu", (
            f"{busy} workers paint about {rate:.0f} images/s, a yolo26{variant} step takes "
            f"{step:.0f}: the GPU keeps its time for the step"
        )
    return "device", (
        f"{busy} workers paint about {rate:.0f} images/s, under a yolo26{variant} step's {step:.0f}"
    )
