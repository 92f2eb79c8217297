"""The dual (one-to-many + one-to-one) loss and the ProgLoss branch-weight schedule.

``L = w * L_one2many + (1 - w) * L_one2one``, each branch scored against its own assignment.
``w`` follows :func:`o2m_weight`, the authors' per-epoch linear decay from 0.8 to 0.1; it enters
the loss as a 0-d tensor so a recorded loss replays with each epoch's value.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lucid_models.outputs import ModelOutput
from lucid_train.assign.padded_targets import PaddedTargets
from lucid_train.losses.detection import BranchResult, DetectionLoss, ImageSize, LossTerms

__all__ = ["DualLoss", "o2m_weight"]


def o2m_weight(epoch: int, epochs: int, start: float = 0.8, end: float = 0.1) -> float:
    """The one-to-many weight during 0-based ``epoch`` of ``epochs`` (assumptions.md T10).

    ``max(1 - epoch / max(epochs - 1, 1), 0) * (start - end) + end``: ``start`` in epoch 0,
    ``end`` in the last epoch and after, linear in between. The authors update it at each epoch
    end (so epoch ``e`` trains with this value of ``e``) and recompute it on resume.
    """
    if epoch < 0 or epochs < 1:
        raise ValueError(f"expected epoch >= 0 and epochs >= 1, got {epoch} and {epochs}")
    return max(1.0 - epoch / max(epochs - 1, 1), 0.0) * (start - end) + end


class DualLoss:
    """Both branches' losses, blended by the ProgLoss weight.

    Args:
        one2many: the one-to-many branch loss (``one_to_one=False``).
        one2one: the one-to-one branch loss (``one_to_one=True``).
        batch_scaled: multiply the total by the batch size, as the authors do (their optimiser
            settings assume a loss summed over images; assumptions.md T9). The items are never
            scaled.
    """

    def __init__(
        self, one2many: DetectionLoss, one2one: DetectionLoss, *, batch_scaled: bool = True
    ) -> None:
        if one2many.one_to_one or not one2one.one_to_one:
            raise ValueError("expected one2many with one_to_one=False and one2one with True")
        self.one2many = one2many
        self.one2one = one2one
        self.batch_scaled = batch_scaled

    @classmethod
    def for_detection(
        cls,
        num_classes: int,
        *,
        box_gain: float = 7.5,
        cls_gain: float = 0.5,
        l1_gain: float = 1.5,
        batch_scaled: bool = True,
    ) -> DualLoss:
        """The authors' detection setup: TAL top-10 one-to-many, top-7 then top-1 one-to-one."""
        one2many, one2one = (
            DetectionLoss(
                num_classes,
                one_to_one=one_to_one,
                box_gain=box_gain,
                cls_gain=cls_gain,
                l1_gain=l1_gain,
            )
            for one_to_one in (False, True)
        )
        return cls(one2many, one2one, batch_scaled=batch_scaled)

    def branches(
        self, output: ModelOutput, targets: PaddedTargets, image_size: ImageSize
    ) -> tuple[BranchResult, BranchResult]:
        """The one-to-many and one-to-one :class:`BranchResult`, each on its own assignment."""
        if output.one2many is None:
            raise ValueError("expected a training forward with both branches (got one2many=None)")
        return (
            self.one2many(output.one2many, output, targets, image_size),
            self.one2one(output.one2one, output, targets, image_size),
        )

    def __call__(
        self,
        output: ModelOutput,
        targets: PaddedTargets,
        o2m_weight: Tensor,
        image_size: ImageSize,
    ) -> LossTerms:
        """``o2m_weight * L_one2many + (1 - o2m_weight) * L_one2one`` (times ``B`` if scaled).

        Args:
            output: a training forward's output.
            targets: padded ground truth on the output's device.
            o2m_weight: 0-d tensor (see :func:`o2m_weight`), on the output's device.
            image_size: ``(H, W)`` of the input canvas.

        Returns:
            :class:`LossTerms` whose items are the one-to-one branch's, named ``o2o_<term>``
            (the authors log that branch only); ``branches`` holds both results.
        """
        many, one = self.branches(output, targets, image_size)
        weight = o2m_weight.to(dtype=torch.float32)
        total = weight * many.terms.total + (1.0 - weight) * one.terms.total
        if self.batch_scaled:
            total = total * targets.batch_size
        return LossTerms(
            total=total,
            items=one.terms.items,
            names=tuple(f"o2o_{name}" for name in one.terms.names),
            branches=(many, one),
        )
