"""The fused BatchNorm + SiLU compiles once per channel block and dtype, not once per tensor
size: on a fresh machine every distinct Triton launch signature is a compile inside the first
step (`benchmarks/kernel_signatures.py` counts them for a whole model)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from lucid_models.conv import ConvBNAct

pytest.importorskip("triton", reason="the fused pair is a set of Triton kernels")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
kernel_signatures = pytest.importorskip("kernel_signatures")


def _step(side: int, batch: int) -> dict[str, set[tuple[str, ...]]]:
    torch.manual_seed(0)
    unit = ConvBNAct(3, 64, 3).to(memory_format=torch.channels_last).train()
    x = torch.randn(batch, 3, side, side).contiguous(memory_format=torch.channels_last)
    return kernel_signatures.signatures(unit, x)


def test_a_tensors_row_count_adds_no_compile() -> None:
    """From one partial program (a 4x4 map) to hundreds (64 x 160 x 160 rows), and counts of
    partials that are or are not multiples of 16, the six kernels launch with one signature
    each: the counts are left unspecialised and the finishing step's rows are fixed."""
    sizes = [(4, 1), (24, 3), (40, 16), (160, 64)]
    steps = [_step(side, batch) for side, batch in sizes]
    for name in kernel_signatures.KERNELS:
        keys = set().union(*(step[name] for step in steps))
        assert len(keys) == 1, (name, keys)


@pytest.mark.parametrize(("batch", "size"), [(1, 160), (2, 320), (3, 416), (1, 640), (16, 224)])
def test_the_warm_up_asks_for_the_fits_signatures(batch: int, size: int) -> None:
    """`lucid_models.warm_kernels` runs a whole network at a smaller size than the fit's, and
    compiles what the fit would only if every kernel's signature is the same there: the row
    counts' specialisation (1, divisible by 16, neither) at every stride included."""
    from lucid_models import build_model
    from lucid_models.warm_kernels import warm_size

    def step(side: int) -> dict[str, set[tuple[str, ...]]]:
        torch.manual_seed(0)
        model = build_model("yolo26n", task="detect", num_classes=3)
        model = model.to(memory_format=torch.channels_last).train()
        x = torch.randn(batch, 3, side, side).contiguous(memory_format=torch.channels_last)
        return kernel_signatures.signatures(model, x)

    small = warm_size(size)
    assert small <= min(size, 128)
    fit, warm = step(size), step(small)
    assert fit == warm
    if batch == 1 and small != size:
        # the rule is what makes them equal: a map of another parity asks for other compiles
        other = small - 32 if small > 96 else small + 32
        assert step(other) != fit
