"""Training BatchNorm + SiLU fused (`lucid_kernels.batch_norm_silu`, which a training
`ConvBNAct` takes on CUDA) against torch's two operations, at every convolution of a model
(issue 34: cuDNN's NHWC BatchNorm and the SiLU were about a third of a yolo26s/m step's device
time at batch 64, 640 px; `docs/benchmarks/step-profile.md`).

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) python3 benchmarks/batch_norm_act.py --out OUT \
        [--variants "PARTIAL_TILE=4096,PARTIAL_WARPS=4;PROGRAMS=1024"]

Per scale, the script records the shape reaching each unit's BatchNorm in one fp16 channels-last
forward, then times forward + backward of both forms at each distinct shape, weighted by how many
units see it, and checks the largest differences. Device time is read from a CUDA graph of
``--reps`` calls replayed between two events (what a replayed step pays; events around single
eager calls read the host's issue time at small shapes); beside it are the issue time of
back-to-back eager calls (what an eager step pays) and the fused forward's device time alone.
Each ``--variants`` entry sets the kernels' launch constants (`lucid_kernels.batch_norm_act`'s
module constants) for a run of the fused form of its own, so one call compares launch shapes.
It writes ``OUT/batch-norm-act.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from step_timing import median_step_ms

from lucid_kernels import batch_norm_act, batch_norm_silu
from lucid_models import build_model, conv


def unit_shapes(scale: str, batch: int, size: int) -> Counter[tuple[int, ...]]:
    """How many SiLU units of ``yolo26{scale}`` see each BatchNorm input shape."""
    model = build_model(f"yolo26{scale}", num_classes=3).cuda()
    model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    shapes: Counter[tuple[int, ...]] = Counter()

    def record(unit: torch.nn.Module, _: object, out: torch.Tensor) -> None:
        shapes[tuple(out.shape)] += 1

    for m in model.modules():
        if isinstance(m, conv.ConvBNAct) and isinstance(m.act, torch.nn.SiLU):
            m.conv.register_forward_hook(record)
    x = torch.randn(batch, 3, size, size, device="cuda")
    x = x.contiguous(memory_format=torch.channels_last)
    with torch.no_grad(), torch.autocast("cuda", torch.float16):
        model.train()(x)
    return shapes


def graph_ms(fn: Callable[[], object], reps: int) -> float:
    """Device milliseconds of one call of ``fn``: ``reps`` calls recorded in a CUDA graph, the
    graph replayed between two events (`median_step_ms` of five replays)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # warm up off the capture: autograd's buffers and Triton's compiles
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            fn()
    graph.replay()
    return median_step_ms(graph.replay, 5) / reps


