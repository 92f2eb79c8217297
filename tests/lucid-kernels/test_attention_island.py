"""The float32 attention island: finite under autocast, exact without it, backward-state blind."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import Tensor

from lucid_kernels import attention_weights
from lucid_kernels.attention import _Float32AttentionWeights
from lucid_testing.attention_block import SpatialAttention

LOW_PRECISION = [torch.float16, torch.bfloat16]
FP16_MAX = torch.finfo(torch.float16).max  # 65504


def qkv_split(module: SpatialAttention, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The block's queries, keys and values, as the reference below reads them."""
    B, _, H, W = x.shape
    qkv = module.qkv(x)
    q, k, v = qkv.view(B, module.num_heads, 2 * module.key_dim + module.head_dim, H * W).split(
        [module.key_dim, module.key_dim, module.head_dim], dim=2
    )
    return q, k, v


def reference_forward(module: SpatialAttention, x: Tensor) -> Tensor:
    """The unwrapped YOLO-style operation sequence, written out independently of the module."""
    B, C, H, W = x.shape
    q, k, v = qkv_split(module, x)
    attn = (q.transpose(-2, -1) @ k) * module.scale
    attn = attn.softmax(dim=-1)
    x = (v @ attn.transpose(-2, -1)).view(B, C, H, W) + module.pe(v.reshape(B, C, H, W))
    return module.proj(x)  # type: ignore[no-any-return]


def gradients(module: SpatialAttention) -> dict[str, Tensor]:
    grads: dict[str, Tensor] = {}
    for name, param in module.named_parameters():
        assert param.grad is not None, f"{name}: no gradient"
        grads[name] = param.grad
    return grads


def overflowing_case(device: torch.device) -> tuple[SpatialAttention, Tensor]:
    """Seed-002 probe: attention logits well beyond float16's range in float32."""
    torch.manual_seed(0)
    module = SpatialAttention(256).eval().to(device)
    x = (torch.randn(1, 256, 20, 20) * 100).to(device)
    return module, x


def test_fp16_autocast_keeps_logits_beyond_65504_finite(device: torch.device) -> None:
    """With the island, output and every gradient stay finite; without it, fp16 overflows."""
    module, x = overflowing_case(device)
    with torch.no_grad():
        q, k, _ = qkv_split(module, x)
        assert (q.transpose(-2, -1) @ k).abs().max() > FP16_MAX, "probe lost its overflow"

    for island in (True, False):
        module.float32_island = island
        module.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.float16):
            out = module(x)
        out.float().square().mean().backward()
        finite_grads = all(bool(g.isfinite().all()) for g in gradients(module).values())
        if island:
            assert bool(out.isfinite().all()), "island: non-finite output"
            assert finite_grads, "island: non-finite parameter gradient"
        else:
            assert not bool(out.isfinite().all()), "unprotected fp16 attention stayed finite"


def test_bf16_autocast_keeps_large_logits_finite(device: torch.device) -> None:
    """bf16's range holds the logits; the island keeps output and gradients finite there too."""
    module, x = overflowing_case(device)
    with torch.autocast(device.type, dtype=torch.bfloat16):
        out = module(x)
    out.float().square().mean().backward()
    assert out.dtype == torch.bfloat16
    assert bool(out.isfinite().all())
    for name, grad in gradients(module).items():
        assert bool(grad.isfinite().all()), f"{name}: non-finite gradient"


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_island_weights_are_float32_weights_in_input_dtype(
    device: torch.device, dtype: torch.dtype
) -> None:
    """Under autocast the weights are the float32 computation rounded once to the input dtype."""
    module, x = overflowing_case(device)
    with torch.no_grad():
        q, k, _ = qkv_split(module, x)
        q_low, k_low = q.to(dtype), k.to(dtype)
        q32, k32 = q_low.float(), k_low.float()
        expected = ((q32.transpose(-2, -1) @ k32) * module.scale).softmax(dim=-1).to(dtype)
        with torch.autocast(device.type, dtype=dtype):
            got = attention_weights(q_low, k_low, module.scale)
            plain = ((q_low.transpose(-2, -1) @ k_low) * module.scale).softmax(dim=-1)
    assert got.dtype == dtype
    assert torch.equal(got, expected)
    # The guard has teeth: the low-precision sequence does not give these weights.
    assert not torch.equal(plain.to(dtype), expected)


