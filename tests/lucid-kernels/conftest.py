"""Fixtures for the lucid-kernels tests: the device sweep and exact float32 arithmetic."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request: pytest.FixtureRequest) -> torch.device:
    """Each test that takes ``device`` runs on the CPU and, in the GPU session, on CUDA."""
    return torch.device(request.param)


@pytest.fixture
def exact_float32() -> Iterator[None]:
    """Pin float32 arithmetic for bitwise comparisons on CUDA, restoring the flags afterwards.

    TF32 would round float32 matmuls and convolutions differently from their IEEE versions, and
    cuDNN may pick non-deterministic (atomic-add) backward algorithms; both would make two runs
    of the same computation differ in their last bits. Only the legacy ``allow_tf32`` flags are
    set: a partial set through the newer ``fp32_precision`` attributes makes the legacy getters
    that Lightning reads raise. On the CPU these flags change nothing.
    """
    saved = (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
    )
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
        yield
    finally:
        (
            torch.backends.cuda.matmul.allow_tf32,
            torch.backends.cudnn.allow_tf32,
            torch.backends.cudnn.deterministic,
            torch.backends.cudnn.benchmark,
        ) = saved
