"""How many Triton compiles the fused BatchNorm + SiLU asks for in one training step of a model.

On a fresh machine each distinct launch signature of a Triton kernel is compiled once, serially,
inside the first step (the first epoch of a fit pays for all of them). A signature is the kernel's
constexpr values, its tensors' dtypes and 16-byte alignment, and, for each integer argument that
the kernel does not exempt (``do_not_specialize``), whether it equals 1 or is divisible by 16.

This runs a model's forward and backward on the CPU at a training batch, with the kernels' host
code as it is and the kernels themselves replaced by a recorder of their launch arguments, and
counts the distinct signatures per kernel by the rule above, read from each kernel's own
parameters. No GPU is needed; no kernel runs (the values are garbage, the shapes are real).

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) python3 benchmarks/kernel_signatures.py \
        --models yolo26n,yolo26s --sizes 320,640 --batches 16,64
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from lucid_capture.tree import flatten
from lucid_kernels import batch_norm_act
from lucid_models import build_model
from lucid_models import conv as conv_module

KERNELS = (
    "_stat_partials", "_stat_finish", "_apply_silu", "_grad_partials", "_grad_finish",
    "_grad_apply",
)  # fmt: skip


def _value_key(value: Any, exempt: bool) -> str:
    """One argument's part of a signature, as Triton specialises it."""
    if isinstance(value, torch.Tensor):
        return f"{value.dtype}:{'a16' if value.data_ptr() % 16 == 0 else 'a'}"
    if isinstance(value, bool) or not isinstance(value, int):
        return type(value).__name__
    width = "i64" if not -(2**31) <= value < 2**31 else "i32"
    if exempt:
        return width
    return f"{width}:{'1' if value == 1 else 'd16' if value % 16 == 0 else '-'}"


class _Recorder:
    """Stands in for a `triton.JITFunction`: ``kernel[grid](*args, **kw)`` records a signature."""

    def __init__(self, kernel: Any, seen: set[tuple[str, ...]]) -> None:
        self.params = [
            (p.name, bool(p.do_not_specialize), bool(p.is_constexpr)) for p in kernel.params
        ]
        self.seen = seen

    def __getitem__(self, grid: Any) -> Any:
        def launch(*args: Any, **kwargs: Any) -> None:
            values = dict(zip([name for name, _, _ in self.params], args, strict=False)) | kwargs
            key = []
            for name, exempt, constexpr in self.params:
                value = values[name]
                key.append(f"{name}={value}" if constexpr else _value_key(value, exempt))
            key += [f"{k}={v}" for k, v in sorted(kwargs.items()) if k.startswith("num_")]
            self.seen.add(tuple(key))

        return launch


@contextmanager
def _recording() -> Iterator[dict[str, set[tuple[str, ...]]]]:
    """The fused pair's kernels recorded, and the fused path taken on the CPU."""
    seen: dict[str, set[tuple[str, ...]]] = defaultdict(set)
    saved = {name: getattr(batch_norm_act, name) for name in KERNELS}
    applies = conv_module.batch_norm_silu_applies
    try:
        for name in KERNELS:
            setattr(batch_norm_act, name, _Recorder(saved[name], seen[name]))
        conv_module.batch_norm_silu_applies = lambda x, *p: (  # type: ignore[assignment]
            x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last)
        )
        batch_norm_act._layout.cache_clear()
        yield seen
    finally:
        for name, kernel in saved.items():
            setattr(batch_norm_act, name, kernel)
        conv_module.batch_norm_silu_applies = applies


def signatures(model: torch.nn.Module, x: torch.Tensor) -> dict[str, set[tuple[str, ...]]]:
    """The fused pair's launch signatures, per kernel, of one forward + backward of ``model``
    (in training mode, under fp16 autocast) on ``x``."""
    with _recording() as seen, torch.autocast("cpu", dtype=torch.float16):
        out = model(x)
        leaves = [t for t in flatten(out)[0] if t.requires_grad]
        torch.stack([t.float().sum() for t in leaves]).sum().backward()
    return {name: set(seen[name]) for name in KERNELS}


def count(model_name: str, task: str, size: int, batch: int) -> dict[str, Any]:
    """Distinct launch signatures per kernel of one training step of a built model."""
    torch.manual_seed(0)
    model = build_model(model_name, task=task).to(memory_format=torch.channels_last).train()
    x = torch.randn(batch, 3, size, size).contiguous(memory_format=torch.channels_last)
    per_kernel = {name: len(keys) for name, keys in signatures(model, x).items()}
    return {
        "model": model_name, "task": task, "size": size, "batch": batch,
        "compiles": sum(per_kernel.values()), "per_kernel": per_kernel,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="yolo26n")
    parser.add_argument("--task", default="detect")
    parser.add_argument("--sizes", default="320")
    parser.add_argument("--batches", default="16")
    args = parser.parse_args(argv)
    for model_name in args.models.split(","):
        for size in map(int, args.sizes.split(",")):
            for batch in map(int, args.batches.split(",")):
                print(json.dumps(count(model_name, args.task, size, batch)), flush=True)


if __name__ == "__main__":
    main()
