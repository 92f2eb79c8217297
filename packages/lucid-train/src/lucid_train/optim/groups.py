"""Parameter groups for MuSGD, the authors' way, and the nominal-batch arithmetic behind them.

Each trainable parameter goes to the first group that fits (Ultralytics 8.4 ``build_optimizer``)::

    muon     2-D and 4-D tensors (linear and conv weights)     decay, use_muon   (use_muon only)
    bias     names containing "bias"                            no decay
    bn       weights of normalisation layers (any *Norm* type)  no decay
    weight   everything else                                    decay

With ``use_muon`` every group is then split in two: the head's class branches (``cls`` of both
branches) and the segmentation semantic head get ``class_lr_scale`` (3x) the learning rate, as the
authors boost ``cv3``, ``one2one_cv3`` and ``proto.semseg`` (assumptions.md T45). Empty groups are
dropped. Every group carries ``param_group`` (its name above); the warm-up finds the biases by it.
"""

from __future__ import annotations

from typing import Any, Final

from torch import Tensor, nn

from lucid_models.heads import Head

__all__ = [
    "CLASS_LR_SCALE",
    "NOMINAL_BATCH",
    "boosted_parameters",
    "nominal_accumulation",
    "param_groups",
    "scaled_weight_decay",
]

NOMINAL_BATCH: Final = 64
CLASS_LR_SCALE: Final = 3.0
_NORM_TYPES: Final = tuple(
    v
    for k, v in vars(nn).items()
    if "Norm" in k and isinstance(v, type) and issubclass(v, nn.Module)
)
_ORDER: Final = ("weight", "bn", "bias", "muon")


def nominal_accumulation(batch_size: int, nbs: int = NOMINAL_BATCH) -> int:
    """Batches per optimizer step that make a nominal batch: ``max(round(nbs / batch_size), 1)``.

    ``batch_size`` is the global batch (per-device batch x devices). The authors also cap it at the
    run's total batch count and ramp it from 1 during warm-up; Lightning keeps it fixed
    (assumptions.md T44).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    return max(round(nbs / batch_size), 1)


def scaled_weight_decay(
    weight_decay: float, batch_size: int, accumulate: int, nbs: int = NOMINAL_BATCH
) -> float:
    """``weight_decay * batch_size * accumulate / nbs``: the authors' nominal-batch scaling.

    ``batch_size`` is global, ``accumulate`` the batches per optimizer step actually used.
    """
    return weight_decay * batch_size * accumulate / nbs


def boosted_parameters(model: nn.Module) -> set[int]:
    """``id`` of every parameter trained at ``class_lr_scale``: both class branches of every
    :class:`lucid_models.heads.Head` in ``model`` and its semantic head (segmentation)."""
    boosted: set[int] = set()
    for module in model.modules():
        if isinstance(module, Head):
            parts: list[nn.Module | None] = [
                module.one2many.cls,
                module.one2one.cls,
                module.semantic,
            ]
            boosted.update(id(p) for part in parts if part is not None for p in part.parameters())
    return boosted


def _kind(module: nn.Module, name: str, param: Tensor, use_muon: bool) -> str:
    if use_muon and param.ndim in (2, 4):
        return "muon"
    if "bias" in name:
        return "bias"
    if isinstance(module, _NORM_TYPES):
        return "bn"
    return "weight"


def param_groups(
    model: nn.Module,
    *,
    lr: float = 0.01,
    weight_decay: float = 5e-4,
    batch_size: int,
    accumulate: int,
    nbs: int = NOMINAL_BATCH,
    use_muon: bool = True,
    class_lr_scale: float = CLASS_LR_SCALE,
) -> list[dict[str, Any]]:
    """The authors' groups of ``model``'s trainable parameters, for :class:`MuSGD`.

    Args:
        model: the module to train; pass the module that also holds trainable loss parts (the
            pose flow), as the authors keep the flow in the head.
        lr: base learning rate (lr0).
        weight_decay: decay per nominal batch (the authors' 5e-4); the groups with decay get
            :func:`scaled_weight_decay` of it.
        batch_size: global batch size.
        accumulate: batches per optimizer step (Lightning's ``accumulate_grad_batches``).
        nbs: nominal batch size.
        use_muon: build the ``muon`` group and the class-branch boost (the authors do both only
            for MuSGD); ``False`` gives the three SGD/AdamW groups.
        class_lr_scale: learning-rate factor of the boosted parameters.

    Returns:
        Groups in the authors' order (weight, bn, bias, muon; boosted half first when split), each
        ``{"params", "lr", "weight_decay", "use_muon", "param_group"}``; momentum and Nesterov come
        from the optimizer's defaults. Frozen and repeated parameters are left out.
    """
    decay = scaled_weight_decay(weight_decay, batch_size, accumulate, nbs)
    buckets: dict[str, list[nn.Parameter]] = {kind: [] for kind in _ORDER}
    seen: set[int] = set()
    for module_name, module in model.named_modules():
        for param_name, param in module.named_parameters(recurse=False):
            if not param.requires_grad or id(param) in seen:
                continue
            seen.add(id(param))
            name = f"{module_name}.{param_name}" if module_name else param_name
            buckets[_kind(module, name, param, use_muon)].append(param)
    boosted = boosted_parameters(model) if use_muon else set()
    groups: list[dict[str, Any]] = []
    for kind in _ORDER:
        settings = {
            "weight_decay": decay if kind in ("weight", "muon") else 0.0,
            "use_muon": kind == "muon",
            "param_group": kind,
        }
        fast = [p for p in buckets[kind] if id(p) in boosted]
        rest = [p for p in buckets[kind] if id(p) not in boosted]
        for params, group_lr in ((fast, lr * class_lr_scale), (rest, lr)):
            if params:
                groups.append({"params": params, "lr": group_lr, **settings})
    return groups
