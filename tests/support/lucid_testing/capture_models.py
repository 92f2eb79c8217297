"""Generic models and a training harness for the capture parity suite (torch only).

Nothing here knows YOLO: these are the shapes of model another project would record.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


class ConvBNNet(nn.Module):
    """Conv-BN-SiLU stages, optionally the float32 attention block, and two heads (cls, box)."""

    def __init__(self, attention: bool = False, width: int = 16) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 3, 2, 1, bias=False), nn.BatchNorm2d(width), nn.SiLU()
        )
        self.stage = nn.Sequential(
            nn.Conv2d(width, 2 * width, 3, 2, 1, bias=False), nn.BatchNorm2d(2 * width), nn.SiLU()
        )
        self.attn: nn.Module = nn.Identity()
        if attention:
            from lucid_testing.attention_block import SpatialAttention

            self.attn = SpatialAttention(2 * width, num_heads=1)
        self.cls = nn.Conv2d(2 * width, 4, 1)
        self.box = nn.Conv2d(2 * width, 4, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        f = self.attn(self.stage(self.stem(x)))
        return self.cls(f), self.box(f)


class DropoutNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Dropout(0.3), nn.Linear(64, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


class AttentionDropoutNet(nn.Module):
    """Self-attention with dropout on PyTorch's memory-efficient kernel (pinned: float32 takes it
    unpinned too), whose backward reads the dropout seed its forward saved: a host scalar in
    eager, a device tensor under capture. 32 tokens: one key block, so its backward is
    deterministic (more blocks may be split and summed with atomics)."""

    def __init__(self, width: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
            a = F.scaled_dot_product_attention(q, k, v, dropout_p=0.2 if self.training else 0.0)
        return self.out(a.transpose(1, 2).reshape(b, t, c))


@dataclass
class TwoOutputs:
    main: torch.Tensor
    aux: torch.Tensor


class TwoOutputNet(nn.Module):
    """Two branches with parameters of their own; a loss that reads only ``main`` leaves ``aux``'s
    parameters at ``None`` in eager."""

    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.Linear(16, 32)
        self.main = nn.Linear(32, 4)
        self.aux = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> TwoOutputs:
        h = torch.relu(self.trunk(x))
        return TwoOutputs(self.main(h), self.aux(h))


class _HandWrittenLinear(torch.autograd.Function):
    """A user's Function whose backward runs matmuls: autocast there would change their dtype."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        return x @ weight.t()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, weight = ctx.saved_tensors
        grad = grad.to(weight.dtype)
        return (grad @ weight).to(x.dtype), grad.t() @ x.to(weight.dtype)


class CustomBackwardNet(nn.Module):
    """Eager ``backward()`` runs this Function's matmuls in float32 (autocast is off there); a
    backward recorded under autocast would run them in half precision (DESIGN §3 rule 4)."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(16, 32)
        self.weight = nn.Parameter(torch.randn(8, 32) / 32**0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _HandWrittenLinear.apply(torch.tanh(self.inner(x)), self.weight)


class _CheckedOnHost(torch.autograd.Function):
    """Identity whose backward reads a device value on the host: fine eagerly, refused by a
    CUDA graph capture (the recorder must finish that backward eagerly and stop replaying)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        if not bool(torch.isfinite(grad).all()):
            raise FloatingPointError("non-finite gradient")
        return grad


class HostCheckedNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(16, 32)
        self.outer = nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.outer(_CheckedOnHost.apply(torch.tanh(self.inner(x))))


class HostCheckedAttentionNet(AttentionDropoutNet):
    """``AttentionDropoutNet`` with ``_CheckedOnHost`` after the attention: its backward cannot
    be recorded, and finishing it eagerly over the captured forward would read a device seed on
    the host."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _CheckedOnHost.apply(super().forward(x))


class FlatHeadNet(nn.Module):
    """A detection-style head: a biased conv whose output leaves as the transposed view
    ``(B, H*W, C)``. A loss that reshapes it hands back a gradient whose strides differ from the
    output's, and eager sums the bias gradient over exactly that layout (capture rule 9)."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 2, 1, bias=False), nn.BatchNorm2d(width))
        self.head = nn.Conv2d(width, 8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.silu(self.stem(x))).flatten(2).transpose(1, 2)


