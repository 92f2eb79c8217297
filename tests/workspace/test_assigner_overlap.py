"""`lucid_kernels.ciou_kernel`, the assigner's pairwise CIoU in one Triton pass, keeps the
elementwise form's bits: the same float32 operations in the same order. On the CPU the kernel
runs under Triton's interpreter, in a process of its own (the interpreter is chosen when the
kernel is defined); its CUDA twin is `tests/lucid-train/test_assign_overlaps_gpu.py`."""

from __future__ import annotations

import pytest

from lucid_testing.interpreted import run_interpreted

pytest.importorskip("triton", reason="the fused kernel is a Triton kernel")


CHECK = """
import sys, torch
sys.path.insert(0, "benchmarks")
import assigner_overlap as ao
for seed, (b, m, a) in enumerate([(2, 5, 300), (1, 3, 257)]):
    gt, pred = ao.random_boxes(b, m, a, torch.device("cpu"), seed=seed)
    gt[0, 0] = torch.tensor([10.0, 10.0, 10.5, 12.0])  # a box under a pixel wide
    ref, fused = ao.elementwise_ciou(gt, pred), ao.fused_pairwise_ciou(gt, pred)
    assert fused.shape == ref.shape and bool((ref > 0).any()), "the case tests nothing"
    differ = int((ref.view(torch.int32) != fused.view(torch.int32)).sum())
    print(f"{b}x{m}x{a}: {differ} of {ref.numel()} differ")
    assert differ == 0
"""


def test_the_fused_pairwise_ciou_keeps_the_elementwise_forms_bits() -> None:
    run = run_interpreted(CHECK)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.count(" 0 of ") == 2, run.stdout
