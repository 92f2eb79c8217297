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
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import Tensor

try:
    import triton
    import triton.language as tl

    HAVE_TRITON = True
except ImportError:  # a CPU-only install: the two torch operations serve
    HAVE_TRITON = False

__all__ = ["batch_norm_silu", "batch_norm_silu_applies"]

PROGRAMS = 512  # partial-statistics programs a tensor (about 4 an SM of an H100)
MAX_PARTIALS = 256  # rows of partials the finishing pass reduces in one tile
FINISH_CHANNELS = 16  # channels a finishing program
TILE = 4096  # elements a (rows, channels) tile


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


@functools.lru_cache(maxsize=1024)
def _layout(rows: int, channels: int) -> tuple[int, int, int, int, int, int]:
    """``(block_rows, block_channels, rows_a_program, programs, channel_blocks, block_partials)``
    for the ``(rows, C)`` matrix a channels-last tensor is in memory."""
    block_c = min(64, triton.next_power_of_2(channels))
    block_m = TILE // block_c
    blocks_c = triton.cdiv(channels, block_c)
    programs = min(MAX_PARTIALS, triton.cdiv(PROGRAMS, blocks_c), triton.cdiv(rows, block_m))
    per_program = triton.cdiv(triton.cdiv(rows, programs), block_m) * block_m
    programs = triton.cdiv(rows, per_program)
    return block_m, block_c, per_program, programs, blocks_c, triton.next_power_of_2(programs)


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
        block_m, block_c, per_program, programs, blocks_c, block_p = _layout(m, c)
        part = torch.empty(3 * programs * c, device=x.device, dtype=torch.float32)
        stats = torch.empty(4 * c, device=x.device, dtype=torch.float32)  # mean invstd scale shift
        out = torch.empty_like(x)  # channels-last, as x
        _stat_partials[(programs, blocks_c)](
            x, part, m, c, per_program, programs, block_m=block_m, block_c=block_c
        )
        _stat_finish[(triton.cdiv(c, FINISH_CHANNELS),)](
            part, programs, c, weight, bias, running_mean, running_var, stats, momentum, eps,
            block_p=block_p, block_c=FINISH_CHANNELS,
        )  # fmt: skip
        _apply_silu[(triton.cdiv(m, block_m), blocks_c)](
            x, out, stats, m, c, block_m=block_m, block_c=block_c
        )
        ctx.save_for_backward(x, weight, stats)
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor | None, ...]:
        x, weight, stats = ctx.saved_tensors
        if not grad_out.is_contiguous(memory_format=torch.channels_last):
            grad_out = grad_out.contiguous(memory_format=torch.channels_last)
        c = x.shape[1]
        m = x.numel() // c
        block_m, block_c, per_program, programs, blocks_c, block_p = _layout(m, c)
        part = torch.empty(2 * programs * c, device=x.device, dtype=torch.float32)
        coeffs = torch.empty(5, c, device=x.device, dtype=torch.float32)  # dw db k E[dy] E[dy x^]
        grad_x = torch.empty_like(x)
        _grad_partials[(programs, blocks_c)](
            x, grad_out, stats, part, m, c, per_program, programs,
            block_m=block_m, block_c=block_c,
        )  # fmt: skip
        _grad_finish[(triton.cdiv(c, FINISH_CHANNELS),)](
            part, programs, c, m, weight, stats, coeffs, block_p=block_p, block_c=FINISH_CHANNELS
        )
        _grad_apply[(triton.cdiv(m, block_m), blocks_c)](
            x, grad_out, grad_x, stats, coeffs, m, c, block_m=block_m, block_c=block_c
        )
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

    @triton.jit  # type: ignore[untyped-decorator, unused-ignore]
    def _stat_partials(  # type: ignore[no-untyped-def]
        x_ptr, part_ptr, rows, channels, per_program, programs,
        block_m: tl.constexpr, block_c: tl.constexpr,
    ):  # fmt: skip
        p = tl.program_id(0)
        c = tl.program_id(1) * block_c + tl.arange(0, block_c)
        keep_c = c < channels
        mean = tl.zeros([block_c], dtype=tl.float32)
        m2 = tl.zeros([block_c], dtype=tl.float32)
        n = tl.zeros([block_c], dtype=tl.float32)
        start = p.to(tl.int64) * per_program
        offset = 0
        while offset < per_program:  # a while loop: Triton's interpreter cannot range over it
            r = start + offset + tl.arange(0, block_m)
            offset += block_m
            keep_r = r < rows
            keep = keep_r[:, None] & keep_c[None, :]
            v = tl.load(x_ptr + r[:, None] * channels + c[None, :], mask=keep, other=0.0)
            v = v.to(tl.float32)
            count = tl.sum(keep_r.to(tl.float32), axis=0)
            tile_mean = tl.sum(v, axis=0) / tl.maximum(count, 1.0)
            d = tl.where(keep, v - tile_mean[None, :], 0.0)
            tile_m2 = tl.sum(d * d, axis=0)
            mean, m2, n = _chan(mean, m2, n, tile_mean, tile_m2, count + 0.0 * n)
        out = part_ptr + p * channels + c  # (3, programs, C): mean, M2, count
        tl.store(out, mean, mask=keep_c)
        tl.store(out + programs * channels, m2, mask=keep_c)
        tl.store(out + 2 * programs * channels, n, mask=keep_c)

    @triton.jit  # type: ignore[untyped-decorator, unused-ignore]
    def _stat_finish(  # type: ignore[no-untyped-def]
        part_ptr, programs, channels, w_ptr, b_ptr, rm_ptr, rv_ptr, stats_ptr, momentum, eps,
        block_p: tl.constexpr, block_c: tl.constexpr,
    ):  # fmt: skip
        c = tl.program_id(0) * block_c + tl.arange(0, block_c)
        keep_c = c < channels
        p = tl.arange(0, block_p)
        keep = (p < programs)[:, None] & keep_c[None, :]
        at = part_ptr + p[:, None] * channels + c[None, :]
        plane = programs * channels
        mean, m2, n = tl.reduce(
            (
                tl.load(at, mask=keep, other=0.0),
                tl.load(at + plane, mask=keep, other=0.0),
                tl.load(at + 2 * plane, mask=keep, other=0.0),
            ),
            0,
            _chan,
        )
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

    @triton.jit  # type: ignore[untyped-decorator, unused-ignore]
    def _grad_partials(  # type: ignore[no-untyped-def]
        x_ptr, g_ptr, stats_ptr, part_ptr, rows, channels, per_program, programs,
        block_m: tl.constexpr, block_c: tl.constexpr,
    ):  # fmt: skip
        p = tl.program_id(0)
        c = tl.program_id(1) * block_c + tl.arange(0, block_c)
        keep_c = c < channels
        mean, invstd, scale, shift = _stats(stats_ptr, c, channels, keep_c)
        total = tl.zeros([block_c], dtype=tl.float32)
        dot = tl.zeros([block_c], dtype=tl.float32)
        start = p.to(tl.int64) * per_program
        offset = 0
        while offset < per_program:  # a while loop: Triton's interpreter cannot range over it
            r = start + offset + tl.arange(0, block_m)
            offset += block_m
            keep = (r < rows)[:, None] & keep_c[None, :]
            at = r[:, None] * channels + c[None, :]
            v = tl.load(x_ptr + at, mask=keep, other=0.0).to(tl.float32)
            g = tl.load(g_ptr + at, mask=keep, other=0.0).to(tl.float32)
            dy = _silu_grad(g, v, scale, shift)
            total += tl.sum(dy, axis=0)
            dot += tl.sum(dy * ((v - mean[None, :]) * invstd[None, :]), axis=0)
        out = part_ptr + p * channels + c  # (2, programs, C): sum of dy, of dy x_hat
        tl.store(out, total, mask=keep_c)
        tl.store(out + programs * channels, dot, mask=keep_c)

    @triton.jit  # type: ignore[untyped-decorator, unused-ignore]
    def _grad_finish(  # type: ignore[no-untyped-def]
        part_ptr, programs, channels, rows, w_ptr, stats_ptr, coeffs_ptr,
        block_p: tl.constexpr, block_c: tl.constexpr,
    ):  # fmt: skip
        c = tl.program_id(0) * block_c + tl.arange(0, block_c)
        keep_c = c < channels
        p = tl.arange(0, block_p)
        keep = (p < programs)[:, None] & keep_c[None, :]
        at = part_ptr + p[:, None] * channels + c[None, :]
        total = tl.sum(tl.load(at, mask=keep, other=0.0), axis=0)
        dot = tl.sum(tl.load(at + programs * channels, mask=keep, other=0.0), axis=0)
        invstd = tl.load(stats_ptr + channels + c, mask=keep_c, other=0.0)
        k = tl.load(w_ptr + c, mask=keep_c, other=0.0) * invstd
        tl.store(coeffs_ptr + c, dot, mask=keep_c)  # (5, C): dw, db, k, E[dy], E[dy x_hat]
        tl.store(coeffs_ptr + channels + c, total, mask=keep_c)
        tl.store(coeffs_ptr + 2 * channels + c, k, mask=keep_c)
        tl.store(coeffs_ptr + 3 * channels + c, total / rows, mask=keep_c)
        tl.store(coeffs_ptr + 4 * channels + c, dot / rows, mask=keep_c)

    @triton.jit  # type: ignore[untyped-decorator, unused-ignore]
    def _grad_apply(  # type: ignore[no-untyped-def]
        x_ptr, g_ptr, out_ptr, stats_ptr, coeffs_ptr, rows, channels,
        block_m: tl.constexpr, block_c: tl.constexpr,
    ):  # fmt: skip
        r = tl.program_id(0).to(tl.int64) * block_m + tl.arange(0, block_m)
        c = tl.program_id(1) * block_c + tl.arange(0, block_c)
        keep_c = c < channels
        keep = (r < rows)[:, None] & keep_c[None, :]
        at = r[:, None] * channels + c[None, :]
        v = tl.load(x_ptr + at, mask=keep, other=0.0).to(tl.float32)
        g = tl.load(g_ptr + at, mask=keep, other=0.0).to(tl.float32)
        mean, invstd, scale, shift = _stats(stats_ptr, c, channels, keep_c)
        k = tl.load(coeffs_ptr + 2 * channels + c, mask=keep_c, other=0.0)
        mean_dy = tl.load(coeffs_ptr + 3 * channels + c, mask=keep_c, other=0.0)
        mean_dot = tl.load(coeffs_ptr + 4 * channels + c, mask=keep_c, other=0.0)
        dy = _silu_grad(g, v, scale, shift)
        x_hat = (v - mean[None, :]) * invstd[None, :]
        dx = k[None, :] * (dy - mean_dy[None, :] - x_hat * mean_dot[None, :])
        tl.store(out_ptr + at, dx.to(out_ptr.dtype.element_ty), mask=keep)
