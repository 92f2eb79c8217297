"""RealNVP: the learned 2-D residual density of the keypoint RLE loss.

The structure is the authors' (Ultralytics 8.4, assumptions.md T29): six affine coupling layers
that alternate which coordinate they transform (the first keeps ``y`` and moves ``x``); each layer
has its own scale net and translation net, both ``Linear(2, 64) - SiLU - Linear(64, 64) - SiLU -
Linear(64, 2)``, the scale net ending in ``tanh``. A net sees the 2-vector with the moved
coordinate zeroed. Linear weights start Xavier-uniform with gain 0.01 (biases keep PyTorch's
default), so the flow starts close to the identity. The prior is the 2-D standard normal.

Calling the module returns ``log_prob``, so it can be handed directly to
``lucid_kernels.rle_negative_log_likelihood`` (which then also finds its parameters).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

__all__ = ["RealNVP"]

_LOG_2PI = math.log(2.0 * math.pi)


def _scale_net(hidden: int) -> nn.Sequential:
    """The shift net's layers with a ``tanh``: a bounded log-scale."""
    return nn.Sequential(*_shift_net(hidden), nn.Tanh())


def _shift_net(hidden: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(2, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, 2)
    )


class RealNVP(nn.Module):
    """Affine-coupling normalising flow over 2-D residuals.

    Data ``x`` and latent ``z`` are ``(..., 2)``. Layer ``i`` keeps the coordinates where
    ``keep[i] = 1`` and maps the other one as ``x = z * exp(s) + t`` (latent to data), with
    ``s = scale_net(keep * z)`` and ``t = shift_net(keep * z)`` restricted to the moved coordinate.

    Args:
        num_layers: coupling layers (6 in the authors' build); must be even so both coordinates
            move equally often.
        hidden: width of every conditioner's hidden layers (64).
    """

    keep: Tensor

    def __init__(self, num_layers: int = 6, hidden: int = 64) -> None:
        super().__init__()
        if num_layers < 2 or num_layers % 2:
            raise ValueError(f"expected an even num_layers >= 2, got {num_layers}")
        keep = torch.tensor([[0.0, 1.0], [1.0, 0.0]]).repeat(num_layers // 2, 1)  # (L, 2)
        self.register_buffer("keep", keep)
        self.scale_nets = nn.ModuleList(_scale_net(hidden) for _ in range(num_layers))
        self.shift_nets = nn.ModuleList(_shift_net(hidden) for _ in range(num_layers))
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight, gain=0.01)

    def _coupling(self, i: int, kept: Tensor) -> tuple[Tensor, Tensor]:
        """Log-scale and shift of layer ``i`` from its kept part, zero on the kept coordinate."""
        move = 1.0 - self.keep[i]
        scale_net, shift_net = self.scale_nets[i], self.shift_nets[i]
        return scale_net(kept) * move, shift_net(kept) * move

    def to_latent(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Data -> latent, with ``log |det dz/dx|``.

        Args:
            x: ``(..., 2)``.

        Returns:
            ``z`` ``(..., 2)`` and the log-determinant ``(...)``.
        """
        z = x
        log_det = x.new_zeros(x.shape[:-1])
        for i in reversed(range(len(self.scale_nets))):
            kept = self.keep[i] * z
            s, t = self._coupling(i, kept)
            z = kept + (1.0 - self.keep[i]) * (z - t) * torch.exp(-s)
            log_det = log_det - s.sum(dim=-1)
        return z, log_det

    def from_latent(self, z: Tensor) -> Tensor:
        """Latent -> data, the inverse of :meth:`to_latent`: ``(..., 2) -> (..., 2)``."""
        x = z
        for i in range(len(self.scale_nets)):
            kept = self.keep[i] * x
            s, t = self._coupling(i, kept)
            x = kept + (1.0 - self.keep[i]) * (x * torch.exp(s) + t)
        return x

    def log_prob(self, x: Tensor) -> Tensor:
        """Log-density of residuals: ``(..., 2) -> (...)``, standard-normal prior on ``z``."""
        z, log_det = self.to_latent(x)
        return -0.5 * z.square().sum(dim=-1) - _LOG_2PI + log_det

    def forward(self, x: Tensor) -> Tensor:
        """Same as :meth:`log_prob` (the call the density kernel makes)."""
        return self.log_prob(x)
