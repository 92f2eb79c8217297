"""Optimisation: MuSGD, the authors' parameter groups, warm-up + linear schedule, EMA.

Wiring in a LightningModule (``B`` the global batch, ``A`` = ``trainer.accumulate_grad_batches``)::

    def configure_optimizers(self):
        groups = param_groups(self, lr=0.01, weight_decay=5e-4, batch_size=B, accumulate=A)
        optimizer = MuSGD(groups, lr=0.01, momentum=0.9)  # warm-up takes momentum to 0.937 (T42)
        epochs = self.trainer.max_epochs
        steps = self.trainer.estimated_stepping_batches // epochs  # optimizer steps per epoch
        scheduler = WarmupLinearLR(optimizer, WarmupLinear(steps_per_epoch=steps, epochs=epochs))
        return {"optimizer": optimizer,
                "lr_scheduler": {"scheduler": scheduler, "interval": "step", "frequency": 1}}

with ``Trainer(callbacks=[EMACallback()], gradient_clip_val=10.0, gradient_clip_algorithm="norm")``
(the authors' max-norm 10 after unscaling; assumptions.md T48).
"""

from lucid_train.optim.accumulation import AccumulationPlan, resolve_accumulation
from lucid_train.optim.ema import EMA_CHECKPOINT_KEY, EMACallback, ModelEMA, ema_state_dict
from lucid_train.optim.groups import (
    CLASS_LR_SCALE,
    NOMINAL_BATCH,
    boosted_parameters,
    nominal_accumulation,
    param_groups,
    scaled_weight_decay,
)
from lucid_train.optim.musgd import MuSGD, muon_scale
from lucid_train.optim.newton_schulz import NS_COEFFICIENTS, NS_STEPS, compute_dtype, orthogonalize
from lucid_train.optim.schedule import WarmupLinear, WarmupLinearLR

__all__ = [
    "CLASS_LR_SCALE",
    "EMA_CHECKPOINT_KEY",
    "NOMINAL_BATCH",
    "NS_COEFFICIENTS",
    "NS_STEPS",
    "AccumulationPlan",
    "EMACallback",
    "ModelEMA",
    "MuSGD",
    "WarmupLinear",
    "WarmupLinearLR",
    "boosted_parameters",
    "compute_dtype",
    "ema_state_dict",
    "muon_scale",
    "nominal_accumulation",
    "orthogonalize",
    "param_groups",
    "resolve_accumulation",
    "scaled_weight_decay",
]
