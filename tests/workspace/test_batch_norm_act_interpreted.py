"""`lucid_kernels.batch_norm_silu` on the CPU, under Triton's interpreter (in a process of its
own: the interpreter is chosen when the kernels are defined): outputs, running statistics and
gradients equal torch's BatchNorm and SiLU to float32 rounding, for channel counts under, at and
over a block, a partial last block of rows, programs that combine many tiles, finishing passes
that combine their partials in several steps, and a gradient that is a channel slice of a
channels-last tensor (read in place) as well as an NCHW one (copied).
Its CUDA twin is `tests/lucid-kernels/test_batch_norm_act_gpu.py`."""

from __future__ import annotations

import pytest

from lucid_testing.interpreted import run_interpreted

pytest.importorskip("triton", reason="the fused pair is a set of Triton kernels")


CHECK = """
import torch
import torch.nn.functional as F
from lucid_kernels import batch_norm_act
from lucid_kernels.batch_norm_act import batch_norm_silu
torch.manual_seed(0)
for shape in [(2, 16, 5, 7), (3, 80, 9, 4), (2, 3, 3, 1), (3, 80, 9, 40)]:
    if shape[-1] == 40:  # few programs of many tiles; the finishing passes take two steps
        batch_norm_act.PROGRAMS, batch_norm_act.FINISH_PARTIALS = 8, 2
        batch_norm_act.PARTIAL_TILE = 2048  # the shape below whatever the tuned default
        batch_norm_act._layout.cache_clear()
        t = batch_norm_act._layout(3 * 9 * 40, 80)
        assert (t.part_m, t.per_program, t.programs) == (32, 288, 4), t  # 2 steps of 2
    c = shape[1]
    x = (torch.randn(shape) * 3 + 5).contiguous(memory_format=torch.channels_last)
    w, b = torch.rand(c) + 0.5, torch.randn(c)
    rm, rv = torch.randn(c), torch.rand(c) + 0.5
    n, _, h, w_ = shape
    dz = torch.randn(shape)  # NCHW: copied into x's layout first
    if h * w_ > 20:  # a channel slice of a channels-last tensor, as a concatenation hands back
        wide = torch.randn(n, c + 24, h, w_, generator=torch.Generator().manual_seed(1))
        dz = wide.contiguous(memory_format=torch.channels_last)[:, 8 : 8 + c]
        assert batch_norm_act._row_stride(dz) == c + 24
    else:
        assert batch_norm_act._row_stride(dz) is None or c == 1 or h * w_ == 1
    outs = []
    for fused in (True, False):
        xi, wi, bi = (t.clone().requires_grad_() for t in (x, w, b))
        m, v = rm.clone(), rv.clone()
        if fused:
            z = batch_norm_silu(xi, wi, bi, m, v, 0.03, 1e-3)
        else:
            z = F.silu(F.batch_norm(xi, m, v, wi, bi, True, 0.03, 1e-3))
        z.backward(dz)
        outs.append([z.detach(), m, v, xi.grad, wi.grad, bi.grad])
    for name, got, ref in zip(["z", "mean", "var", "gx", "gw", "gb"], *outs):
        err = float((got - ref).abs().max() / ref.abs().max())
        assert err < 2e-6, (shape, name, err)
    assert outs[0][0].is_contiguous(memory_format=torch.channels_last)
    print(shape, "agrees")
"""


def test_the_fused_batch_norm_silu_equals_torchs_pair_under_the_interpreter() -> None:
    run = run_interpreted(CHECK)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.count("agrees") == 4, run.stdout
