"""An exponential moving average of a module's state, and the Lightning callback that keeps it.

:class:`ModelEMA` shadows every tensor of ``model.state_dict()``: floating tensors (parameters and
buffers such as BatchNorm statistics) are averaged, the others (``num_batches_tracked``) copied
(assumptions.md T46). After update ``n`` (counted from 1)::

    d(n)   = decay * (1 - exp(-n / tau))    # ramps up from ~0: early averages follow the model
    shadow = lerp(shadow, live, 1 - d(n))

the authors' ``ModelEMA`` (decay 0.9999, tau 2000), one update per optimizer step.

:class:`EMACallback` updates after every optimizer step, swaps the average into the module for
validation, test and predict (and back afterwards, also when they raise), and keeps the average in
the checkpoint under ``checkpoint["ema"]``. The checkpoint's ``state_dict`` stays the live weights,
so resume is exact; inference reads the average with :func:`ema_state_dict` (assumptions.md T47).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final

import lightning.pytorch as pl
import torch
from torch import Tensor, nn

__all__ = ["EMA_CHECKPOINT_KEY", "EMACallback", "ModelEMA", "ema_state_dict"]

EMA_CHECKPOINT_KEY: Final = "ema"


class ModelEMA:
    """A moving average of ``model.state_dict()``, kept on the model's devices.

    Args:
        model: the module to average; its state at construction is the starting average.
        decay: the asymptotic decay (authors: 0.9999).
        tau: the ramp's time constant in updates (authors: 2000).
        updates: updates already made (for a resumed average).

    Attributes:
        shadow: name -> tensor, same keys, shapes, dtypes, devices and layouts as the model's
            ``state_dict()``.
        updates: how many times :meth:`update` ran.
    """

    def __init__(
        self, model: nn.Module, decay: float = 0.9999, tau: float = 2000.0, updates: int = 0
    ) -> None:
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"decay must be in [0, 1], got {decay}")
        if tau <= 0:
            raise ValueError(f"tau must be > 0, got {tau}")
        self.decay = decay
        self.tau = tau
        self.updates = updates
        # Created outside inference mode: Lightning validates under it, and inference tensors
        # could not be updated afterwards.
        with torch.no_grad(), torch.inference_mode(False):
            self.shadow: dict[str, Tensor] = {
                k: v.detach().clone() for k, v in model.state_dict().items()
            }
        self._pairs: tuple[list[Tensor], list[Tensor], list[Tensor], list[Tensor]] | None = None
        self._bound: int | None = None

    def decay_at(self, updates: int) -> float:
        """``decay * (1 - exp(-updates / tau))``, the weight kept at update number ``updates``."""
        return self.decay * (1.0 - math.exp(-updates / self.tau))

    def bind(self, model: nn.Module) -> None:
        """Pair the shadow with ``model``'s current tensors.

        :meth:`update` binds on first use and reuses the pairing (building it costs ~1 ms); call
        this again after anything replaces the model's tensors (``.to()``, ``assign=True`` loads).
        """
        live = model.state_dict()
        if live.keys() != self.shadow.keys():
            missing = sorted(set(self.shadow) ^ set(live))[:5]
            raise KeyError(f"model and EMA state differ in keys, e.g. {missing}")
        floats: tuple[list[Tensor], list[Tensor]] = ([], [])
        others: tuple[list[Tensor], list[Tensor]] = ([], [])
        for name, value in live.items():
            target = floats if value.is_floating_point() else others
            target[0].append(self.shadow[name])
            target[1].append(value)
        self._pairs = (floats[0], floats[1], others[0], others[1])
        self._bound = id(model)

    def update(self, model: nn.Module) -> None:
        """Count one update and move the average towards ``model``'s current state."""
        if self._pairs is None or self._bound != id(model):
            self.bind(model)
        assert self._pairs is not None
        self.updates += 1
        weight = 1.0 - self.decay_at(self.updates)
        ema_floats, live_floats, ema_others, live_others = self._pairs
        with torch.no_grad():
            if ema_floats:
                torch._foreach_lerp_(ema_floats, live_floats, weight)
            if ema_others:
                torch._foreach_copy_(ema_others, live_others)  # one launch, not one per buffer

    def copy_to(self, model: nn.Module) -> None:
        """Write the average into ``model`` (in place; its tensors stay the same objects)."""
        live = model.state_dict()
        with torch.no_grad():
            for name, value in self.shadow.items():
                live[name].copy_(value)

    @contextmanager
    def swapped_into(self, model: nn.Module) -> Iterator[None]:
        """Run the block with the average in ``model``; the live state is restored bit for bit
        on exit, also when the block raises."""
        backup = self.swap_in(model)
        try:
            yield
        finally:
            self.swap_out(model, backup)

    def swap_in(self, model: nn.Module) -> dict[str, Tensor]:
        """Put the average into ``model``; returns the live state to give :meth:`swap_out`."""
        with torch.no_grad(), torch.inference_mode(False):
            backup = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self.copy_to(model)
        return backup

    @staticmethod
    def swap_out(model: nn.Module, backup: Mapping[str, Tensor]) -> None:
        """Restore the live state saved by :meth:`swap_in`."""
        live = model.state_dict()
        with torch.no_grad():
            for name, value in backup.items():
                live[name].copy_(value)

    def state_dict(self) -> dict[str, Any]:
        """``{"updates", "decay", "tau", "shadow"}``: plain values and tensors only."""
        return {
            "updates": self.updates,
            "decay": self.decay,
            "tau": self.tau,
            "shadow": dict(self.shadow),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` in place (values are copied onto the shadow's devices)."""
        shadow: Mapping[str, Tensor] = state["shadow"]
        if shadow.keys() != self.shadow.keys():
            missing = sorted(set(self.shadow) ^ set(shadow))[:5]
            raise KeyError(f"EMA state does not match the model, e.g. {missing}")
        with torch.no_grad():
            for name, value in shadow.items():
                self.shadow[name].copy_(value)
        self.updates = int(state["updates"])
        self.decay = float(state["decay"])
        self.tau = float(state["tau"])


def ema_state_dict(checkpoint: Mapping[str, Any]) -> dict[str, Tensor] | None:
    """The averaged ``state_dict`` of a Lightning checkpoint written with :class:`EMACallback`.

    Keys are the LightningModule's, like ``checkpoint["state_dict"]``; ``None`` when the
    checkpoint has no average. Inference, export and evaluation load this (the authors' checkpoints
    hold only the average); resume keeps ``state_dict``.
    """
    state = checkpoint.get(EMA_CHECKPOINT_KEY)
    if state is None:
        return None
    shadow: dict[str, Tensor] = dict(state["shadow"])
    return shadow


class EMACallback(pl.Callback):
    """Keep a :class:`ModelEMA` of the LightningModule and evaluate with it.

    - The average starts at ``on_fit_start`` from the module's state on its device.
    - It averages the module's whole state (network and trained loss parts) and is updated in
      ``on_train_batch_end`` of every batch that reached ``on_before_optimizer_step``: exactly
      once per optimizer step, under Lightning's ``accumulate_grad_batches`` or a module's own
      accumulation (`lucid_train.optim.AccumulationPlan`); a step the GradScaler skips still
      counts, as with the authors (assumptions.md T49).
    - Validation, test and predict run with the average swapped in; the live state returns at
      their end, or in ``on_exception``.
    - ``checkpoint["ema"]`` holds :meth:`ModelEMA.state_dict`; ``checkpoint["state_dict"]`` always
      holds the live state, even when a checkpoint is written mid-validation. A checkpoint loaded
      before the average exists (``trainer.validate(ckpt_path=...)``, ``fit`` resume) is applied
      as soon as it does.

    Args:
        decay: see :class:`ModelEMA`.
        tau: see :class:`ModelEMA`.
        evaluate_with_ema: swap the average in for validation, test and predict.
    """

    def __init__(
        self, decay: float = 0.9999, tau: float = 2000.0, *, evaluate_with_ema: bool = True
    ) -> None:
        self.decay = decay
        self.tau = tau
        self.evaluate_with_ema = evaluate_with_ema
        self.ema: ModelEMA | None = None
        self._pending: Mapping[str, Any] | None = None
        self._backup: dict[str, Tensor] | None = None
        self._stepped = False

    # -- the average's lifetime ------------------------------------------------------------

    def _ensure(self, pl_module: pl.LightningModule) -> ModelEMA:
        if self.ema is None:
            self.ema = ModelEMA(pl_module, self.decay, self.tau)
        if self._pending is not None:
            self.ema.load_state_dict(self._pending)
            self._pending = None
        return self.ema

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._ensure(pl_module)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Modules move and convert before training starts; pair with the final tensors.
        self._ensure(pl_module).bind(pl_module)

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._stepped = False

    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any
    ) -> None:
        self._stepped = True

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if self._stepped:
            self._stepped = False
            self._ensure(pl_module).update(pl_module)

    # -- evaluation with the average -------------------------------------------------------

    def _swap_in(self, pl_module: pl.LightningModule) -> None:
        if not self.evaluate_with_ema or self._backup is not None:
            return
        if self.ema is None and self._pending is None:
            return  # nothing averaged and nothing loaded: evaluate the live weights
        self._backup = self._ensure(pl_module).swap_in(pl_module)

    def _swap_out(self, pl_module: pl.LightningModule) -> None:
        if self._backup is not None:
            ModelEMA.swap_out(pl_module, self._backup)
            self._backup = None

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._swap_in(pl_module)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._swap_out(pl_module)

    def on_test_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._swap_in(pl_module)

    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._swap_out(pl_module)

    def on_predict_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._swap_in(pl_module)

    def on_predict_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._swap_out(pl_module)

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        self._swap_out(pl_module)

    # -- checkpoints -----------------------------------------------------------------------

    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        if self._backup is not None:  # written mid-evaluation: store the live state, not the EMA
            state = checkpoint["state_dict"]
            for name, value in self._backup.items():
                if name in state:
                    state[name] = value.clone()
        if self.ema is not None:
            checkpoint[EMA_CHECKPOINT_KEY] = self.ema.state_dict()
        elif self._pending is not None:
            checkpoint[EMA_CHECKPOINT_KEY] = dict(self._pending)

    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        state = checkpoint.get(EMA_CHECKPOINT_KEY)
        if state is None:
            return
        if self.ema is not None:
            self.ema.load_state_dict(state)
        else:
            self._pending = state