class OffsetHeadNet(FlatHeadNet):
    """``FlatHeadNet`` plus a broadcast per-channel offset: autograd sums the offset's gradient
    over the incoming gradient in the layout it arrives in, with no copy first, so two layouts
    of the same values can give different bits (the case rule 9 exists for)."""

    def __init__(self, width: int = 16) -> None:
        super().__init__(width)
        self.offset = nn.Parameter(torch.zeros(1, 8, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.head(F.silu(self.stem(x))) + self.offset
        return out.flatten(2).transpose(1, 2)


MODELS: dict[str, Callable[[], nn.Module]] = {
    "convbn": lambda: ConvBNNet(attention=False),
    "convbn_attention": lambda: ConvBNNet(attention=True),
    "dropout": DropoutNet,
    "attention_dropout": AttentionDropoutNet,
    "two_outputs": TwoOutputNet,
    "custom_backward": CustomBackwardNet,
    "flat_head": FlatHeadNet,
    "offset_head": OffsetHeadNet,
    "host_checked": HostCheckedNet,
    "host_checked_attention": HostCheckedAttentionNet,
}


def batches(model: str, sizes: Sequence[int], seed: int = 0, hw: int = 32) -> list[torch.Tensor]:
    """Deterministic CPU inputs for ``model``, one per batch size in ``sizes``."""
    g = torch.Generator().manual_seed(seed)
    if model.startswith("convbn") or model.endswith("_head"):
        return [torch.randn(n, 3, hw, hw, generator=g) for n in sizes]
    if model.endswith("attention") or model == "attention_dropout":
        return [torch.randn(n, 32, 32, generator=g) for n in sizes]
    width = 32 if model == "dropout" else 16
    return [torch.randn(n, width, generator=g) for n in sizes]


def loss_of(output: Any) -> torch.Tensor:
    """A loss reading every output (see ``main_only_loss`` for the other case)."""
    if isinstance(output, TwoOutputs):
        return output.main.float().square().mean() + output.aux.float().abs().mean()
    if isinstance(output, tuple):
        cls, box = output
        return F.softplus(cls.float()).mean() + box.float().square().mean()
    return output.float().square().mean()


def reshaped_loss(output: torch.Tensor) -> torch.Tensor:
    """Reads a ``(B, A, C)`` view through a reshape (a copy), so its gradient arrives contiguous
    in ``(B, A, C)`` order whatever the output's own strides."""
    flat = output.reshape(len(output), -1).float()
    return (flat - 0.1).square().mean()


def transposed_loss(output: torch.Tensor) -> torch.Tensor:
    """Reads a ``(B, A, C)`` transposed view back as ``(B, C, A)``: its gradient arrives in the
    output's own strides (``reshaped_loss`` hands back another layout)."""
    return (output.transpose(1, 2).float() - 0.1).square().mean()


def sum_loss(output: Any) -> torch.Tensor:
    """``sum()`` hands back an expanded (stride-0) gradient."""
    parts = output if isinstance(output, tuple) else (output,)
    return sum((p.float().sum() for p in parts), torch.zeros((), device=parts[0].device))


def main_only_loss(output: TwoOutputs) -> torch.Tensor:
    return output.main.float().square().mean()


@contextlib.contextmanager
def strict_numerics() -> Iterator[None]:
    """TF32 off and deterministic cuDNN, restored after (a float32 claim is a float32 claim)."""
    saved = (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
    )
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    try:
        yield
    finally:
        (
            torch.backends.cuda.matmul.allow_tf32,
            torch.backends.cudnn.allow_tf32,
            torch.backends.cudnn.deterministic,
            torch.backends.cudnn.benchmark,
        ) = saved


PRECISIONS = {"32-true": None, "16-mixed": torch.float16, "bf16-mixed": torch.bfloat16}


@dataclass
class RunResult:
    state: dict[str, torch.Tensor] = field(default_factory=dict)
    losses: list[torch.Tensor] = field(default_factory=list)
    scales: list[float] = field(default_factory=list)


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same dtype, shape and bits (NaN payloads and signed zeros included)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(_bytes(a), _bytes(b))


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.detach().reshape(-1).contiguous().view(torch.uint8)


def state_differences(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> list[str]:
    """Names whose tensors differ in any bit, or that exist in one state only."""
    diffs = sorted(set(a) ^ set(b))
    diffs += [k for k in sorted(set(a) & set(b)) if not bitwise_equal(a[k], b[k])]
    return diffs


def collect_state(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler | None,
) -> dict[str, torch.Tensor]:
    """Weights, gradients (``None`` recorded as absent), optimizer state, scaler, buffers."""
    state: dict[str, torch.Tensor] = {}
    for name, p in model.named_parameters():
        state[f"param/{name}"] = p.detach().clone()
        if p.grad is not None:
            state[f"grad/{name}"] = p.grad.detach().clone()
    for name, b in model.named_buffers():
        state[f"buffer/{name}"] = b.detach().clone()
    names = {id(p): n for n, p in model.named_parameters()}
    for i, (p, s) in enumerate(optimizer.state.items()):
        owner = names.get(id(p), f"not-in-model-{i}")  # e.g. after load_state_dict(assign=True)
        for key, value in s.items():
            if isinstance(value, torch.Tensor):
                state[f"optim/{owner}/{key}"] = value.detach().clone()
    if scaler is not None:
        for key, value in scaler.state_dict().items():
            state[f"scaler/{key}"] = torch.tensor(value, dtype=torch.float64)
    return state
