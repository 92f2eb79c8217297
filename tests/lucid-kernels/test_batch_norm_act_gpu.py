"""On CUDA, `batch_norm_silu` is torch's training BatchNorm followed by SiLU: outputs, running
statistics and all three gradients agree to float32 rounding (float32) or to the output dtype's
last place (fp16 / bf16), it is deterministic, a CUDA graph of it replays the eager bits, and a
training `ConvBNAct` takes it (and leaves it for eval, an NCHW input or the switch off)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lucid_kernels import batch_norm_act, batch_norm_silu, batch_norm_silu_applies
from lucid_models import conv

pytestmark = pytest.mark.gpu

SHAPES = [(64, 32, 80, 80), (8, 16, 7, 5), (4, 96, 20, 20), (2, 512, 10, 10), (3, 3, 1, 1)]


def _case(shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator(device="cuda").manual_seed(seed)
    c = shape[1]
    x = torch.randn(shape, generator=g, device="cuda") * 3 + 2
    return {
        "x": x.to(dtype).contiguous(memory_format=torch.channels_last),
        "w": torch.rand(c, generator=g, device="cuda") + 0.5,
        "b": torch.randn(c, generator=g, device="cuda"),
        "rm": torch.randn(c, generator=g, device="cuda"),
        "rv": torch.rand(c, generator=g, device="cuda") + 0.5,
        "dz": torch.randn(shape, generator=g, device="cuda").to(dtype),
    }


def _run(case: dict[str, torch.Tensor], fused: bool) -> list[torch.Tensor]:
    x = case["x"].clone().requires_grad_()
    w, b = case["w"].clone().requires_grad_(), case["b"].clone().requires_grad_()
    rm, rv = case["rm"].clone(), case["rv"].clone()
    if fused:
        z = batch_norm_silu(x, w, b, rm, rv, 0.03, 1e-3)
    else:  # the reference in float32, as cuDNN accumulates
        z = F.silu(F.batch_norm(x.float(), rm, rv, w, b, True, 0.03, 1e-3)).to(x.dtype)
    z.backward(case["dz"])
    assert x.grad is not None and w.grad is not None and b.grad is not None
    return [z, rm, rv, x.grad, w.grad, b.grad]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_fused_batch_norm_silu_equals_torchs_two_operations(
    shape: tuple[int, ...], dtype: torch.dtype
) -> None:
    case = _case(shape, dtype)
    assert batch_norm_silu_applies(case["x"], case["w"], case["b"], case["rm"], case["rv"])
    ulp = {torch.float32: 2e-6, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
    names = ["z", "running_mean", "running_var", "grad_x", "grad_w", "grad_b"]
    for name, got, ref in zip(names, _run(case, True), _run(case, False), strict=True):
        assert got.dtype == ref.dtype and got.shape == ref.shape, name
        scale = ref.float().abs().max().clamp(min=1e-6)
        # outputs in the input dtype: one last place; statistics and parameter gradients float32
        tol = ulp if name in ("z", "grad_x") else 2e-5
        err = float((got.float() - ref.float()).abs().max() / scale)
        assert err <= tol, f"{name}: {err:.2e} > {tol:.0e} ({dtype}, {shape})"


@pytest.mark.parametrize("shape", [(8, 48, 20, 20), (4, 96, 7, 5), (2, 16, 1, 9)])
def test_a_channel_slice_gradient_is_read_in_place_with_the_copys_bits(
    shape: tuple[int, ...],
) -> None:
    """The gradient a concatenation hands back is a channel slice of a channels-last tensor:
    read at its row stride, it gives the bits of the same values copied dense (the one path
    before); an NCHW gradient still takes the copy."""
    case = _case(shape, torch.float16, seed=5)
    n, c, h, w = shape
    wide = torch.randn(n, c + 40, h, w, device="cuda").half()
    wide = wide.contiguous(memory_format=torch.channels_last)
    sliced = wide[:, 24 : 24 + c]
    assert batch_norm_act._row_stride(sliced) == c + 40
    assert batch_norm_act._row_stride(sliced.contiguous()) is None or h * w == 1
    in_place = _run({**case, "dz": sliced}, True)
    copied = _run({**case, "dz": sliced.contiguous(memory_format=torch.channels_last)}, True)
    assert all(torch.equal(a, b) for a, b in zip(in_place, copied, strict=True))


def test_fused_batch_norm_silu_is_deterministic_and_replays_its_eager_bits() -> None:
    case = _case((16, 64, 40, 40), torch.float16, seed=3)
    first, second = _run(case, True), _run(case, True)
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    x = case["x"].clone().requires_grad_()
    w, b = case["w"].clone().requires_grad_(), case["b"].clone().requires_grad_()
    rm, rv = case["rm"].clone(), case["rv"].clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up compiles the kernels before recording
        batch_norm_silu(x, w, b, rm.clone(), rv.clone(), 0.03, 1e-3).backward(case["dz"])
    torch.cuda.current_stream().wait_stream(stream)
    x.grad = w.grad = b.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        z = batch_norm_silu(x, w, b, rm, rv, 0.03, 1e-3)
        gx, gw, gb = torch.autograd.grad(z, (x, w, b), case["dz"])
    rm.copy_(case["rm"])
    rv.copy_(case["rv"])
    graph.replay()
    torch.cuda.synchronize()
    assert all(torch.equal(a, b) for a, b in zip([z, rm, rv, gx, gw, gb], first, strict=True))


def test_a_training_conv_unit_on_cuda_takes_the_fused_pair_and_eval_does_not() -> None:
    unit = conv.ConvBNAct(8, 32, 3).cuda().to(memory_format=torch.channels_last)
    x = torch.randn(4, 8, 24, 24, device="cuda").contiguous(memory_format=torch.channels_last)
    calls: list[int] = []
    original = conv.batch_norm_silu

    def counted(*args: object) -> torch.Tensor:
        calls.append(1)
        return original(*args)  # type: ignore[arg-type]

    conv.batch_norm_silu = counted  # type: ignore[assignment]
    try:
        twin = conv.ConvBNAct(8, 32, 3).cuda().to(memory_format=torch.channels_last)
        twin.load_state_dict(unit.state_dict())
        fused = unit(x)
        conv.FUSE_BN_SILU = False
        plain = twin(x)
        conv.FUSE_BN_SILU = True
        assert len(calls) == 1
        assert float((fused - plain).abs().max()) <= 1e-5 * float(plain.abs().max())
        for name in ("running_mean", "running_var", "num_batches_tracked"):
            a, b = getattr(unit.bn, name), getattr(twin.bn, name)
            assert torch.allclose(a.float(), b.float(), rtol=1e-5, atol=1e-7), name
        nchw = conv.ConvBNAct(8, 32, 3).cuda()  # NCHW weights and input: torch's pair
        nchw(x.contiguous())
        unit.eval()(x)  # eval: running statistics, torch's pair
        assert len(calls) == 1
    finally:
        conv.batch_norm_silu = original  # type: ignore[assignment]
        conv.FUSE_BN_SILU = True


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_fused_batch_norm_silu_on_a_device_other_than_the_current_one() -> None:
    case = {k: v.to("cuda:1") for k, v in _case((4, 32, 12, 12), torch.float16).items()}
    case["x"] = case["x"].contiguous(memory_format=torch.channels_last)
    with torch.cuda.device(0):
        got = _run(case, True)
    with torch.cuda.device(1):
        ref = _run(case, True)
    assert all(torch.equal(a, b) for a, b in zip(got, ref, strict=True))