def time_pair(shape: tuple[int, ...], reps: int, with_torch: bool = True) -> dict[str, float]:
    """Forward + backward device milliseconds of torch's pair and the fused one, their issue
    time back to back, and their largest differences."""
    c = shape[1]
    x = torch.randn(shape, device="cuda").half().contiguous(memory_format=torch.channels_last)
    x.requires_grad_()
    w = (torch.rand(c, device="cuda") + 0.5).requires_grad_()
    b = torch.randn(c, device="cuda").requires_grad_()
    rm, rv = torch.zeros(c, device="cuda"), torch.ones(c, device="cuda")
    dz = torch.randn(shape, device="cuda").half().contiguous(memory_format=torch.channels_last)

    def torch_pair() -> torch.Tensor:
        z = F.silu(F.batch_norm(x, rm, rv, w, b, True, 0.03, 1e-3))
        z.backward(dz)
        return z

    def fused() -> torch.Tensor:
        z = batch_norm_silu(x, w, b, rm, rv, 0.03, 1e-3)
        z.backward(dz)
        return z

    def fused_forward() -> torch.Tensor:
        with torch.no_grad():
            return batch_norm_silu(x, w, b, rm, rv, 0.03, 1e-3)

    out: dict[str, float] = {}
    for name, fn in (("torch_ms", torch_pair), ("fused_ms", fused)):
        if name == "torch_ms" and not with_torch:
            continue
        out[name] = graph_ms(fn, reps)
        torch.cuda.synchronize()
        begin = time.perf_counter()  # back to back, as an eager step issues them
        for _ in range(reps * 10):
            fn()
        torch.cuda.synchronize()
        out[name.replace("_ms", "_issue_us")] = (time.perf_counter() - begin) / (reps * 10) * 1e6
    out["fused_forward_ms"] = graph_ms(fused_forward, reps)
    x.grad = None
    ref, ref_grad = torch_pair().float(), x.grad.float()  # type: ignore[union-attr]
    x.grad = None
    got, got_grad = fused().float(), x.grad.float()  # type: ignore[union-attr]
    out["max_rel_z"] = float((got - ref).abs().max() / ref.abs().max())
    out["max_rel_grad_x"] = float((got_grad - ref_grad).abs().max() / ref_grad.abs().max())
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--scales", default="n,s,m")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, default=640)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument(
        "--variants",
        default="",
        help="';'-separated launch constants for extra runs of the fused form, "
        "e.g. 'PARTIAL_TILE=4096,PARTIAL_WARPS=4;PROGRAMS=1024'",
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    defaults = {
        n: getattr(batch_norm_act, n) for n in LAUNCH_CONSTANTS if hasattr(batch_norm_act, n)
    }
    variants = [{}] + [parse_variant(v) for v in args.variants.split(";") if v.strip()]
    doc: dict[str, object] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "batch": args.batch,
        "size": args.size,
        "dtype": "float16, channels-last, training",
        "timing": f"device ms: a CUDA graph of {args.reps} calls, median of 5 replays",
        "defaults": defaults,
        "rows": [],
    }
    rows: list[dict[str, object]] = doc["rows"]  # type: ignore[assignment]
    for scale in args.scales.split(","):
        shapes = unit_shapes(scale, args.batch, args.size)
        for variant in variants:
            set_launch({**defaults, **variant})
            per_shape = []
            for shape, count in sorted(shapes.items()):
                t = time_pair(shape, args.reps, with_torch=not variant)
                per_shape.append({"shape": list(shape), "units": count, **t})
            row: dict[str, object] = {
                "scale": scale,
                "launch": {**defaults, **variant},
                "units": sum(shapes.values()),
            }
            row["fused_forward_ms"] = round(
                sum(x["units"] * x["fused_forward_ms"] for x in per_shape), 3
            )
            for key in ("torch_ms", "fused_ms"):
                if key in per_shape[0]:
                    row[key] = round(sum(x["units"] * x[key] for x in per_shape), 3)
                    issue = key.replace("_ms", "_issue_us")
                    row[key.replace("_ms", "_issue_ms")] = round(
                        sum(x["units"] * x[issue] for x in per_shape) / 1e3, 3
                    )
            if "torch_ms" in row:
                row["speedup"] = round(float(row["torch_ms"]) / float(row["fused_ms"]), 3)
            row["max_rel_z"] = max(float(s["max_rel_z"]) for s in per_shape)
            row["max_rel_grad_x"] = max(float(s["max_rel_grad_x"]) for s in per_shape)
            row["shapes"] = per_shape
            rows.append(row)
            print({k: v for k, v in row.items() if k != "shapes"}, flush=True)
            (args.out / "batch-norm-act.json").write_text(json.dumps(doc, indent=1) + "\n")
    set_launch(defaults)


LAUNCH_CONSTANTS = (
    "PROGRAMS", "MIN_TILES", "FINISH_PARTIALS", "TILE", "APPLY_WARPS", "PARTIAL_TILE",
    "PARTIAL_WARPS",
)  # fmt: skip


def parse_variant(text: str) -> dict[str, int]:
    """``"PARTIAL_TILE=1024,PARTIAL_WARPS=4"`` as a dict of launch constants."""
    out = {}
    for item in text.split(","):
        name, _, value = item.strip().partition("=")
        if name not in LAUNCH_CONSTANTS:
            raise SystemExit(f"--variants: {name!r} is not one of {', '.join(LAUNCH_CONSTANTS)}")
        out[name] = int(value)
    return out


def set_launch(constants: dict[str, int]) -> None:
    for name, value in constants.items():
        setattr(batch_norm_act, name, value)
    batch_norm_act._layout.cache_clear()


if __name__ == "__main__":
    main()
