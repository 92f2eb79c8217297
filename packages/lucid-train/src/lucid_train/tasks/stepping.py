"""How a module steps: its optimizer and schedule, gradients summed to the nominal batch, and
the gate that skips a step with non-finite gradients.

`SteppingModule` is the base of `lucid_train.tasks.module.YOLOModule`. It configures the
optimizer and schedule from the module's `OptimizerConfig` (built once, in the module's
``__init__``) and, when the run sums several batches per step (``accumulate``: the authors'
``round(nbs / batch)``, ramped from 1 during warm-up), holds the `AccumulationPlan` that decides
each batch. Lightning's own accumulation is then 1 and it calls the hooks below every batch;
``global_step`` is the 0-based index of the batch being trained. A window may span an epoch
end (as the authors'): its gradients so far travel in the checkpoint. A non-finite loss or
gradient is caught by the module's `FiniteLossGuard`: on the host each batch on the CPU, on the
device on a GPU (the GradScaler's or a fused optimizer's own skip, else one read per step).
"""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from lightning.pytorch.plugins.precision import Precision
from lightning.pytorch.utilities import GradClipAlgorithmType, rank_zero_info
from torch import Tensor

from lucid_train.optim import AccumulationPlan, resolve_accumulation
from lucid_train.tasks.nonfinite import FiniteLossGuard
from lucid_train.tasks.recipe import (
    OptimizerConfig,
    build_optimizer,
    build_schedule,
    choose_optimizer,
    unused_by_auto,
)

__all__ = ["PENDING_GRADIENTS_KEY", "SteppingModule"]

PENDING_GRADIENTS_KEY = "pending_gradients"  # an open accumulation window's gradients


