"""Blocks: channel plumbing, the SPPF residual and the attention island under autocast."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from lucid_models.attention import Attention, PSABlock
from lucid_models.blocks import SPPF, C3k2


def test_c3k2_chains_each_unit_on_the_latest_tensor() -> None:
    """The fuse conv reads ``(2 + n) * hidden`` channels: both halves and every unit's output."""
    block = C3k2(32, 64, 3, inner="bottleneck", expansion=0.25)
    assert block.cv2.conv.in_channels == (2 + 3) * 16
    assert block(torch.rand(2, 32, 8, 8)).shape == (2, 64, 8, 8)


def test_sppf_adds_its_input_back_and_its_first_conv_has_no_activation() -> None:
    """YOLO26's SPPF is residual when widths match; cv1 is conv-BN only."""
    block = SPPF(16, 16).eval()
    assert isinstance(block.cv1.act, nn.Identity)
    x = torch.rand(1, 16, 8, 8)
    with torch.no_grad():
        maps = [block.cv1(x)]
        for _ in range(3):
            maps.append(block.pool(maps[-1]))
        torch.testing.assert_close(block(x), x + block.cv2(torch.cat(maps, 1)))


def test_attention_heads_and_key_width_follow_the_channel_count() -> None:
    """heads = C // 64, head_dim 64, key_dim 32, qkv packs C + 2 * heads * key_dim channels."""
    attn = Attention(256, num_heads=4)
    assert (attn.head_dim, attn.key_dim) == (64, 32)
    assert attn.qkv.conv.out_channels == 256 + 2 * 4 * 32


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_psa_block_stays_finite_under_autocast_when_logits_pass_fp16_range(
    dtype: torch.dtype,
) -> None:
    """Logits beyond 65504 would be inf in fp16; the kernels' island keeps the block finite."""
    torch.manual_seed(0)
    block = PSABlock(64).eval()
    with torch.no_grad():
        block.attn.qkv.conv.weight.mul_(60.0)  # q.k sums reach ~1e5 and more
    x = (torch.rand(1, 64, 6, 6) * 8).requires_grad_()
    with torch.no_grad():  # the float32 logits really pass fp16's largest finite value
        q, k, _ = block.attn.qkv(x).view(1, 1, 128, 36).split([32, 32, 64], dim=2)
        assert (q.transpose(-2, -1) @ k).abs().max() > 65504
    with torch.autocast("cpu", dtype=dtype):
        y = block(x)
    assert torch.isfinite(y).all()
    y.float().sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in block.parameters() if p.grad is not None)
