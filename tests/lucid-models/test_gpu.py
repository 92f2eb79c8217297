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


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_the_necks_resize_keeps_the_half_dtype_and_the_float32_paths_bits(
    dtype: torch.dtype,
) -> None:
    """`neck._up_cat` resizes in the input's dtype under CUDA autocast (which would run the
    nearest upsample in float32): the concatenation stays in half precision, and a convolution
    after it gives the same output and the same gradients, bit for bit, as autocast's own
    float32 resize."""
    import torch.nn.functional as F

    from lucid_models.neck import _up_cat

    torch.manual_seed(0)
    conv = torch.nn.Conv2d(96, 32, 1).cuda().to(memory_format=torch.channels_last)
    cl = torch.channels_last
    x0 = torch.randn(4, 64, 20, 20, device="cuda").to(dtype).contiguous(memory_format=cl)
    lat0 = torch.randn(4, 32, 40, 40, device="cuda").to(dtype).contiguous(memory_format=cl)
    results = []
    for ours in (True, False):
        x, lat = x0.clone().requires_grad_(), lat0.clone().requires_grad_()
        conv.zero_grad()
        with torch.autocast("cuda", dtype=dtype):
            if ours:
                cat = _up_cat(x, lat)
                assert cat.dtype == dtype
            else:
                cat = torch.cat((F.interpolate(x, size=lat.shape[-2:], mode="nearest"), lat), 1)
                assert cat.dtype == torch.float32  # autocast's float32 resize, as it stands
            out = conv(cat)
        out.float().square().sum().backward()
        assert x.grad is not None and lat.grad is not None and conv.weight.grad is not None
        results.append((out, x.grad, lat.grad, conv.weight.grad.clone()))
    for a, b in zip(*results, strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b)
