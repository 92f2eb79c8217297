"""Other people's models under lucid-capture: each trained eager and then recorded, same weights
and data, compared bit for bit (``benchmarks/capture_zoo.py``, ``test_zoo_parity_gpu.py``).

A zoo model is built by its own library (torchvision, timm, ``torch.nn``) as a user would build
it; nothing here changes its code. Each entry says how to build it, make a batch and score it, and
which parts a recorder wraps: the network always (``NetworkRecorder``), the loss too where it is a
separate module over padded targets (``LossRecorder``). The few small models at the end are
written here on purpose: each is the smallest model with one property that capture must refuse
(a host draw, a host sync, a private generator, a Python hook).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from lucid_capture import LossRecorder, NetworkRecorder, Reason
from lucid_capture.recorder import Recorder
from lucid_testing.capture_models import (
    PRECISIONS,
    bitwise_equal,
    collect_state,
    state_differences,
    strict_numerics,
)

Batch = tuple[tuple[Any, ...], tuple[Any, ...]]  # (network inputs, loss targets)
Loss = Callable[..., torch.Tensor]


@dataclass(frozen=True)
class ZooModel:
    """How to train one model: build it, make a batch, wrap and score it.

    ``network`` picks the module a ``NetworkRecorder`` wraps; ``loss(model)`` gives the loss over
    that module's output and the batch's targets; ``padded`` names the loss's padded target
    positions when a ``LossRecorder`` records it too (``capacity`` rows)."""

    name: str
    library: str
    build: Callable[[int], nn.Module]  # argument: the input size (pixels or tokens)
    batch: Callable[[int, int, torch.Generator], Batch]  # (batch size, input size, generator)
    loss: Callable[[nn.Module], Loss]
    parity_size: int = 64
    parity_batch: tuple[int, int] = (8, 5)  # full batches, and the partial last one
    speed_size: int = 224
    network: Callable[[nn.Module], nn.Module] = lambda model: model
    padded: tuple[int, ...] = ()
    capacity: int = 0
    loss_module: Callable[[nn.Module], nn.Module | None] = lambda model: None
    recorder_options: Callable[[nn.Module], dict[str, Any]] = lambda model: {}
    expect: Reason | None = None  # the reason every recorded call runs eager for, if any
    note: str = ""
    speed: bool = True


# -- torchvision and timm classifiers ----------------------------------------------------------


def _classes_batch(n: int, hw: int, g: torch.Generator) -> Batch:
    return (torch.randn(n, 3, hw, hw, generator=g),), (torch.randint(0, 10, (n,), generator=g),)


def _cross_entropy(model: nn.Module) -> Loss:
    return lambda logits, labels: F.cross_entropy(logits.float(), labels)


def _torchvision(name: str, **kwargs: Any) -> Callable[[int], nn.Module]:
    def build(hw: int) -> nn.Module:
        import torchvision

        return torchvision.models.get_model(name, weights=None, num_classes=10, **kwargs)

    return build


def _timm(name: str, image_size: bool = False, **kwargs: Any) -> Callable[[int], nn.Module]:
    def build(hw: int) -> nn.Module:
        import timm

        extra = {"img_size": hw} if image_size else {}
        model: nn.Module = timm.create_model(
            name, pretrained=False, num_classes=10, **extra, **kwargs
        )
        return model

    return build


# -- torchvision detection: per-image shapes, the loss inside the model -------------------------


def _fcos(hw: int) -> nn.Module:
    from torchvision.models.detection import fcos_resnet50_fpn

    return fcos_resnet50_fpn(
        weights=None, weights_backbone=None, num_classes=5, min_size=hw, max_size=hw + hw // 4
    )


def _detection_batch(n: int, hw: int, g: torch.Generator) -> Batch:
    images, targets = [], []
    for _ in range(n):
        h, w = (int(v) for v in torch.randint(hw * 3 // 4, hw + 1, (2,), generator=g))
        images.append(torch.rand(3, h, w, generator=g))
        count = int(torch.randint(1, 5, (), generator=g))
        xy = torch.rand(count, 2, generator=g) * torch.tensor([w * 0.6, h * 0.6])
        wh = 8 + torch.rand(count, 2, generator=g) * torch.tensor([w * 0.3, h * 0.3])
        boxes = torch.cat([xy, xy + wh], dim=1)
        labels = torch.randint(1, 5, (count,), generator=g)
        targets.append({"boxes": boxes, "labels": labels})
    return (images, targets), ()


def _sum_of_losses(model: nn.Module) -> Loss:
    return lambda losses: sum(v.float() for v in losses.values())


# -- a BERT-base encoder from torch.nn, its masked-token loss recorded over padded targets ------

VOCAB, MASKED = 30522, 24  # BERT's vocabulary; padded masked positions per sequence


class BertEncoder(nn.Module):
    """BERT-base in ``torch.nn`` parts: token and position embeddings, 12 post-norm layers of
    width 768 with 12 heads, GELU and dropout 0.1."""

    def __init__(self, tokens: int, width: int = 768, layers: int = 12, heads: int = 12) -> None:
        super().__init__()
        self.token = nn.Embedding(VOCAB, width)
        self.position = nn.Parameter(torch.randn(1, tokens, width) * 0.02)
        self.norm = nn.LayerNorm(width)
        self.dropout = nn.Dropout(0.1)
        layer = nn.TransformerEncoderLayer(
            width, heads, 4 * width, dropout=0.1, activation="gelu", batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.encoder(self.dropout(self.norm(self.token(ids) + self.position)))


class BertForMaskedTokens(nn.Module):
    def __init__(self, tokens: int) -> None:
        super().__init__()
        self.encoder = BertEncoder(tokens)
        self.head = nn.Sequential(nn.Linear(768, 768), nn.GELU(), nn.LayerNorm(768))
        self.decoder = nn.Linear(768, VOCAB)


def _masked_token_loss(model: nn.Module) -> Loss:
    """Cross-entropy at each sequence's masked positions, padded to ``MASKED`` rows with a
    validity mask. Positions are picked by a one-hot matmul, built by comparison: ``gather``'s
    backward adds with atomics, ``one_hot`` scatters."""

    def loss(
        hidden: torch.Tensor, positions: torch.Tensor, labels: torch.Tensor, valid: torch.Tensor
    ) -> torch.Tensor:
        tokens = torch.arange(hidden.shape[1], device=hidden.device)
        pick = (positions.unsqueeze(-1) == tokens).to(hidden.dtype)  # (B, K, T)
        logits = model.decoder(model.head(pick @ hidden)).float()  # (B, K, V)
        ce = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="none")
        mask = valid.flatten().float()
        return (ce * mask).sum() / mask.sum().clamp(min=1.0)

    return loss


def _heads(model: nn.Module) -> nn.Module:
    return nn.ModuleList([model.head, model.decoder])


def _masked_batch(n: int, tokens: int, g: torch.Generator) -> Batch:
    ids = torch.randint(0, VOCAB, (n, tokens), generator=g)
    positions = torch.zeros(n, MASKED, dtype=torch.long)
    labels = torch.zeros(n, MASKED, dtype=torch.long)
    valid = torch.zeros(n, MASKED, dtype=torch.bool)
    for i in range(n):  # a ragged count of masked tokens per sequence, as BERT's 15 % gives
        count = int(torch.randint(MASKED // 3, MASKED + 1, (), generator=g))
        picked = torch.randperm(tokens, generator=g)[:count]
        positions[i, :count], labels[i, :count], valid[i, :count] = picked, ids[i, picked], True
    return (ids,), (positions, labels, valid)


# -- the smallest models with one property capture must refuse ---------------------------------


class LayerDropEncoder(nn.Module):
    """Transformer layers skipped at random in training, decided on the host with
    ``torch.rand([])`` as Hugging Face's ``layerdrop`` does: data-dependent control flow that
    a graph would freeze at the recorded draw."""

    def __init__(self, width: int = 128, layers: int = 4, p: float = 0.3) -> None:
        super().__init__()
        self.embed = nn.Linear(16, width)
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(width, 4, 2 * width, dropout=0.1, batch_first=True)
            for _ in range(layers)
        )
        self.out = nn.Linear(width, 10)
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for layer in self.layers:
            if self.training and torch.rand([]) < self.p:
                continue
            h = layer(h)
        return self.out(h.mean(1))


class PythonLayerDrop(LayerDropEncoder):
    """The same, deciding with Python's ``random`` (fairseq's LayerDrop)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for layer in self.layers:
            if self.training and random.random() < self.p:
                continue
            h = layer(h)
        return self.out(h.mean(1))


