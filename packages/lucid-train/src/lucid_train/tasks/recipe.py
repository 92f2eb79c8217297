"""The optimizer recipe of a run: the authors' ``optimizer=auto`` rule, groups and schedule.

``auto`` picks MuSGD (lr 0.01, momentum 0.9) only when the run is long,
``ceil(num_images / max(batch_size, nbs)) * epochs > 10000`` optimizer iterations; otherwise
AdamW with ``lr = round(0.002 * 5 / (4 + num_classes), 6)`` and betas ``(0.9, 0.999)``, and the
bias warm-up starts at 0 (assumptions.md T50). The groups and the warm-up + linear schedule are
`lucid_train.optim`'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from lucid_train.errors import check_range
from lucid_train.optim import MuSGD, WarmupLinear, WarmupLinearLR, param_groups

__all__ = [
    "AUTO_MUSGD_ITERATIONS",
    "OptimizerChoice",
    "OptimizerConfig",
    "build_optimizer",
    "build_schedule",
    "choose_optimizer",
    "unused_by_auto",
]

AUTO_MUSGD_ITERATIONS = 10_000
OptimizerName = Literal["auto", "MuSGD", "AdamW", "SGD"]


@dataclass(frozen=True)
class OptimizerConfig:
    """What the user asked for (the module's hyper-parameters).

    Attributes:
        optimizer: ``auto``, ``MuSGD``, ``AdamW`` or ``SGD``.
        lr0: initial learning rate; None: the rule's (auto) or 0.01 (AdamW: 0.001).
        lrf: final learning rate as a fraction of lr0.
        momentum: SGD momentum / Adam beta1 after warm-up (authors 0.937).
        weight_decay: decay per nominal batch.
        warmup_epochs, warmup_momentum: warm-up length and starting momentum.
        warmup_bias_lr: starting lr of the bias group; None: 0 for ``auto``, else 0.1.
        nbs: nominal batch size.
    """

    optimizer: OptimizerName = "auto"
    lr0: float | None = None
    lrf: float = 0.01
    momentum: float = 0.937
    weight_decay: float = 5e-4
    warmup_epochs: float = 3.0
    warmup_momentum: float = 0.8
    warmup_bias_lr: float | None = None
    nbs: int = 64

    def __post_init__(self) -> None:
        # each refused before a step runs, naming its flag (torch would say "beta" or divide by 0)
        def check(name: str, **bounds: float | bool) -> None:
            check_range(name, getattr(self, name), flag=f"--model.{name}", **bounds)  # type: ignore[arg-type]

        check("lr0", low=0.0, low_open=True)
        check("lrf", low=0.0)
        check("momentum", low=0.0, high=1.0, high_open=True)
        check("weight_decay", low=0.0)
        check("warmup_epochs", low=0.0)
        check("warmup_momentum", low=0.0, high=1.0, high_open=True)
        check("warmup_bias_lr", low=0.0)
        check("nbs", low=1.0)


@dataclass(frozen=True)
class OptimizerChoice:
    """The resolved optimizer: ``name``, ``lr`` and the optimizer's own ``momentum``."""

    name: Literal["MuSGD", "AdamW", "SGD"]
    lr: float
    momentum: float


def choose_optimizer(
    config: OptimizerConfig, *, num_classes: int, num_images: int, batch_size: int, epochs: int
) -> OptimizerChoice:
    """Resolve ``auto`` with the authors' rule; explicit names keep ``lr0`` (default 0.01)."""
    if config.optimizer == "auto":
        iterations = math.ceil(num_images / max(batch_size, config.nbs)) * epochs
        if iterations > AUTO_MUSGD_ITERATIONS:
            return OptimizerChoice("MuSGD", 0.01, 0.9)
        return OptimizerChoice("AdamW", round(0.002 * 5 / (4 + num_classes), 6), 0.9)
    default = 0.001 if config.optimizer == "AdamW" else 0.01
    lr = config.lr0 if config.lr0 is not None else default
    return OptimizerChoice(config.optimizer, lr, config.momentum)


def unused_by_auto(config: OptimizerConfig) -> list[str]:
    """The flags ``optimizer=auto`` sets aside, given away from their defaults: it picks the
    learning rate and momentum itself, as the authors' ``optimizer=auto`` does."""
    if config.optimizer != "auto":
        return []
    unused = [] if config.lr0 is None else [f"--model.lr0 {config.lr0:g}"]
    if config.momentum != OptimizerConfig.momentum:
        unused.append(f"--model.momentum {config.momentum:g}")
    return unused


def build_optimizer(
    model: nn.Module,
    config: OptimizerConfig,
    choice: OptimizerChoice,
    *,
    batch_size: int,
    accumulate: int,
) -> torch.optim.Optimizer:
    """The optimizer over the authors' parameter groups of ``model`` (pass the LightningModule,
    so trainable loss parts such as the pose flow are included)."""
    lr = choice.lr
    muon = choice.name == "MuSGD"
    groups = param_groups(
        model,
        lr=lr,
        weight_decay=config.weight_decay,
        batch_size=batch_size,
        accumulate=accumulate,
        nbs=config.nbs,
        use_muon=muon,
    )
    if muon:
        return MuSGD(groups, lr=lr, momentum=choice.momentum, nesterov=True)
    # On CUDA AdamW is fused: its step skips itself on the device when the GradScaler (or the
    # non-finite guard) flags the gradients, so no optimizer step reads the GPU on the host
    # (`LucidModule.configure_gradient_clipping` unscales before clipping, which Lightning
    # will not do for such an optimizer). SGD is multi-tensor (foreach) on CUDA. The CPU keeps
    # torch's per-tensor loop. Each said here, not left to torch's defaults (assumptions T66).
    cuda = _on_cuda(model)
    if choice.name == "AdamW":
        kind: dict[str, bool] = {"fused": True} if cuda else {"foreach": False}
        return torch.optim.AdamW(
            groups, lr=lr, betas=(choice.momentum, 0.999), weight_decay=0.0, **kind
        )
    return torch.optim.SGD(groups, lr=lr, momentum=choice.momentum, nesterov=True, foreach=cuda)


def _on_cuda(model: nn.Module) -> bool:
    return all(p.is_cuda for p in model.parameters())


def build_schedule(
    optimizer: torch.optim.Optimizer,
    config: OptimizerConfig,
    *,
    steps_per_epoch: int,
    epochs: int,
) -> WarmupLinearLR:
    """Warm-up then linear decay, stepped once per optimizer step."""
    bias = config.warmup_bias_lr
    if bias is None:
        bias = 0.0 if config.optimizer == "auto" else 0.1
    schedule = WarmupLinear(
        steps_per_epoch=steps_per_epoch,
        epochs=epochs,
        warmup_epochs=config.warmup_epochs,
        lrf=config.lrf,
        warmup_bias_lr=bias,
        warmup_momentum=config.warmup_momentum,
        momentum=config.momentum,
    )
    return WarmupLinearLR(optimizer, schedule)
