"""Training BatchNorm + SiLU fused (`lucid_kernels.batch_norm_silu`, which a training
`ConvBNAct` takes on CUDA) against torch's two operations, at every convolution of a model
(issue 34: cuDNN's NHWC BatchNorm and the SiLU were about a third of a yolo26s/m step's device
time at batch 64, 640 px; `docs/benchmarks/step-profile.md`).

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) python3 benchmarks/batch_norm_act.py --out OUT

Per scale, the script records the shape reaching each unit's BatchNorm in one fp16 channels-last
forward, then times forward + backward of both forms at each distinct shape by CUDA events
(median) and back to back (microseconds a call: at small shapes the host's issue time, what an
eager step pays), weighted by how many units see it, and checks the largest differences. It
writes ``OUT/batch-norm-act.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

import torch
import torch.nn.functional as F
from step_timing import median_step_ms

from lucid_kernels import batch_norm_silu
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


def time_pair(shape: tuple[int, ...], reps: int) -> dict[str, float]:
    """Forward + backward milliseconds of torch's pair and the fused one, and their differences."""
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

    out: dict[str, float] = {}
    for name, fn in (("torch_ms", torch_pair), ("fused_ms", fused)):
        for _ in range(3):
            fn()
        out[name] = median_step_ms(fn, reps)
        torch.cuda.synchronize()
        begin = time.perf_counter()  # back to back, as an eager step issues them
        for _ in range(reps * 10):
            fn()
        torch.cuda.synchronize()
        out[name.replace("_ms", "_issue_us")] = (time.perf_counter() - begin) / (reps * 10) * 1e6
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
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    doc: dict[str, object] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "batch": args.batch,
        "size": args.size,
        "dtype": "float16, channels-last, training",
        "rows": [],
    }
    rows: list[dict[str, object]] = doc["rows"]  # type: ignore[assignment]
    for scale in args.scales.split(","):
        shapes = unit_shapes(scale, args.batch, args.size)
        per_shape = []
        torch_ms = fused_ms = 0.0
        for shape, count in sorted(shapes.items()):
            t = time_pair(shape, args.reps)
            per_shape.append({"shape": list(shape), "units": count, **t})
            torch_ms += count * t["torch_ms"]
            fused_ms += count * t["fused_ms"]
        row = {
            "scale": scale,
            "units": sum(shapes.values()),
            "torch_ms": round(torch_ms, 3),
            "fused_ms": round(fused_ms, 3),
            "speedup": round(torch_ms / fused_ms, 3),
            "torch_issue_ms": round(
                sum(x["units"] * x["torch_issue_us"] for x in per_shape) / 1e3, 3
            ),
            "fused_issue_ms": round(
                sum(x["units"] * x["fused_issue_us"] for x in per_shape) / 1e3, 3
            ),
            "max_rel_z": max(float(s["max_rel_z"]) for s in per_shape),
            "max_rel_grad_x": max(float(s["max_rel_grad_x"]) for s in per_shape),
            "shapes": per_shape,
        }
        rows.append(row)
        print({k: v for k, v in row.items() if k != "shapes"}, flush=True)
        (args.out / "batch-norm-act.json").write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
