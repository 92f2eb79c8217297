"""MuSGD against Nesterov SGD on a small teacher-student regression: the CPU toy golden.

A 16-64-64-4 tanh MLP learns a fixed random 16-32-4 tanh teacher on 256 points, full batch, with
the authors' lr0 0.01, momentum 0.9 (Nesterov) and weight decay 5e-4 (:func:`param_groups` with
a nominal batch, so unscaled). The two runs differ only in the optimizer::

    python -m lucid_train.optim.toy                       # print both final losses
    python -m lucid_train.optim.toy --write goldens/train/musgd_vs_sgd_toy.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Final, Literal

import torch
from torch import Tensor, nn

from lucid_train.optim.groups import param_groups
from lucid_train.optim.musgd import MuSGD

__all__ = ["TOY_STEPS", "toy_golden", "toy_model", "toy_problem", "train_toy"]

TOY_STEPS: Final = 200
TOY_LR: Final = 0.01
COMMAND: Final = "python -m lucid_train.optim.toy --write goldens/train/musgd_vs_sgd_toy.json"
Optimizer = Literal["musgd", "sgd"]


def toy_problem(seed: int = 0) -> tuple[Tensor, Tensor]:
    """Inputs ``(256, 16)`` and teacher targets ``(256, 4)``, float32, from ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(256, 16, generator=gen)
    hidden = torch.randn(16, 32, generator=gen) / 4.0
    out = torch.randn(32, 4, generator=gen) / 5.6
    return x, torch.tanh(x @ hidden) @ out


def toy_model(seed: int = 1) -> nn.Sequential:
    """The student, initialised from ``seed`` without touching the global RNG."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.Sequential(
            nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 4)
        )


def train_toy(optimizer: Optimizer, steps: int = TOY_STEPS, lr: float = TOY_LR) -> float:
    """Train the student for ``steps`` full-batch steps; returns the final mean squared error."""
    x, y = toy_problem()
    model = toy_model()
    use_muon = optimizer == "musgd"
    groups = param_groups(model, lr=lr, batch_size=64, accumulate=1, use_muon=use_muon)
    opt: torch.optim.Optimizer
    if use_muon:
        opt = MuSGD(groups, lr=lr, momentum=0.9)
    else:
        opt = torch.optim.SGD(groups, lr=lr, momentum=0.9, nesterov=True)
    for _ in range(steps):
        opt.zero_grad()
        torch.autograd.backward(nn.functional.mse_loss(model(x), y))
        opt.step()
    with torch.no_grad():
        return float(nn.functional.mse_loss(model(x), y))


def toy_golden() -> dict[str, Any]:
    """The golden record: both final losses, the tolerance, and the command that wrote it."""
    return {
        "command": COMMAND,
        "description": __doc__.splitlines()[0] if __doc__ else "",
        "steps": TOY_STEPS,
        "lr": TOY_LR,
        "final_loss": {"musgd": train_toy("musgd"), "sgd": train_toy("sgd")},
        "rtol": 1e-3,
        "torch": torch.__version__.split("+")[0],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="MuSGD vs SGD toy convergence golden")
    parser.add_argument("--write", type=Path, help="write the golden JSON here")
    args = parser.parse_args(argv)
    record = toy_golden()
    text = json.dumps(record, indent=2) + "\n"
    if args.write:
        args.write.parent.mkdir(parents=True, exist_ok=True)
        args.write.write_text(text)
    print(text, end="")


if __name__ == "__main__":
    main()
