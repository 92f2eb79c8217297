"""``optimizer=auto`` resolves as the authors' trainer resolves it (Ultralytics 8.4.190,
``BaseTrainer._setup_train`` and ``build_optimizer``, read for the rule): ``iterations =
ceil(images / max(batch, nbs)) * epochs``; above 10,000 iterations MuSGD at lr 0.01, else AdamW
at ``round(0.002 * 5 / (4 + nc), 6)``, momentum 0.9 either way; and under ``auto`` the bias
warm-up starts at 0 (their ``warmup_bias_lr = 0.0``), else at the default 0.1."""

from __future__ import annotations

import pytest
import torch

from lucid_train.tasks.recipe import OptimizerConfig, build_schedule, choose_optimizer

AUTO = OptimizerConfig()


@pytest.mark.parametrize(
    ("num_classes", "lr"),
    [(3, 0.001429), (5, 0.001111), (10, 0.000714), (80, 0.000119)],
)
def test_auto_picks_adamw_at_the_fitted_lr_on_short_runs(num_classes: int, lr: float) -> None:
    choice = choose_optimizer(AUTO, num_classes=num_classes, num_images=256, batch_size=16,
                              epochs=20)  # fmt: skip
    assert (choice.name, choice.lr, choice.momentum) == ("AdamW", lr, 0.9)


@pytest.mark.parametrize(
    ("num_images", "batch_size", "epochs", "name"),
    [
        (640_000, 16, 1, "AdamW"),  # ceil(640000 / 64) * 1 = 10,000: not above
        (640_001, 16, 1, "MuSGD"),  # 10,001
        (1_280_000, 128, 1, "AdamW"),  # a batch above the nominal 64 divides: 10,000
        (1_280_001, 128, 1, "MuSGD"),
        (118_287, 16, 100, "MuSGD"),  # COCO train2017, the recipe's 100 epochs: 184,900
        (6_400, 16, 100, "AdamW"),  # 100 * 100 = 10,000
    ],
)
def test_auto_switches_to_musgd_above_ten_thousand_iterations_of_the_nominal_batch(
    num_images: int, batch_size: int, epochs: int, name: str
) -> None:
    choice = choose_optimizer(AUTO, num_classes=80, num_images=num_images, batch_size=batch_size,
                              epochs=epochs)  # fmt: skip
    assert choice.name == name
    if name == "MuSGD":
        assert (choice.lr, choice.momentum) == (0.01, 0.9)


def test_a_named_optimizer_keeps_the_given_lr_and_momentum() -> None:
    named = OptimizerConfig(optimizer="SGD", lr0=0.02, momentum=0.95)
    choice = choose_optimizer(named, num_classes=80, num_images=10**6, batch_size=16, epochs=300)
    assert (choice.name, choice.lr, choice.momentum) == ("SGD", 0.02, 0.95)


@pytest.mark.parametrize(("optimizer", "start"), [("auto", 0.0), ("AdamW", 0.1), ("SGD", 0.1)])
def test_the_bias_warmup_starts_at_zero_under_auto_else_at_point_one(
    optimizer: str, start: float
) -> None:
    config = OptimizerConfig(optimizer=optimizer)  # type: ignore[arg-type]
    params = [torch.nn.Parameter(torch.zeros(1))]
    sgd = torch.optim.SGD([{"params": params, "param_group": "bias"}], lr=0.01, momentum=0.9)
    schedule = build_schedule(sgd, config, steps_per_epoch=10, epochs=5)
    assert schedule.schedule.warmup_bias_lr == start
    assert sgd.param_groups[0]["lr"] == pytest.approx(start)  # step 0 of the warm-up