class SteppingModule(L.LightningModule):
    """The optimizer, the schedule, the accumulation hooks and the non-finite gate of a module.

    Attributes (set by the subclass's ``__init__``):
        optimizer_config: the optimizer settings.
        accumulate: ``auto`` or a fixed count of batches per optimizer step.
        num_classes: ``C`` (the ``auto`` optimizer rule reads it).
        accumulation: the plan, set by `configure_optimizers` (None: Lightning's own).
        finite_guard: the non-finite check.
    """

    optimizer_config: OptimizerConfig
    accumulate: int | str
    num_classes: int

    def __init__(self) -> None:
        super().__init__()
        self.accumulation: AccumulationPlan | None = None  # set by configure_optimizers
        self._pending_gradients: dict[str, Tensor] | None = None  # from a resumed checkpoint
        # the non-finite check: a host read per batch on the CPU, staged and gated on a GPU
        self.finite_guard = FiniteLossGuard()

    def configure_optimizers(self) -> Any:
        config = self.optimizer_config
        trainer = self.trainer
        epochs = max(trainer.max_epochs or 1, 1)
        lightning_accumulate = max(trainer.accumulate_grad_batches, 1)
        steps_per_epoch = max(int(trainer.estimated_stepping_batches) // epochs, 1)
        batch_size = _batch_size(trainer)  # global: all ranks together (assumptions.md T86)
        nominal, ramped = resolve_accumulation(self.accumulate, batch_size, config.nbs)
        self.accumulation = None
        if nominal > 1:
            if lightning_accumulate > 1:
                raise ValueError(
                    f"accumulate={self.accumulate!r} makes the module sum {nominal} "
                    f"batches per step, and the Trainer also has accumulate_grad_batches="
                    f"{lightning_accumulate}; set the module's accumulate (lucid fit "
                    "--trainer.accumulate_grad_batches) and leave the Trainer's at 1"
                )
            # Lightning steps every batch; the plan decides (global_step counts batches).
            self.accumulation = AccumulationPlan.for_run(
                nominal,
                batches_per_epoch=steps_per_epoch,
                epochs=epochs,
                warmup_epochs=config.warmup_epochs,
                ramped=ramped,
            )
        accumulate = nominal if self.accumulation is not None else lightning_accumulate
        choice = choose_optimizer(
            config,
            num_classes=self.num_classes,
            num_images=steps_per_epoch * lightning_accumulate * batch_size,
            batch_size=batch_size,
            epochs=epochs,
        )
        unused = " and ".join(unused_by_auto(config))
        note = f" ({unused} not used: name an optimizer to set them)" if unused else ""
        plan = _describe_accumulation(self.accumulation, lightning_accumulate, batch_size, nominal)
        # logged, not `self.print`: no progress bar is active yet, and the bar's print drops it
        rank_zero_info(
            f"optimizer: {choice.name}(lr={choice.lr}, momentum={choice.momentum})"
            f"{' chosen by optimizer=auto' if config.optimizer == 'auto' else ''}{note}; "
            f"{plan}"
        )
        # weight decay scales with the nominal batch before the cap, as the authors' (T45)
        optimizer = build_optimizer(
            self, config, choice, batch_size=batch_size, accumulate=accumulate
        )
        schedule = build_schedule(optimizer, config, steps_per_epoch=steps_per_epoch, epochs=epochs)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": schedule, "interval": "step", "frequency": 1},
        }

    def optimizer_step(
        self,
        epoch: int,
        batch_idx: int,
        optimizer: Any,
        optimizer_closure: Any = None,
    ) -> None:
        plan = self.accumulation
        if plan is None or plan.steps_at(self.trainer.global_step):
            optimizer.step(closure=optimizer_closure)
        elif optimizer_closure is not None:
            optimizer_closure()  # forward and backward only: the gradients keep summing

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Any) -> None:
        if not self._window_open():
            optimizer.zero_grad()

    def on_validation_model_zero_grad(self) -> None:
        if not self._window_open():
            super().on_validation_model_zero_grad()

    def _steps_now(self) -> bool:
        """Whether the optimizer steps after this batch (the module's plan, else Lightning's)."""
        plan = self.accumulation
        if plan is not None:
            return plan.steps_at(self.trainer.global_step)
        return not self.trainer.fit_loop._should_accumulate()

    def _window_open(self) -> bool:
        """Whether gradients of an unfinished accumulation window are waiting for more batches."""
        plan = self.accumulation
        return plan is not None and not plan.starts_window(self.trainer.global_step)

    def on_after_backward(self) -> None:
        if self.trainer.world_size > 1 and self._steps_now():
            self.finite_guard.agree(self.global_step)  # before the gradients are summed
        if _grad_scaler(self.trainer) is not None:
            grad = next((p.grad for p in self.parameters() if p.grad is not None), None)
            if grad is not None:
                self.finite_guard.gate_gradient(grad)  # the scaler skips the step on device

    def configure_gradient_clipping(
        self,
        optimizer: Any,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        # The last hook before the step (after ``on_before_optimizer_step``): the gradients are
        # final here, so the non-finite verdict is handed to the step here too.
        algorithm = GradClipAlgorithmType(gradient_clip_algorithm or "norm")
        scaler = _grad_scaler(self.trainer)
        if scaler is None:
            # No GradScaler judges the gradients: clipping's own total norm (the same call
            # Lightning makes) tells the guard whether they are finite, before the step.
            plugin = self.trainer.precision_plugin
            params = list(plugin.main_params(optimizer))
            norm: Tensor | None
            if gradient_clip_val and algorithm is GradClipAlgorithmType.NORM:
                norm = torch.nn.utils.clip_grad_norm_(params, gradient_clip_val)
            else:
                Precision.clip_gradients(plugin, optimizer, gradient_clip_val or 0.0, algorithm)
                grads = [p.grad for p in params if p.grad is not None]
                norm = torch.nn.utils.get_total_norm(grads) if grads else None
            if norm is not None:
                self.finite_guard.observe_gradient_norm(self.global_step, norm)
            if _skips_on_device(optimizer):
                # a fused step reads ``found_inf`` on the device and leaves everything as it was
                optimizer.found_inf = self.finite_guard.device_flag()
            else:
                self.finite_guard.gate_step()  # on a GPU: one host read per optimizer step
            return
        if not _skips_on_device(optimizer):
            self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)
            return
        # Lightning's mixed precision neither unscales before clipping nor clips for an optimizer
        # that unscales in its own step (fused), so both happen here: unscaling records the
        # non-finite verdict on the device, and the scaler's step hands it to the fused kernel,
        # which skips itself. The clipping is the same call Lightning makes for other optimizers.
        scaler.unscale_(optimizer)
        Precision.clip_gradients(
            self.trainer.precision_plugin, optimizer, gradient_clip_val or 0.0, algorithm
        )

    def on_train_start(self) -> None:
        # Not in on_load_checkpoint: the Trainer zeroes every gradient after restoring modules.
        pending, self._pending_gradients = self._pending_gradients, None
        if pending:
            params = dict(self.named_parameters())
            for name, grad in pending.items():
                params[name].grad = grad.to(params[name].device).clone()

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self._window_open():
            # not cloned: the checkpoint IO copies them at the call (`AtomicCheckpointIO`), and
            # a replayed fit's gradients stay where the writer's plan found them last time
            checkpoint[PENDING_GRADIENTS_KEY] = {
                name: p.grad.detach() for name, p in self.named_parameters() if p.grad is not None
            }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        self._pending_gradients = checkpoint.get(PENDING_GRADIENTS_KEY)


def _skips_on_device(optimizer: Any) -> bool:
    """Whether ``optimizer`` takes the non-finite verdict as a tensor (torch's fused ones)."""
    return bool(getattr(optimizer, "_step_supports_amp_scaling", False))


def _grad_scaler(trainer: L.Trainer) -> Any:
    """The GradScaler of a 16-mixed fit, else None."""
    return getattr(trainer.precision_plugin, "scaler", None)


def _describe_accumulation(
    plan: AccumulationPlan | None, lightning_accumulate: int, batch_size: int, asked: int
) -> str:
    if plan is None:
        nominal = batch_size * lightning_accumulate
        return f"accumulation {lightning_accumulate} (nominal batch {nominal})"
    ramp = (
        f", ramped from 1 over {plan.warmup_batches} warm-up batches"
        if plan.ramped and plan.warmup_batches
        else ""
    )
    # the authors' cap at the run's batches: said, not a setting changed without a word
    capped = (
        f", capped from {asked} at the run's {plan.nominal} training batches"
        if asked > plan.nominal
        else ""
    )
    return f"accumulation {plan.nominal} (nominal batch {batch_size * plan.nominal}){capped}{ramp}"


def _batch_size(trainer: L.Trainer) -> int:
    """Images per optimizer-step batch over all ranks: the data module's ``batch_size`` is
    global (`LucidDataModule`); a loader's own batch counts once per rank."""
    dm = getattr(trainer, "datamodule", None)
    size = getattr(dm, "batch_size", None)
    return int(size) if size else 1
