"""GPU: forward and backward of every task at n scale, fp32 and fp16/bf16 autocast, finite.

Run in the GPU session (``-m gpu``); skipped without CUDA.
"""

from __future__ import annotations

import pytest
import torch

from lucid_models import build_model
from lucid_models.counts import TASKS
from lucid_models.outputs import ModelOutput, Task

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _tensors(out: ModelOutput) -> list[torch.Tensor]:
    tensors = []
    for branch in (out.one2one, out.one2many):
        if branch is not None:
            tensors += [t for t in vars(branch).values() if t is not None]
    return tensors + [t for t in (out.prototypes, out.semantic_logits) if t is not None]


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("task", TASKS)
def test_forward_backward_is_finite_on_cuda(task: Task, precision: str) -> None:
    """At 640x640, batch 2, channels_last: every output and parameter gradient is finite."""
    torch.manual_seed(0)
    kwargs = {"num_keypoints": 17} if task == "pose" else {}
    model = build_model("yolo26n", task=task, **kwargs).cuda().train()
    model = model.to(memory_format=torch.channels_last)
    x = torch.rand(2, 3, 640, 640, device="cuda").contiguous(memory_format=torch.channels_last)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
    with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
        out = model(x)
    tensors = _tensors(out)
    assert all(torch.isfinite(t).all() for t in tensors)
    sum(t.float().square().mean() for t in tensors if t.requires_grad).backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert len(grads) == sum(1 for _ in model.parameters())
    assert all(torch.isfinite(g).all() for g in grads)
