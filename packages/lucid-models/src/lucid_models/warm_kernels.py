"""Compile a model's Triton kernels ahead of its fit, in a process of their own.

On a machine whose Triton cache is empty, each distinct launch signature of the fused BatchNorm +
SiLU (`lucid_kernels.batch_norm_silu`) is compiled when a training step first asks for it, one
after another inside the first step: 20 compiles for yolo26n, 5.5-7.4 s of a fresh machine's
first epoch (docs/benchmarks/peer-speed.md). Triton keeps what it compiles in its cache folder,
keyed by the signature, so a second process that runs the same launches earlier leaves the fit
nothing to compile. ``lucid_train`` starts this module as that process when a fit begins, beside
its data loading.

    python -m lucid_models.warm_kernels --model yolo26n --task detect --classes 80 \\
        --batch 16 --size 640 --dtype float16

One forward and backward of a freshly built copy of the network (its own weights and statistics,
nothing shared with the fit) at the fit's batch size and a smaller square size that gives every
kernel the same signature: a signature holds whether each row count (batch x height x width of a
feature map) is 1 or divisible by 16, and `warm_size` keeps that at every stride.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

import torch
from torch import Tensor

from lucid_kernels.batch_norm_act import HAVE_TRITON
from lucid_models.build import build_model
from lucid_models.conv import FUSE_BN_SILU
from lucid_models.outputs import ModelOutput, Task

__all__ = ["DTYPES", "training_pass", "warm_kernels", "warm_size"]

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
COARSEST_STRIDE = 32  # the deepest feature map's stride


def warm_size(size: int) -> int:
    """A square input no larger than 128 px whose feature maps' row counts specialise as
    ``size``'s do, at any batch size.

    A map at stride 32 has ``n = size / 32`` pixels a side, ``n² · B`` rows at batch ``B``, and
    each finer stride doubles ``n``. Whether ``n² · B`` is divisible by 16 depends on ``B`` and on
    the power of 2 in ``n`` up to 2² (4² = 16), so ``n`` is replaced by 4, 2 or 3 (odd, and not
    1, whose single row is a signature of its own at batch 1).

    Raises:
        ValueError: ``size`` is not a positive multiple of 32 (the fit's images are).
    """
    if size <= 0 or size % COARSEST_STRIDE:
        raise ValueError(f"expected a positive multiple of {COARSEST_STRIDE}, got {size}")
    n = size // COARSEST_STRIDE
    same = 4 if n % 4 == 0 else 2 if n % 2 == 0 else 3
    return min(size, COARSEST_STRIDE * same)


def warm_kernels(
    name: str,
    *,
    task: Task = "detect",
    num_classes: int = 80,
    num_keypoints: int | None = None,
    batch: int = 16,
    size: int = 640,
    dtype: torch.dtype = torch.float16,
    device: torch.device | str = "cuda",
) -> int:
    """Run one training forward and backward of ``name`` as a fit at ``batch`` x ``size`` would,
    at `warm_size` (``dtype`` below float32 under autocast, as mixed precision runs it), so
    that Triton compiles every kernel signature the fit's steps ask for.

    Returns:
        The number of BatchNorm units run (0 where the fused pair does not apply: no CUDA, no
        Triton, or ``LUCID_FUSE_BN_SILU=0``).
    """
    device = torch.device(device)
    if device.type != "cuda" or not (FUSE_BN_SILU and HAVE_TRITON):
        return 0
    torch.manual_seed(0)
    model = build_model(name, task=task, num_classes=num_classes, num_keypoints=num_keypoints)
    model = model.to(device).to(memory_format=torch.channels_last).train()  # type: ignore[call-overload]
    side = warm_size(size)
    x = torch.randn(batch, 3, side, side, device=device).contiguous(
        memory_format=torch.channels_last
    )
    training_pass(model, x, dtype)
    torch.cuda.synchronize(device)
    return sum(int(m.bn.num_batches_tracked) for m in model.modules() if hasattr(m, "bn"))


def training_pass(model: torch.nn.Module, x: Tensor, dtype: torch.dtype) -> None:
    """One forward of ``model`` (a network or one of its units) on ``x`` under autocast at
    ``dtype`` (none at float32, as mixed precision runs it), and the backward of every output
    summed: each unit's kernels, both ways, with the layouts a fit's step gives them."""
    with torch.autocast(x.device.type, dtype=dtype, enabled=dtype != torch.float32):
        leaves = [t for t in _tensors(model(x)) if t.requires_grad]
        loss = torch.stack([t.float().sum() for t in leaves]).sum()
    loss.backward()  # type: ignore[no-untyped-call]


def _tensors(out: ModelOutput | Tensor) -> list[Tensor]:
    """Every tensor of a `ModelOutput` (its branches' included), or the one a unit returns."""
    if isinstance(out, Tensor):
        return [out]
    found: list[Tensor] = []
    for value in (getattr(out, f.name) for f in dataclasses.fields(out)):
        if isinstance(value, Tensor):
            found.append(value)
        elif dataclasses.is_dataclass(value):
            found += [v for v in vars(value).values() if isinstance(v, Tensor)]
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="yolo26n ... yolo26x")
    parser.add_argument("--task", default="detect", choices=("detect", "segment", "pose", "obb"))
    parser.add_argument("--classes", type=int, default=80)
    parser.add_argument("--keypoints", type=int, default=None)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--size", type=int, default=640)
    parser.add_argument("--dtype", default="float16", choices=sorted(DTYPES))
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    units = warm_kernels(
        args.model,
        task=args.task,
        num_classes=args.classes,
        num_keypoints=args.keypoints,
        batch=args.batch,
        size=args.size,
        dtype=DTYPES[args.dtype],
        device=args.device,
    )
    cache = os.environ.get("TRITON_CACHE_DIR", "Triton's default cache")
    print(
        f"lucid warm kernels: {args.model} {args.task} batch {args.batch} at "
        f"{warm_size(args.size)} px for {args.size}, {args.dtype}: {units} BatchNorm units run "
        f"in {time.perf_counter() - start:.1f} s ({cache})",
        flush=True,
    )


if __name__ == "__main__":
    main()