def test_float32_matches_plain_computation_bitwise(
    device: torch.device, exact_float32: None
) -> None:
    """Without autocast: outputs and every parameter gradient equal the unwrapped sequence."""
    torch.manual_seed(0)
    module = SpatialAttention(128).train().to(device)
    reference = copy.deepcopy(module)
    x = torch.randn(2, 128, 8, 8).to(device)

    out = module(x)
    out.square().mean().backward()
    ref_out = reference_forward(reference, x)
    ref_out.square().mean().backward()

    assert torch.equal(out, ref_out)
    ref_grads = gradients(reference)
    for name, grad in gradients(module).items():
        assert torch.equal(grad, ref_grads[name]), f"{name}: float32 gradient changed"


def test_attention_weights_without_autocast_is_the_plain_sequence(
    device: torch.device, exact_float32: None
) -> None:
    """No autocast: bitwise the plain expression, and no island node in the graph."""
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 16, 64, generator=gen).to(device).requires_grad_()
    k = torch.randn(2, 4, 16, 64, generator=gen).to(device).requires_grad_()
    got = attention_weights(q, k, 0.25)
    expected = ((q.transpose(-2, -1) @ k) * 0.25).softmax(dim=-1)
    assert torch.equal(got, expected)
    assert got.grad_fn is not None
    assert type(got.grad_fn).__name__ == type(expected.grad_fn).__name__ == "SoftmaxBackward0"


def test_attention_weights_under_autocast_use_the_island(device: torch.device) -> None:
    """Autocast on the inputs' device routes through the Function."""
    q = torch.randn(1, 1, 4, 6, device=device, requires_grad=True)
    with torch.autocast(device.type, dtype=torch.bfloat16):
        got = attention_weights(q, q, 0.5)
    assert got.grad_fn is not None
    assert "_Float32AttentionWeights" in type(got.grad_fn).__name__


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_gradients_ignore_backward_autocast(
    device: torch.device, dtype: torch.dtype, exact_float32: None
) -> None:
    """Backward inside or outside autocast gives bitwise equal parameter gradients.

    A graph recorder may run the backward inside the caller's autocast while eager training
    calls ``backward()`` outside it; the island's recomputation must not see the difference.
    """
    torch.manual_seed(0)
    module = SpatialAttention(128).train().to(device)
    x = torch.randn(2, 128, 8, 8).to(device)

    def run(backward_inside: bool) -> dict[str, Tensor]:
        clone = copy.deepcopy(module)
        with torch.autocast(device.type, dtype=dtype):
            loss = clone(x).float().square().mean()
            if backward_inside:
                loss.backward()
        if not backward_inside:
            loss.backward()
        return gradients(clone)

    inside, outside = run(True), run(False)
    for name, grad in outside.items():
        assert torch.equal(inside[name], grad), f"{name}: backward autocast changed gradients"


def test_island_function_gradcheck_float64() -> None:
    """Float64 derivatives of the Function match finite differences, and stay float64."""
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, 3, 5, dtype=torch.float64, generator=gen, requires_grad=True)
    k = torch.randn(1, 2, 3, 5, dtype=torch.float64, generator=gen, requires_grad=True)
    assert torch.autograd.gradcheck(_Float32AttentionWeights.apply, (q, k, 0.7))

    weights = _Float32AttentionWeights.apply(q, k, 0.7)
    assert weights.dtype == torch.float64
    grad_q, grad_k = torch.autograd.grad(weights.square().sum(), (q, k))
    assert grad_q.dtype == grad_k.dtype == torch.float64


def test_attention_weights_gradcheck_float64_under_autocast() -> None:
    """Under autocast the island keeps float64 (no demotion to float32) and its derivatives."""
    gen = torch.Generator().manual_seed(1)
    q = torch.randn(2, 1, 4, 3, dtype=torch.float64, generator=gen, requires_grad=True)
    k = torch.randn(2, 1, 4, 3, dtype=torch.float64, generator=gen, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert attention_weights(q, k, 0.5).dtype == torch.float64
        assert torch.autograd.gradcheck(lambda a, b: attention_weights(a, b, 0.5), (q, k))


def test_island_gradients_return_in_input_dtype() -> None:
    """fp16 queries and float32 keys get fp16 and float32 gradients back."""
    q = torch.randn(1, 1, 4, 6, dtype=torch.float16, requires_grad=True)
    k = torch.randn(1, 1, 4, 6, requires_grad=True)
    weights = _Float32AttentionWeights.apply(q, k, 0.5)
    assert weights.dtype == torch.float32
    weights.sum().backward()
    assert q.grad is not None
    assert k.grad is not None
    assert (q.grad.dtype, k.grad.dtype) == (torch.float16, torch.float32)
