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
