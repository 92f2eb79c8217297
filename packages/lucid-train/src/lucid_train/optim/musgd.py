"""MuSGD: a Muon update plus an SGD update for matrices, plain Nesterov SGD for everything else.

Per parameter ``W`` with gradient ``g``, learning rate ``lr`` and momentum ``mu`` of its group:

``use_muon`` groups (2-D and 4-D weights), in this order::

    m   <- mu * m + (1 - mu) * g                      # the Muon buffer, an average
    u   <- mu * m + (1 - mu) * g   (Nesterov; else m)
    O   <- NS5(u viewed as (rows, prod(rest)))         # newton_schulz.orthogonalize
    W   <- W - lr * muon * sqrt(max(1, W.shape[-2] / W.shape[-1])) * O
    d   <- g + weight_decay * W                       # W already moved by the Muon part
    b   <- mu * b + d                                 # the SGD buffer, a sum
    W   <- W - lr * sgd * (d + mu * b)  (Nesterov; else b)

other groups: the last three lines with ``lr`` in place of ``lr * sgd``.

This is the authors' MuSGD (Ultralytics 8.4 ``optim/muon.py``) as a fact-level re-implementation:
the two buffers, the order, and the scale taken from the parameter's last two dimensions (1 for
square conv kernels) are theirs (assumptions.md T41); Newton–Schulz runs in float32 (float64 kept)
instead of bfloat16 (T40). ``muon`` and ``sgd`` are per-group hyper-parameters here (defaults 0.2
and 1.0, the authors' values), so they travel in ``state_dict``.

Protocol: ``step(closure)`` evaluates the closure under ``torch.enable_grad`` first (Lightning's
automatic optimisation passes one); parameters whose ``grad`` is ``None`` are skipped and get no
state; it works under ``torch.amp.GradScaler`` like any optimizer without its own unscaling.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.optim.optimizer import Optimizer, ParamsT

from lucid_train.optim.newton_schulz import NS_STEPS, orthogonalize

__all__ = ["MuSGD", "muon_scale"]


def muon_scale(shape: torch.Size | tuple[int, ...]) -> float:
    """``sqrt(max(1, shape[-2] / shape[-1]))``: the authors' Muon scale (assumptions.md T41).

    Read from the parameter's own last two dimensions, so ``(out, in)`` matrices get
    ``sqrt(max(1, out / in))`` and ``(out, in, k, k)`` kernels get 1.
    """
    return math.sqrt(max(1.0, shape[-2] / shape[-1]))


class MuSGD(Optimizer):
    """Muon + SGD for ``use_muon`` groups, Nesterov SGD for the others.

    Args:
        params: parameters or groups; a group sets ``use_muon=True`` for its matrices (see
            :func:`lucid_train.optim.param_groups`).
        lr: learning rate (the authors' lr0 0.01).
        momentum: ``mu`` for both buffers, in [0, 1).
        weight_decay: L2 added to the SGD part's gradient (never to the Muon part).
        nesterov: Nesterov look-ahead for both parts.
        use_muon: default for groups that do not say.
        muon: Muon part's share of ``lr`` (authors: 0.2).
        sgd: SGD part's share of ``lr`` in ``use_muon`` groups (authors: 1.0).
        ns_steps: Newton–Schulz iterations (authors: 5).

    State per parameter: ``momentum_buffer`` (the SGD sum) and, in ``use_muon`` groups,
    ``muon_buffer`` (the Muon average); both shaped like the parameter.
    """

    def __init__(
        self,
        params: ParamsT,
        lr: float = 0.01,
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        nesterov: bool = True,
        *,
        use_muon: bool = False,
        muon: float = 0.2,
        sgd: float = 1.0,
        ns_steps: int = NS_STEPS,
    ) -> None:
        if not (math.isfinite(lr) and lr >= 0.0):
            raise ValueError(f"lr must be finite and >= 0, got {lr}")
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}")
        if not (math.isfinite(weight_decay) and weight_decay >= 0.0):
            raise ValueError(f"weight_decay must be finite and >= 0, got {weight_decay}")
        for name, value in (("muon", muon), ("sgd", sgd)):
            if not (math.isfinite(value) and value >= 0.0):
                raise ValueError(f"{name} must be finite and >= 0, got {value}")
        if ns_steps < 1:
            raise ValueError(f"ns_steps must be >= 1, got {ns_steps}")
        defaults: dict[str, Any] = {
            "lr": lr,
            "momentum": momentum,
            "weight_decay": weight_decay,
            "nesterov": nesterov,
            "use_muon": use_muon,
            "muon": muon,
            "sgd": sgd,
            "ns_steps": ns_steps,
        }
        super().__init__(params, defaults)
        for group in self.param_groups:
            if group["use_muon"]:
                flat = [tuple(p.shape) for p in group["params"] if p.ndim < 2]
                if flat:
                    raise ValueError(
                        f"a use_muon group holds only matrices (ndim >= 2); got shapes {flat}"
                    )

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One update of every parameter that has a gradient.

        Args:
            closure: re-evaluates the loss (forward and backward); called under
                ``torch.enable_grad`` before the update.

        Returns:
            The closure's return value, or ``None``.
        """
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        with torch.no_grad():
            for group in self.param_groups:
                params = [p for p in group["params"] if p.grad is not None]
                if not params:
                    continue
                grads: list[Tensor] = [p.grad for p in params if p.grad is not None]
                if any(g.is_sparse for g in grads):
                    raise RuntimeError("MuSGD does not support sparse gradients")
                lr = float(group["lr"])
                if group["use_muon"]:
                    self._muon_part(group, params, grads)
                    lr *= float(group["sgd"])
                self._sgd_part(group, params, grads, lr)
        return loss

    def _buffers(self, params: list[Tensor], key: str) -> list[Tensor]:
        buffers = []
        for p in params:
            state = self.state[p]
            if key not in state:
                state[key] = torch.zeros_like(p, memory_format=torch.preserve_format)
            buffers.append(state[key])
        return buffers

    def _muon_part(self, group: dict[str, Any], params: list[Tensor], grads: list[Tensor]) -> None:
        mu = float(group["momentum"])
        buffers = self._buffers(params, "muon_buffer")
        torch._foreach_mul_(buffers, mu)
        torch._foreach_add_(buffers, grads, alpha=1.0 - mu)
        if group["nesterov"]:
            updates = list(torch._foreach_mul(buffers, mu))
            torch._foreach_add_(updates, grads, alpha=1.0 - mu)
        else:
            updates = buffers  # read only below
        # Matrices of one shape, dtype and device share one batched Newton–Schulz call: fewer
        # kernel launches; each matrix is still orthogonalised on its own (no padding).
        batches: dict[tuple[torch.Size, torch.dtype, torch.device], list[int]] = {}
        matrices = [u.reshape(u.shape[0], -1) for u in updates]
        for i, m in enumerate(matrices):
            batches.setdefault((m.shape, m.dtype, m.device), []).append(i)
        step = -float(group["lr"]) * float(group["muon"])
        for indices in batches.values():
            stacked = torch.stack([matrices[i] for i in indices])
            orthogonal = orthogonalize(stacked, steps=int(group["ns_steps"]))
            for j, i in enumerate(indices):
                p = params[i]
                p.add_(orthogonal[j].reshape(p.shape), alpha=step * muon_scale(p.shape))

    def _sgd_part(
        self, group: dict[str, Any], params: list[Tensor], grads: list[Tensor], lr: float
    ) -> None:
        mu = float(group["momentum"])
        decay = float(group["weight_decay"])
        steps = grads if decay == 0.0 else list(torch._foreach_add(grads, params, alpha=decay))
        buffers = self._buffers(params, "momentum_buffer")
        torch._foreach_mul_(buffers, mu)
        torch._foreach_add_(buffers, steps)
        updates = (
            list(torch._foreach_add(steps, buffers, alpha=mu)) if group["nesterov"] else buffers
        )
        torch._foreach_add_(params, updates, alpha=-lr)
