"""On CUDA the assigner's overlaps come from one Triton pass with the elementwise form's bits:
`pairwise_ciou` takes the kernel there, and every element equals the torch form's, tiny, inverted
and padding (all-zero) boxes included."""

from __future__ import annotations

import pytest
import torch

from lucid_kernels import ciou_kernel_applies
from lucid_train.assign.overlaps import box_ciou, pairwise_ciou

pytestmark = pytest.mark.gpu


def _boxes(b: int, m: int, anchors: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(b * m)
    xy = torch.rand(b, m, 2, generator=g) * 600
    gt = torch.cat([xy, xy + torch.rand(b, m, 2, generator=g) ** 3 * 300 + 0.3], -1)
    gt[:, -2:] = 0  # padding rows of a fixed capacity
    centre = torch.rand(b, anchors, 2, generator=g) * 640
    half = torch.rand(b, anchors, 2, generator=g) * 80 - 8  # some inverted
    return gt.cuda(), torch.cat([centre - half, centre + half], -1).cuda()


@pytest.mark.parametrize(("b", "m", "anchors"), [(4, 12, 8400), (2, 7, 2100), (1, 3, 257)])
def test_the_assigners_overlaps_on_cuda_are_the_elementwise_forms_bits(
    b: int, m: int, anchors: int
) -> None:
    gt, pred = _boxes(b, m, anchors)
    assert ciou_kernel_applies(gt, pred)
    fused = pairwise_ciou(gt, pred)
    ref = box_ciou(gt.unsqueeze(2), pred.unsqueeze(1)).clamp(min=0)
    assert bool((ref > 0).any()) and bool((ref == 0).any())
    assert int((fused.view(torch.int32) != ref.view(torch.int32)).sum()) == 0
    assert not ciou_kernel_applies(gt.requires_grad_(), pred)  # autograd keeps the torch form
