"""Training-mode BatchNorm followed by SiLU in three Triton passes each way, on channels-last CUDA.

Why: every YOLO26 convolution is followed by a BatchNorm and a SiLU. Run as two operations, the
BatchNorm writes its output, the SiLU reads it back and writes its own, and the backward does the
same in reverse: at batch 64, 640 px these were about a third of a yolo26s/m step's device time
(cuDNN's NHWC BatchNorm 15-29 ms and the SiLU 7-15 ms a step on an H100,
docs/benchmarks/step-profile.md). Fused, the BatchNorm's output never reaches memory: the forward
reads ``x`` twice and writes ``z`` once, the backward reads ``dz`` and ``x`` twice and writes
``dx`` once, and only ``x`` is kept for the backward (the SiLU's input is recomputed).

Contract:
    * ``batch_norm_silu(x, weight, bias, running_mean, running_var, momentum, eps)`` returns
      ``silu(batch_norm(x, ..., training=True))`` and updates the running statistics as
      ``torch.nn.functional.batch_norm`` does (biased variance to normalise, unbiased into
      ``running_var``). Values agree with the two torch operations to float32 rounding of the
      statistics (fp16 / bf16 outputs within one unit in their last place, mostly equal); not
      bit for bit: the reduction order is the kernels' own.
    * Deterministic: the per-channel reductions are written per block of rows and combined in a
      fixed order (no atomics), so a step replayed from a CUDA graph equals the eager one bit
      for bit, as lucid-capture promises.
    * Statistics and gradients accumulate in float32 whatever the input dtype; ``x``'s gradient
      comes back in ``x``'s dtype, the weight's and bias's in theirs.
    * `batch_norm_silu_applies` says when it may stand in: CUDA, Triton installed, a 4-D
      channels-last input of more than one value a channel, float32 parameters and statistics.
    * The backward reads a gradient that is a channel slice of a channels-last tensor (what a
      concatenation hands back to each input) in place, at its row stride; any other layout
      is copied once into ``x``'s.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import torch
from torch import Tensor

try:
    import triton
    import triton.language as tl

    HAVE_TRITON = True
except ImportError:  # a CPU-only install: the two torch operations serve
    HAVE_TRITON = False

__all__ = ["batch_norm_silu", "batch_norm_silu_applies"]

PROGRAMS = 512  # partial programs a tensor, at most (about 4 an SM of an H100)
MIN_TILES = 4  # tiles a partial program reduces, at least: small tensors take fewer programs
FINISH_PARTIALS = 256  # rows of partials a finishing program combines a step
FINISH_CHANNELS = 16  # channels a finishing program
TILE = 4096  # elements a (rows, channels) tile of the elementwise passes
APPLY_WARPS = 4
# The partial passes keep one running sum per element of their tile and reduce across rows once,
# at the end: a reduction across a tile's rows every step held them to half the elementwise
# passes' bandwidth. Their tile and warps are a launch sweep's choice on an H100
# (benchmarks/batch_norm_act.py --variants; docs/benchmarks/batch-norm-act/*-s-sweep-1402.json).
PARTIAL_TILE = 4096
PARTIAL_WARPS = 4
# Each distinct launch signature is a compile on a fresh machine, serially in the first step:
# yolo26n's 105 units at 320 px, batch 16, asked for 38 of them when the finishing step's rows
# followed the count of partials and Triton specialised on the counts (equal to 1, divisible by
# 16). The counts are plain loop bounds and row offsets, so they are left unspecialised and the
# finishing step is always FINISH_PARTIALS rows (masked rows add nothing): 20 compiles, about one
# a kernel and channel block (benchmarks/kernel_signatures.py).


def batch_norm_silu_applies(x: Tensor, *params: Tensor | None) -> bool:
    """Whether `batch_norm_silu` may compute ``silu(batch_norm(x))`` for these tensors."""
    return (
        HAVE_TRITON
        and x.is_cuda
        and x.dim() == 4
        and x.dtype in (torch.float16, torch.bfloat16, torch.float32)
        and x.is_contiguous(memory_format=torch.channels_last)
        and x.numel() > x.shape[1]
        and all(p is not None and p.is_cuda and p.dtype == torch.float32 for p in params)
    )


def batch_norm_silu(
    x: Tensor,
    weight: Tensor,
    bias: Tensor,
    running_mean: Tensor,
    running_var: Tensor,
    momentum: float,
    eps: float,
) -> Tensor:
    """``silu(batch_norm(x, running_mean, running_var, weight, bias, True, momentum, eps))``.

    ``x``: ``(B, C, H, W)`` channels-last on CUDA (see `batch_norm_silu_applies`); the running
    statistics are updated in place. On the CPU it runs only under ``TRITON_INTERPRET=1``.
    """
    if not HAVE_TRITON:
        raise RuntimeError("batch_norm_silu needs Triton (installed with torch's CUDA wheels)")
    if x.is_cuda and x.get_device() != torch.cuda.current_device():
        # Triton launches on the current device; the backward's thread is the tensors' already
        with torch.cuda.device(x.device):
            return batch_norm_silu(x, weight, bias, running_mean, running_var, momentum, eps)
    out: Tensor = _BatchNormSiLU.apply(  # type: ignore[no-untyped-call]
        x, weight, bias, running_mean, running_var, momentum, eps
    )
    return out


class _Layout(NamedTuple):
    """How the kernels tile the ``(rows, C)`` matrix a channels-last tensor is in memory."""

    block_m: int  # rows of an elementwise tile
    block_c: int  # channels of every tile
    blocks_c: int  # channel blocks
    part_m: int  # rows of a partial pass's tile
    per_program: int  # rows a partial program reduces (a multiple of part_m)
    programs: int  # partial programs a channel block (rows of partials)


@functools.lru_cache(maxsize=1024)
def _layout(rows: int, channels: int) -> _Layout:
    block_c = min(64, triton.next_power_of_2(channels))
    blocks_c = triton.cdiv(channels, block_c)
    part_m = max(1, PARTIAL_TILE // block_c)
    tiles = triton.cdiv(rows, part_m)
    programs = max(1, min(triton.cdiv(PROGRAMS, blocks_c), triton.cdiv(tiles, MIN_TILES)))
    per_program = triton.cdiv(tiles, programs) * part_m
    programs = triton.cdiv(rows, per_program)
    return _Layout(TILE // block_c, block_c, blocks_c, part_m, per_program, programs)


def _row_stride(t: Tensor) -> int | None:
    """The stride between rows when ``t`` (B, C, H, W) is a ``(B*H*W, C)`` matrix of unit
    column stride, as a channels-last tensor is and so is a channel slice of one (the gradient
    a concatenation hands back to each of its inputs); None for any other layout."""
    n, c, h, w = t.shape
    sn, sc, sh, sw = t.stride()
    row = sw if w > 1 else sh if h > 1 else sn if n > 1 else c
    dense = (
        (c == 1 or sc == 1)
        and row >= c
        and (w == 1 or sw == row)
        and (h == 1 or sh == w * row)
        and (n == 1 or sn == h * w * row)
    )
    return row if dense else None


# The host's side is a few calls a unit (an eager step runs it ~100 times each way): the kernels
# take whole buffers and find their rows inside, so no view is made here.
class _BatchNormSiLU(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        x: Tensor,
        weight: Tensor,
        bias: Tensor,
        running_mean: Tensor,
        running_var: Tensor,
        momentum: float,
        eps: float,
    ) -> Tensor:
        c = x.shape[1]
        m = x.numel() // c
        t = _layout(m, c)
        part = torch.empty(3 * t.programs * c, device=x.device, dtype=torch.float32)
        stats = torch.empty(4 * c, device=x.device, dtype=torch.float32)  # mean invstd scale shift
        out = torch.empty_like(x)  # channels-last, as x
        _stat_partials[(t.programs, t.blocks_c)](
            x, part, m, c, t.per_program, t.programs,
            block_m=t.part_m, block_c=t.block_c, num_warps=PARTIAL_WARPS,
        )  # fmt: skip
        _stat_finish[(triton.cdiv(c, FINISH_CHANNELS),)](
            part, t.programs, c, weight, bias, running_mean, running_var, stats, momentum, eps,
            block_p=FINISH_PARTIALS, block_c=FINISH_CHANNELS,
        )  # fmt: skip
        _apply_silu[(triton.cdiv(m, t.block_m), t.blocks_c)](
            x, out, stats, m, c, block_m=t.block_m, block_c=t.block_c, num_warps=APPLY_WARPS
        )
        ctx.save_for_backward(x, weight, stats)
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        x, weight, stats = ctx.saved_tensors
        g_row = _row_stride(grad_out)
        if g_row is None:  # not rows of channels: copied once into x's layout
            grad_out = grad_out.contiguous(memory_format=torch.channels_last)
            g_row = grad_out.shape[1]
        c = x.shape[1]
        m = x.numel() // c
        t = _layout(m, c)
        part = torch.empty(2 * t.programs * c, device=x.device, dtype=torch.float32)
        coeffs = torch.empty(5, c, device=x.device, dtype=torch.float32)  # dw db k E[dy] E[dy x^]
        grad_x = torch.empty_like(x)
        _grad_partials[(t.programs, t.blocks_c)](
            x, grad_out, g_row, stats, part, m, c, t.per_program, t.programs,
            block_m=t.part_m, block_c=t.block_c, num_warps=PARTIAL_WARPS,
        )  # fmt: skip
        _grad_finish[(triton.cdiv(c, FINISH_CHANNELS),)](
            part, t.programs, c, m, weight, stats, coeffs,
            block_p=FINISH_PARTIALS, block_c=FINISH_CHANNELS,
        )  # fmt: skip
        _grad_apply[(triton.cdiv(m, t.block_m), t.blocks_c)](
            x, grad_out, g_row, grad_x, stats, coeffs, m, c,
            block_m=t.block_m, block_c=t.block_c, num_warps=APPLY_WARPS,
        )  # fmt: skip
        grad_w = coeffs[0] if ctx.needs_input_grad[1] else None
        grad_b = coeffs[1] if ctx.needs_input_grad[2] else None
        return grad_x, grad_w, grad_b, None, None, None, None


if HAVE_TRITON:

    @triton.jit  # type: ignore[untyped-decorator, unused-ignore]
    def _chan(mean_a, m2_a, n_a, mean_b, m2_b, n_b):  # type: ignore[no-untyped-def]
        # Chan et al.'s pairwise combination of (mean, sum of squared deviations, count)
        n = n_a + n_b
        delta = mean_b - mean_a
        frac = tl.where(n > 0, n_b / tl.maximum(n, 1.0), 0.0)
        return mean_a + delta * frac, m2_a + m2_b + delta * delta * n_a * frac, n

    @triton.jit(do_not_specialize=("per_program", "programs"))  # type: ignore[untyped-decorator, unused-ignore]
    def _stat_partials(  # type: ignore[no-untyped-def]
        x_ptr, part_ptr, rows, channels, per_program, programs,
        block_m: tl.constexpr, block_c: tl.constexpr,
    ):  # fmt: skip
        p = tl.program_id(0)
        c = tl.program_id(1) * block_c + tl.arange(0, block_c)
        keep_c = c < channels
        # Welford's update per element of the tile; the tile's rows are combined once, at the end
        mean = tl.zeros([block_m, block_c], dtype=tl.float32)
        m2 = tl.zeros([block_m, block_c], dtype=tl.float32)
        n = tl.zeros([block_m], dtype=tl.float32)
        start = p.to(tl.int64) * per_program
        offset = 0
        while offset < per_program:  # a while loop: Triton's interpreter cannot range over it
            r = start + offset + tl.arange(0, block_m)
            offset += block_m
            keep_r = r < rows
            keep = keep_r[:, None] & keep_c[None, :]
            v = tl.load(x_ptr + r[:, None] * channels + c[None, :], mask=keep, other=0.0)
            v = v.to(tl.float32)
            n += keep_r.to(tl.float32)
            delta = tl.where(keep_r[:, None], v - mean, 0.0)
            mean += delta * (1.0 / tl.maximum(n, 1.0))[:, None]
            m2 += delta * tl.where(keep_r[:, None], v - mean, 0.0)
        counts = tl.broadcast_to(n[:, None], [block_m, block_c])
        mean, m2, n_c = tl.reduce((mean, m2, counts), 0, _chan)
        out = part_ptr + p * channels + c  # (3, programs, C): mean, M2, count
        tl.store(out, mean, mask=keep_c)
        tl.store(out + programs * channels, m2, mask=keep_c)
        tl.store(out + 2 * programs * channels, n_c, mask=keep_c)

    @triton.jit(do_not_specialize=("programs",))  # type: ignore[untyped-decorator, unused-ignore]
    def _stat_finish(  # type: ignore[no-untyped-def]
        part_ptr, programs, channels, w_ptr, b_ptr, rm_ptr, rv_ptr, stats_ptr, momentum, eps,
        block_p: tl.constexpr, block_c: tl.constexpr,
    ):  # fmt: skip
        c = tl.program_id(0) * block_c + tl.arange(0, block_c)
        keep_c = c < channels
        plane = programs * channels
        mean = tl.zeros([block_c], dtype=tl.float32)
        m2 = tl.zeros([block_c], dtype=tl.float32)
        n = tl.zeros([block_c], dtype=tl.float32)
        start = 0
        while start < programs:  # block_p partials a step, combined in a fixed order
            p = start + tl.arange(0, block_p)
            start += block_p
            keep = (p < programs)[:, None] & keep_c[None, :]
            at = part_ptr + p[:, None] * channels + c[None, :]
            step_mean, step_m2, step_n = tl.reduce(
                (
                    tl.load(at, mask=keep, other=0.0),
                    tl.load(at + plane, mask=keep, other=0.0),
                    tl.load(at + 2 * plane, mask=keep, other=0.0),
                ),
                0,
                _chan,
            )
            mean, m2, n = _chan(mean, m2, n, step_mean, step_m2, step_n)
        var = m2 / tl.maximum(n, 1.0)  # masked channels hold no rows
        invstd = 1.0 / tl.sqrt(var + eps)
        rm = tl.load(rm_ptr + c, mask=keep_c, other=0.0)
        rv = tl.load(rv_ptr + c, mask=keep_c, other=0.0)
        tl.store(rm_ptr + c, (1.0 - momentum) * rm + momentum * mean, mask=keep_c)
        tl.store(
            rv_ptr + c,
            (1.0 - momentum) * rv + momentum * (m2 / tl.maximum(n - 1.0, 1.0)),
            mask=keep_c,
        )
        scale = tl.load(w_ptr + c, mask=keep_c, other=0.0) * invstd
        shift = tl.load(b_ptr + c, mask=keep_c, other=0.0) - mean * scale
        tl.store(stats_ptr + c, mean, mask=keep_c)  # (4, C): mean, invstd, scale, shift
        tl.store(stats_ptr + channels + c, invstd, mask=keep_c)
        tl.store(stats_ptr + 2 * channels + c, scale, mask=keep_c)
        tl.store(stats_ptr + 3 * channels + c, shift, mask=keep_c)

    @triton.jit  # type: ignore[untyped-decorator, unused-ignore]
    def _apply_silu(  # type: ignore[no-untyped-def]
        x_ptr, out_ptr, stats_ptr, rows, channels,
        block_m: tl.constexpr, block_c: tl.constexpr,
    ):  # fmt: skip
        r = tl.program_id(0).to(tl.int64) * block_m + tl.arange(0, block_m)
        c = tl.program_id(1) * block_c + tl.arange(0, block_c)
        keep_c = c < channels
        keep = (r < rows)[:, None] & keep_c[None, :]
        at = r[:, None] * channels + c[None, :]
        v = tl.load(x_ptr + at, mask=keep, other=0.0).to(tl.float32)
        scale = tl.load(stats_ptr + 2 * channels + c, mask=keep_c, other=0.0)
        shift = tl.load(stats_ptr + 3 * channels + c, mask=keep_c, other=0.0)
        y = v * scale[None, :] + shift[None, :]
        z = y / (1.0 + tl.exp(-y))
        tl.store(out_ptr + at, z.to(out_ptr.dtype.element_ty), mask=keep)

    @triton.jit  # type: ignore[untyped-decorator, unused-ignore]
    def _stats(stats_ptr, c, channels, keep_c):  # type: ignore[no-untyped-def]
        # the forward's (4, C) rows: mean, invstd, scale (weight x invstd), shift
        mean = tl.load(stats_ptr + c, mask=keep_c, other=0.0)
        invstd = tl.load(stats_ptr + channels + c, mask=keep_c, other=0.0)
        scale = tl.load(stats_ptr + 2 * channels + c, mask=keep_c, other=0.0)
        shift = tl.load(stats_ptr + 3 * channels + c, mask=keep_c, other=0.0)
        return mean, invstd, scale, shift

    @triton.jit  # type: ignore[untyped-decorator, unused-ignore]
    def _silu_grad(g, v, scale, shift):  # type: ignore[no-untyped-def]
        # d silu(y) / dy = s (1 + y (1 - s)), with y = the BatchNorm's output, recomputed
        y = v * scale[None, :] + shift[None, :]
        s = 1.0 / (1.0 + tl.exp(-y))
        return g * (s * (1.0 + y * (1.0 - s)))

    @triton.jit(do_not_specialize=("per_program", "programs"))  # type: ignore[untyped-decorator, unused-ignore]
    def _grad_partials(  # type: ignore[no-untyped-def]
        x_ptr, g_ptr, g_row, stats_ptr, part_ptr, rows, channels, per_program, programs,
        block_m: tl.constexpr, block_c: tl.constexpr,
    ):  # fmt: skip
        p = tl.program_id(0)
        c = tl.program_id(1) * block_c + tl.arange(0, block_c)
        keep_c = c < channels
        mean, invstd, scale, shift = _stats(stats_ptr, c, channels, keep_c)
        total = tl.zeros([block_m, block_c], dtype=tl.float32)  # per element; rows summed last
        dot = tl.zeros([block_m, block_c], dtype=tl.float32)
        start = p.to(tl.int64) * per_program
        offset = 0
        while offset < per_program:  # a while loop: Triton's interpreter cannot range over it
            r = start + offset + tl.arange(0, block_m)
            offset += block_m
            keep = (r < rows)[:, None] & keep_c[None, :]
            v = tl.load(x_ptr + r[:, None] * channels + c[None, :], mask=keep, other=0.0)
            v = v.to(tl.float32)
            g = tl.load(g_ptr + r[:, None] * g_row + c[None, :], mask=keep, other=0.0)
            dy = _silu_grad(g.to(tl.float32), v, scale, shift)  # 0 where masked: g is
            total += dy
            dot += dy * ((v - mean[None, :]) * invstd[None, :])
        out = part_ptr + p * channels + c  # (2, programs, C): sum of dy, of dy x_hat
        tl.store(out, tl.sum(total, axis=0), mask=keep_c)
        tl.store(out + programs * channels, tl.sum(dot, axis=0), mask=keep_c)

    @triton.jit(do_not_specialize=("programs",))  # type: ignore[untyped-decorator, unused-ignore]
    def _grad_finish(  # type: ignore[no-untyped-def]
        part_ptr, programs, channels, rows, w_ptr, stats_ptr, coeffs_ptr,
        block_p: tl.constexpr, block_c: tl.constexpr,
    ):  # fmt: skip
        c = tl.program_id(0) * block_c + tl.arange(0, block_c)
        keep_c = c < channels
        total = tl.zeros([block_c], dtype=tl.float32)
        dot = tl.zeros([block_c], dtype=tl.float32)
        start = 0
        while start < programs:  # block_p partials a step, summed in a fixed order
            p = start + tl.arange(0, block_p)
            start += block_p
            keep = (p < programs)[:, None] & keep_c[None, :]
            at = part_ptr + p[:, None] * channels + c[None, :]
            total += tl.sum(tl.load(at, mask=keep, other=0.0), axis=0)
            dot += tl.sum(tl.load(at + programs * channels, mask=keep, other=0.0), axis=0)
        invstd = tl.load(stats_ptr + channels + c, mask=keep_c, other=0.0)
        k = tl.load(w_ptr + c, mask=keep_c, other=0.0) * invstd
        tl.store(coeffs_ptr + c, dot, mask=keep_c)  # (5, C): dw, db, k, E[dy], E[dy x_hat]
        tl.store(coeffs_ptr + channels + c, total, mask=keep_c)
        tl.store(coeffs_ptr + 2 * channels + c, k, mask=keep_c)
        tl.store(coeffs_ptr + 3 * channels + c, total / rows, mask=keep_c)
        tl.store(coeffs_ptr + 4 * channels + c, dot / rows, mask=keep_c)

    @triton.jit  # type: ignore[untyped-decorator, unused-ignore]
    def _grad_apply(  # type: ignore[no-untyped-def]
        x_ptr, g_ptr, g_row, out_ptr, stats_ptr, coeffs_ptr, rows, channels,
        block_m: tl.constexpr, block_c: tl.constexpr,
    ):  # fmt: skip
        r = tl.program_id(0).to(tl.int64) * block_m + tl.arange(0, block_m)
        c = tl.program_id(1) * block_c + tl.arange(0, block_c)
        keep_c = c < channels
        keep = (r < rows)[:, None] & keep_c[None, :]
        at = r[:, None] * channels + c[None, :]
        v = tl.load(x_ptr + at, mask=keep, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + r[:, None] * g_row + c[None, :], mask=keep, other=0.0)
        g = g.to(tl.float32)
        mean, invstd, scale, shift = _stats(stats_ptr, c, channels, keep_c)
        k = tl.load(coeffs_ptr + 2 * channels + c, mask=keep_c, other=0.0)
        mean_dy = tl.load(coeffs_ptr + 3 * channels + c, mask=keep_c, other=0.0)
        mean_dot = tl.load(coeffs_ptr + 4 * channels + c, mask=keep_c, other=0.0)
        dy = _silu_grad(g, v, scale, shift)
        x_hat = (v - mean[None, :]) * invstd[None, :]
        dx = k[None, :] * (dy - mean_dy[None, :] - x_hat * mean_dot[None, :])
        tl.store(out_ptr + at, dx.to(out_ptr.dtype.element_ty), mask=keep)
