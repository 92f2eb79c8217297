"""ConvBNAct: a bias-free convolution, BatchNorm (the authors' eps and momentum) and an optional
SiLU, in that order."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from lucid_models.conv import BN_EPS, BN_MOMENTUM, ConvBNAct


def test_conv_bn_act_is_conv_then_batchnorm_then_silu() -> None:
    """The block equals its three steps written out."""
    torch.manual_seed(0)
    block = ConvBNAct(4, 6, 3, stride=2).eval()
    block.bn.running_mean.normal_()
    block.bn.running_var.uniform_(0.5, 2.0)
    x = torch.randn(2, 4, 7, 9)
    bn = block.bn
    conv = F.conv2d(x, block.conv.weight, None, stride=2, padding=1)
    normed = F.batch_norm(conv, bn.running_mean, bn.running_var, bn.weight, bn.bias, eps=bn.eps)
    assert block.conv.bias is None
    assert torch.equal(block(x), F.silu(normed))
    assert block(x).shape == (2, 6, 4, 5)
    assert (bn.eps, bn.momentum) == (BN_EPS, BN_MOMENTUM) == (1e-3, 0.03)


def test_conv_bn_act_without_activation_is_linear() -> None:
    """``act=False`` leaves the BatchNorm output as it is."""
    block = ConvBNAct(3, 3, act=False).eval()
    assert isinstance(block.act, nn.Identity)
    x = torch.randn(1, 3, 2, 2)
    assert torch.equal(block(x), block.bn(block.conv(x)))


def test_depthwise_conv_bn_keeps_channels_apart() -> None:
    """``groups == channels`` mixes nothing across channels."""
    block = ConvBNAct(5, 5, 3, groups=5, act=False).eval()
    x = torch.zeros(1, 5, 4, 4)
    x[:, 2] = 1.0
    out = block(x) - block(torch.zeros_like(x))
    assert torch.count_nonzero(out[:, [0, 1, 3, 4]]) == 0


def test_conv_bn_act_rejects_channels_not_divisible_by_groups() -> None:
    """A grouped convolution needs channels divisible by groups."""
    with pytest.raises(ValueError, match=r"divisible by groups \(2\)"):
        ConvBNAct(3, 4, groups=2)