class AdaptiveDepth(nn.Module):
    """An extra block applied when the features' norm is large: ``if tensor:`` reads a device
    value on the host (a sync) each call."""

    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(16, width), nn.GELU())
        self.extra = nn.Sequential(nn.Linear(width, width), nn.GELU())
        self.out = nn.Linear(width, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.body(x.flatten(1))
        if h.norm(dim=1).mean() > 2.0:
            h = h + self.extra(h)
        return self.out(h)


class PrivateGeneratorDropout(nn.Module):
    """Dropout drawn from the model's own CUDA generator (reproducible streams per module)."""

    def __init__(self, width: int = 64) -> None:
        super().__init__()
        self.inner = nn.Linear(16, width)
        self.out = nn.Linear(width, 10)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        self.generator = torch.Generator(device).manual_seed(1234)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.inner(x.flatten(1)))
        if self.training:
            keep = torch.empty_like(h).bernoulli_(0.8, generator=self.generator)
            h = h * keep / 0.8
        return self.out(h)


class WarmupHook:
    """A forward hook that ramps a block's output over the first calls: Python state that a
    replay would never advance."""

    def __init__(self, ramp: int = 10) -> None:
        self.calls, self.ramp = 0, ramp

    def __call__(self, module: nn.Module, args: Any, output: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return output * min(1.0, self.calls / self.ramp)


def _hooked_resnet18(hw: int) -> nn.Module:
    import torchvision

    model = torchvision.models.resnet18(weights=None, num_classes=10)
    model.layer4.register_forward_hook(WarmupHook())
    return model


def _vectors_batch(n: int, tokens: int, g: torch.Generator) -> Batch:
    return (torch.randn(n, tokens, 16, generator=g),), (torch.randint(0, 10, (n,), generator=g),)


def _own_generator(model: nn.Module) -> dict[str, Any]:
    return {"generators": [model.generator]}


ZOO: dict[str, ZooModel] = {
    m.name: m
    for m in [
        ZooModel("resnet50", "torchvision", _torchvision("resnet50"), _classes_batch,
                 _cross_entropy, note="BatchNorm"),
        ZooModel("convnext_tiny", "torchvision", _torchvision("convnext_tiny"), _classes_batch,
                 _cross_entropy, note="stochastic depth 0.1 (CUDA draws), LayerNorm"),
        ZooModel("mobilenet_v3_small", "torchvision", _torchvision("mobilenet_v3_small"),
                 _classes_batch, _cross_entropy, note="dropout 0.2, squeeze-excite, BatchNorm"),
        ZooModel("fcos_resnet50_fpn", "torchvision", _fcos, _detection_batch, _sum_of_losses,
                 parity_size=128, parity_batch=(2, 1), expect=Reason.CPU_TENSOR, speed=False,
                 note="detector, per-image sizes and box counts: its transform copies the "
                 "normalisation mean and std from Python lists to the GPU (then a host read, "
                 "`if degenerate_boxes.any()`, would refuse too)"),
        ZooModel("vit_small_patch16_224", "timm", _timm("vit_small_patch16_224", True,
                 drop_path_rate=0.1), _classes_batch, _cross_entropy,
                 note="stochastic depth 0.1 (drop_path)"),
        ZooModel("efficientnet_b0", "timm", _timm("efficientnet_b0", drop_rate=0.2,
                 drop_path_rate=0.2), _classes_batch, _cross_entropy,
                 note="dropout 0.2, stochastic depth 0.2, BatchNorm"),
        ZooModel("layerdrop_encoder", "torch.nn", lambda n: LayerDropEncoder(), _vectors_batch,
                 _cross_entropy, parity_size=32, expect=Reason.HOST_RNG, speed=False,
                 note="layers skipped by torch.rand([]) on the host (HF layerdrop)"),
        ZooModel("python_layerdrop", "torch.nn", lambda n: PythonLayerDrop(), _vectors_batch,
                 _cross_entropy, parity_size=32, expect=Reason.HOST_RNG, speed=False,
                 note="layers skipped by random.random() (fairseq LayerDrop)"),
        ZooModel("adaptive_depth", "torch.nn", lambda n: AdaptiveDepth(), _vectors_batch,
                 _cross_entropy, parity_size=1, expect=Reason.HOST_SYNC, speed=False,
                 note="`if h.norm() > t:` picks a branch from a device value"),
        ZooModel("private_generator", "torch.nn", lambda n: PrivateGeneratorDropout(),
                 _vectors_batch, _cross_entropy, parity_size=1,
                 expect=Reason.UNREGISTERED_RNG, speed=False,
                 note="dropout from the model's own torch.Generator, not handed to the recorder"),
        ZooModel("private_generator_registered", "torch.nn", lambda n: PrivateGeneratorDropout(),
                 _vectors_batch, _cross_entropy, parity_size=1, speed_size=1,
                 recorder_options=_own_generator,
                 note="the same, with NetworkRecorder(net, generators=[g])"),
        ZooModel("resnet18_python_hook", "torchvision", _hooked_resnet18, _classes_batch,
                 _cross_entropy, expect=Reason.HOOKS, speed=False,
                 note="a forward hook with Python state (an output ramp) on layer4"),
        ZooModel("bert_base_encoder", "torch.nn", BertForMaskedTokens, _masked_batch,
                 _masked_token_loss, parity_size=128, speed_size=128,
                 network=lambda m: m.encoder, padded=(1, 2, 3), capacity=MASKED,
                 loss_module=_heads,
                 note="BERT-base (110 M), dropout 0.1; masked-token loss over ragged targets "
                 "in a LossRecorder"),
    ]
}  # fmt: skip


# -- training ------------------------------------------------------------------------------------


def to_device(tree: Any, device: str | torch.device) -> Any:
    if isinstance(tree, torch.Tensor):
        return tree.to(device)
    if isinstance(tree, list | tuple):
        return type(tree)(to_device(v, device) for v in tree)
    if isinstance(tree, dict):
        return {k: to_device(v, device) for k, v in tree.items()}
    return tree


def autocast(precision: str) -> contextlib.AbstractContextManager[Any]:
    dtype = PRECISIONS[precision]
    return torch.autocast("cuda", dtype=dtype) if dtype else contextlib.nullcontext()


@dataclass
class Wrapped:
    """A model's network and loss as one training step calls them, with their recorders."""

    network: Callable[..., Any]
    loss: Loss
    recorders: list[Recorder] = field(default_factory=list)


def wrap(entry: ZooModel, model: nn.Module, capture: bool) -> Wrapped:
    network, loss = entry.network(model), entry.loss(model)
    if not capture:
        return Wrapped(network, loss)
    net_rec = NetworkRecorder(network, **entry.recorder_options(model))
    recorders: list[Recorder] = [net_rec]
    if entry.padded:
        loss_rec = LossRecorder(
            loss, capacity=entry.capacity, targets=entry.padded, module=entry.loss_module(model)
        )
        recorders.append(loss_rec)
        return Wrapped(net_rec, loss_rec, recorders)
    return Wrapped(net_rec, loss, recorders)


def objective(wrapped: Wrapped, batch: Batch) -> torch.Tensor:
    inputs, targets = batch
    return wrapped.loss(wrapped.network(*inputs), *targets)


@dataclass
class Run:
    state: dict[str, torch.Tensor] = field(default_factory=dict)
    losses: list[torch.Tensor] = field(default_factory=list)
    scales: list[float] = field(default_factory=list)
    summaries: list[str] = field(default_factory=list)
    eager: dict[str, int] = field(default_factory=dict)
    replays: int = 0


@contextlib.contextmanager
def parity_numerics() -> Iterator[None]:
    """TF32 off, deterministic cuDNN and deterministic algorithms (warn only): eager must be
    reproducible before a replay can be compared with it bit for bit."""
    was = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        with strict_numerics():
            yield
    finally:
        torch.use_deterministic_algorithms(was, warn_only=warn_only)


def sizes_for(full: int, partial: int, steps: int = 6) -> list[int]:
    """``steps`` batches, the last one partial (a dataset that does not divide by the batch)."""
    return [full] * (steps - 1) + [partial]


def train(
    entry: ZooModel,
    *,
    capture: bool,
    precision: str = "32-true",
    accumulate: int = 1,
    sizes: Sequence[int] | None = None,
    device: str = "cuda",
    math_attention: bool = False,
) -> Run:
    """A plain PyTorch loop: autocast forward and loss, (scaled) backward, AdamW step every
    ``accumulate`` batches and after the last; the whole state is kept before every step.

    ``sizes`` defaults to five full batches and a partial last one (``parity_batch``).
    ``math_attention`` pins scaled-dot-product attention to its math kernel, for a model whose
    fused attention backward is not reproducible in eager."""
    if sizes is None:
        sizes = sizes_for(*entry.parity_batch)
    attention: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    if math_attention:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        attention = sdpa_kernel(SDPBackend.MATH)
    with parity_numerics(), attention:
        torch.manual_seed(0)
        torch.cuda.manual_seed_all(0)
        random.seed(0)
        with torch.device(device):  # initialised where it trains: fast for BERT-sized models
            model = entry.build(entry.parity_size).to(device)
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
        scaler = (
            torch.amp.GradScaler("cuda", init_scale=2.0**14) if precision == "16-mixed" else None
        )
        wrapped = wrap(entry, model, capture)
        g = torch.Generator().manual_seed(1)
        batches = [to_device(entry.batch(n, entry.parity_size, g), device) for n in sizes]
        run = Run()
        optimizer.zero_grad(set_to_none=True)
        for i, batch in enumerate(batches):
            with autocast(precision):
                loss = objective(wrapped, batch) / accumulate
            run.losses.append(loss.detach().clone())
            (scaler.scale(loss) if scaler is not None else loss).backward()
            if (i + 1) % accumulate == 0 or i == len(batches) - 1:
                step = len(run.scales)
                for key, value in collect_state(model, optimizer, scaler).items():
                    run.state[f"step{step}/{key}"] = value
                if scaler is not None:
                    scaler.step(optimizer)
                    scaler.update()
                    run.scales.append(scaler.get_scale())
                else:
                    optimizer.step()
                    run.scales.append(1.0)
                optimizer.zero_grad(set_to_none=True)
        for key, value in collect_state(model, optimizer, scaler).items():
            run.state[f"end/{key}"] = value
        for recorder in wrapped.recorders:
            run.summaries.append(recorder.summary())
            for reason, count in recorder.stats.eager.items():
                run.eager[reason.value] = run.eager.get(reason.value, 0) + count
            run.replays += recorder.stats.replays
            recorder.release()
        return run


def differences(a: Run, b: Run) -> list[str]:
    """What differs in any bit between two runs: state tensors, losses, scaler scales."""
    diffs = state_differences(a.state, b.state)
    if len(a.losses) != len(b.losses):
        diffs.append("loss count")
    diffs += [
        f"loss{i}"
        for i, (x, y) in enumerate(zip(a.losses, b.losses, strict=False))
        if not bitwise_equal(x, y)
    ]
    if a.scales != b.scales:
        diffs.append("scaler scales")
    return diffs
