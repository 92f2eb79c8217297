"""Parameter and FLOP counts of every task and scale, and the golden file that pins them.

Convention:
    * ``params``: every parameter of the trained model (both branches, the semantic aux head,
      the pose sigma stems). The pose RLE flow is not here: it lives in the loss.
    * ``deploy_params``: parameters of :meth:`YOLO26.deploy`, BatchNorm unfolded.
    * ``deploy_params_fused``: the same once each BatchNorm is folded into its (bias-free)
      convolution, i.e. ``deploy_params - sum(bn.num_features)``; what an exported, fused graph
      holds.
    * ``flops`` / ``deploy_flops``: ``torch.utils.flop_counter.FlopCounterMode`` totals for one
      3x640x640 image (2 FLOPs per multiply-add; convolutions, matmuls and the attention
      products, no BatchNorm, activation or pooling), the trained model in training mode, the
      deploy view in eval mode. Models are built on the meta device and given uninitialised
      host storage; the counted forward runs on fake tensors, so nothing is computed.

Command (reproduces ``goldens/models/counts.json``)::

    python -m lucid_models.counts --write goldens/models/counts.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils.flop_counter import FlopCounterMode

from lucid_models.build import build_model
from lucid_models.outputs import Task

__all__ = [
    "COMMAND",
    "SCALE_NAMES",
    "TASKS",
    "all_counts",
    "count_flops",
    "count_parameters",
    "fused_parameter_count",
    "model_counts",
]

TASKS: tuple[Task, ...] = ("detect", "segment", "pose", "obb")
SCALE_NAMES = ("yolo26n", "yolo26s", "yolo26m", "yolo26l", "yolo26x")
NUM_CLASSES = 80
NUM_KEYPOINTS = 17
IMAGE_SIZE = 640
COMMAND = "python -m lucid_models.counts --write goldens/models/counts.json"


def count_parameters(module: nn.Module) -> int:
    """Number of parameter elements (shared parameters counted once)."""
    return sum(p.numel() for p in module.parameters())


def fused_parameter_count(module: nn.Module) -> int:
    """Parameters once every BatchNorm is folded into the bias-free convolution before it."""
    bn = sum(m.num_features for m in module.modules() if isinstance(m, nn.BatchNorm2d))
    return count_parameters(module) - bn


def count_flops(module: nn.Module, image_size: int = IMAGE_SIZE, *, training: bool) -> int:
    """FLOPs (2 x multiply-adds) of one forward of a ``(1, 3, s, s)`` image.

    The forward runs on fake tensors (shapes only), so counting a large model is instant.
    """
    device = next(module.parameters()).device
    module.train(training)
    # Fake tensors rather than meta: the attention island asks autocast about the device type,
    # which meta does not answer.
    with (
        FakeTensorMode(allow_non_fake_inputs=True),
        FlopCounterMode(display=False) as counter,
        torch.no_grad(),
    ):
        module(torch.zeros(1, 3, image_size, image_size, device=device))
    return int(counter.get_total_flops())


def model_counts(name: str, task: Task, image_size: int = IMAGE_SIZE) -> dict[str, int]:
    """Counts of one model at ``num_classes=80`` (and ``K=17`` for pose), built on meta."""
    with torch.device("meta"):
        model = build_model(
            name,
            task=task,
            num_classes=NUM_CLASSES,
            num_keypoints=NUM_KEYPOINTS if task == "pose" else None,
        )
    model.to_empty(device="cpu")  # storage without initialisation: counts need shapes only
    deploy = model.deploy()
    return {
        "params": count_parameters(model),
        "flops": count_flops(model, image_size, training=True),
        "deploy_params": count_parameters(deploy),
        "deploy_params_fused": fused_parameter_count(deploy),
        "deploy_flops": count_flops(deploy, image_size, training=False),
    }


def all_counts(
    names: Sequence[str] = SCALE_NAMES, tasks: Sequence[Task] = TASKS
) -> dict[str, dict[str, int]]:
    """``{"yolo26n-detect": {...}, ...}`` for every name and task."""
    return {f"{name}-{task}": model_counts(name, task) for task in tasks for name in names}


def golden_document(counts: dict[str, dict[str, int]]) -> dict[str, Any]:
    """The golden file's content: the counts plus how they were made."""
    return {
        "command": COMMAND,
        "convention": (
            "params: trained model, both branches and training-only heads (pose RLE flow "
            "excluded: it lives in the loss); deploy_params: deploy view, BatchNorm unfolded; "
            "deploy_params_fused: BatchNorm folded into convs; flops: "
            "torch.utils.flop_counter.FlopCounterMode total (2 x multiply-adds) for one "
            "1x3x640x640 image, trained model in train mode, deploy view in eval mode"
        ),
        "image_size": [IMAGE_SIZE, IMAGE_SIZE],
        "num_classes": NUM_CLASSES,
        "num_keypoints": NUM_KEYPOINTS,
        "torch": torch.__version__,
        "models": counts,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Print the counts, or ``--write`` / ``--check`` a golden file."""
    parser = argparse.ArgumentParser(prog="python -m lucid_models.counts", description=__doc__)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", type=Path, help="write the golden JSON here")
    group.add_argument("--check", type=Path, help="compare with this golden JSON")
    args = parser.parse_args(argv)
    counts = all_counts()
    if args.write:
        args.write.parent.mkdir(parents=True, exist_ok=True)
        args.write.write_text(json.dumps(golden_document(counts), indent=2) + "\n")
        return 0
    if args.check:
        golden = json.loads(args.check.read_text())["models"]
        bad = {k: (golden.get(k), v) for k, v in counts.items() if golden.get(k) != v}
        for key, (want, got) in bad.items():
            print(f"{key}: golden {want}, now {got}", file=sys.stderr)
        return 1 if bad else 0
    for key, row in counts.items():
        print(key, row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
