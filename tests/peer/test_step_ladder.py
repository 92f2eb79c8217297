"""Rungs d and e of the ladder: the optimizer ``auto`` builds, its groups, lr / momentum / betas /
weight decay at every batch of a 20-epoch fit (warm-up, then the decay to the last epoch), the
accumulation cadence, the ProgLoss weight's timing, clipping, the parameters after k steps and
the EMA, against the authors' own
trainer: a tiny real fit of theirs, recorded by a callback, and their `optimizer_step` and
`ModelEMA` driven on the same weights and gradients as ours."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from lightning.pytorch.plugins.precision import Precision
from lightning.pytorch.utilities import GradClipAlgorithmType

from lucid_testing import peer_twins as pt
from lucid_train.losses import o2m_weight
from lucid_train.optim.accumulation import AccumulationPlan, resolve_accumulation
from lucid_train.optim.ema import ModelEMA
from lucid_train.run.trainer import GRADIENT_CLIP
from lucid_train.tasks.recipe import (
    OptimizerChoice,
    OptimizerConfig,
    build_optimizer,
    build_schedule,
    choose_optimizer,
)
from lucid_train.tasks.task_modules import module_class
from lucid_train.weights.authors_names import authors_key

# 8 batches an epoch, accumulate 4, warm-up 24 batches; 20 epochs, the held-out runs' length
IMAGES, BATCH, NBS, EPOCHS = 16, 2, 8, 20


def _dataset(root: Path) -> Path:
    import cv2

    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        (root / "images" / split).mkdir(parents=True)
        (root / "labels" / split).mkdir(parents=True)
        for i in range(IMAGES if split == "train" else 2):
            cv2.imwrite(
                str(root / "images" / split / f"{i}.png"), rng.integers(0, 255, (64, 64, 3))
            )
            rows = [f"{i % 3} {c:.3f} {c:.3f} 0.3 0.4" for c in rng.uniform(0.3, 0.7, 3)]
            (root / "labels" / split / f"{i}.txt").write_text("\n".join(rows) + "\n")
    data = root / "data.yaml"
    data.write_text(f"path: {root}\ntrain: images/train\nval: images/val\nnames: [a, b, c]\n")
    return data


@pytest.fixture(scope="module")
def authors_fit(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Their trainer's values at each batch of a 20-epoch fit of 16 images (batch 2, nbs 8)."""
    from ultralytics.models.yolo.detect import DetectionTrainer

    root = tmp_path_factory.mktemp("peer-fit")
    data = _dataset(root / "data")
    seen: dict[str, Any] = {"batches": [], "steps": [], "groups": None}

    def on_train_start(trainer: Any) -> None:
        names = {id(p): n for n, p in trainer.model.named_parameters()}
        seen["groups"] = [
            (g["param_group"], sorted(names[id(p)] for p in g["params"]))
            for g in trainer.optimizer.param_groups
        ]
        seen["optimizer"] = type(trainer.optimizer).__name__
        step = trainer.optimizer_step

        def counted() -> None:
            seen["steps"].append(len(seen["batches"]))
            step()

        trainer.optimizer_step = counted

    def on_train_batch_end(trainer: Any) -> None:
        seen["batches"].append(
            {
                "groups": [
                    (
                        g["param_group"],
                        g["lr"],
                        g.get("momentum"),
                        g.get("betas"),
                        g["weight_decay"],
                    )
                    for g in trainer.optimizer.param_groups
                ],
                "accumulate": trainer.accumulate,
                "o2m": trainer.model.criterion.o2m,
                "ema_updates": trainer.ema.updates,
            }
        )

    overrides = dict(
        model="yolo26n.yaml", data=str(data), epochs=EPOCHS, batch=BATCH, nbs=NBS, imgsz=32,
        workers=0, device="cpu", amp=False, val=False, plots=False, save=False, pretrained=False,
        project=str(root / "runs"), name="fit", exist_ok=True, verbose=False,
    )  # fmt: skip
    trainer = DetectionTrainer(overrides=overrides)
    trainer.add_callback("on_train_start", on_train_start)
    trainer.add_callback("on_train_batch_end", on_train_batch_end)
    trainer.train()
    assert len(seen["batches"]) == EPOCHS * IMAGES // BATCH
    return seen


def _lucid_run() -> tuple[Any, torch.optim.Optimizer, Any, AccumulationPlan]:
    module = module_class("detect")(model="yolo26n", num_classes=3, capture="off")
    config = OptimizerConfig(nbs=NBS)
    choice = choose_optimizer(
        config, num_classes=3, num_images=IMAGES, batch_size=BATCH, epochs=EPOCHS
    )
    nominal, ramped = resolve_accumulation("auto", BATCH, NBS)
    nb = IMAGES // BATCH
    plan = AccumulationPlan.for_run(
        nominal, batches_per_epoch=nb, epochs=EPOCHS, warmup_epochs=3.0, ramped=ramped
    )
    optimizer = build_optimizer(module, config, choice, batch_size=BATCH, accumulate=nominal)
    schedule = build_schedule(optimizer, config, steps_per_epoch=nb, epochs=EPOCHS)
    return module, optimizer, schedule, plan


def test_auto_builds_the_authors_optimizer_and_groups(authors_fit: dict[str, Any]) -> None:
    module, optimizer, _, _ = _lucid_run()
    assert type(optimizer).__name__ == authors_fit["optimizer"] == "AdamW"
    names = {id(p): authors_key(n) for n, p in module.named_parameters()}
    ours = [
        (g["param_group"], sorted(str(names[id(p)]) for p in g["params"]))
        for g in optimizer.param_groups
    ]
    assert sorted(ours) == sorted(authors_fit["groups"])


def test_every_batch_has_the_authors_lr_betas_decay_cadence_and_progloss_weight(
    authors_fit: dict[str, Any],
) -> None:
    """Through the 24 warm-up batches and every later one: each group's values, the accumulation
    in force, which batches step, and the one-to-many weight the loss uses."""
    _, optimizer, schedule, plan = _lucid_run()
    nb = IMAGES // BATCH
    steps = []
    for s, theirs in enumerate(authors_fit["batches"]):
        ours = [
            (g["param_group"], g["lr"], g.get("momentum"), g.get("betas"), g["weight_decay"])
            for g in optimizer.param_groups
        ]
        assert sorted(ours, key=str) == sorted(theirs["groups"], key=str), f"batch {s}"
        assert plan.accumulate_at(s) == theirs["accumulate"], f"batch {s}"
        assert o2m_weight(s // nb, EPOCHS) == pytest.approx(theirs["o2m"], rel=1e-12), s
        if plan.steps_at(s):
            steps.append(s)
        assert theirs["ema_updates"] == len(steps), f"EMA updates once per step (batch {s})"
        schedule.step()
    assert steps == authors_fit["steps"]
    assert len({str(b["groups"]) for b in authors_fit["batches"]}) > 20  # the warm-up moved


def test_auto_switches_to_musgd_with_the_authors_groups_and_boosted_lr(tmp_path: Path) -> None:
    from ultralytics.engine.trainer import BaseTrainer

    path = pt.write_released_weights("detect", tmp_path / "w.pt")
    theirs_model = pt.authors_model(path, "detect")
    module = pt.lucid_module(path, "detect")
    stub = SimpleNamespace(args=pt.authors_args(), data={"nc": pt.NUM_CLASSES})
    config = OptimizerConfig()
    for images, name in ((64 * 10_001 // 20, "MuSGD"), (640, "AdamW")):
        iterations = -(-images // 64) * 20
        theirs = BaseTrainer.build_optimizer(
            stub, theirs_model, "auto", 0.01, 0.937, 5e-4 * 16 * 4 / 64, iterations
        )
        choice = choose_optimizer(
            config, num_classes=3, num_images=images, batch_size=16, epochs=20
        )
        assert choice.name == name == type(theirs).__name__
        ours = build_optimizer(module, config, choice, batch_size=16, accumulate=4)
        t_names = {id(p): n for n, p in theirs_model.named_parameters()}
        o_names = {id(p): authors_key(n) for n, p in module.named_parameters()}

        def rows(opt: Any, names: dict[int, Any]) -> list[tuple[Any, ...]]:
            keys = ("param_group", "lr", "weight_decay", "momentum", "betas")
            return sorted(
                (
                    *(g.get(k) for k in keys),
                    bool(g.get("use_muon")),  # theirs sets it on the muon group only
                    sorted(str(names[id(p)]) for p in g["params"]),
                )
                for g in opt.param_groups
                if g["params"]
            )

        assert rows(ours, o_names) == rows(theirs, t_names), name


@pytest.mark.parametrize("task", ["detect", "pose"])
def test_k_clipped_steps_and_the_ema_equal_the_authors(task: str, tmp_path: Path) -> None:
    """Three steps of their `optimizer_step` (unscale, clip at 10, step, EMA) and of ours
    (Lightning's clip at `GRADIENT_CLIP`, the optimizer, `ModelEMA`) from the same weights and
    the same gradients: every parameter and every floating EMA entry, BatchNorm statistics
    included. Gradients are their loss's on the fixed batch, times 1, 50 and 0.01, so the
    clip binds on some steps and not others."""
    from ultralytics.engine.trainer import BaseTrainer
    from ultralytics.utils.torch_utils import ModelEMA as TheirEMA

    assert GRADIENT_CLIP == 10.0
    path = pt.write_released_weights(task, tmp_path / "w.pt")
    theirs = pt.authors_model(path, task)
    module = pt.lucid_module(path, task)
    batch = pt.fixed_batch(task)
    config = OptimizerConfig()
    choice = OptimizerChoice("AdamW", 0.002, 0.9)
    stub = SimpleNamespace(args=pt.authors_args(warmup_bias_lr=0.0), data={"nc": pt.NUM_CLASSES})
    their_opt = BaseTrainer.build_optimizer(stub, theirs, "AdamW", 0.002, 0.9, 5e-4, 100)
    our_opt = build_optimizer(module, config, choice, batch_size=16, accumulate=4)
    their_ema, our_ema = TheirEMA(theirs), ModelEMA(module.model)
    runner = SimpleNamespace(
        scaler=torch.amp.GradScaler("cpu", enabled=False), optimizer=their_opt, model=theirs,
        ema=their_ema, device=torch.device("cpu"),
    )  # fmt: skip
    ours_by_theirs = {authors_key(n): p for n, p in module.named_parameters()}
    criterion = theirs.init_criterion()
    clipped = []
    for scale in (1.0, 50.0, 0.01):
        theirs.train()
        loss, _ = criterion(theirs(batch.theirs["img"]), batch.theirs)
        (loss.sum() * scale).backward()
        norm = torch.stack([p.grad.norm() for p in theirs.parameters() if p.grad is not None])
        clipped.append(float(norm.norm()) > 10.0)
        for n, p in theirs.named_parameters():
            ours_by_theirs[n].grad = None if p.grad is None else p.grad.clone()
        BaseTrainer.optimizer_step(runner)
        Precision().clip_gradients(our_opt, GRADIENT_CLIP, GradClipAlgorithmType.NORM)
        our_opt.step()
        our_opt.zero_grad()
        _sync_buffers(module, theirs)  # their forward moved the BatchNorm statistics
        our_ema.update(module.model)
    assert True in clipped and False in clipped
    for n, p in theirs.named_parameters():
        torch.testing.assert_close(ours_by_theirs[n].detach(), p.detach(), rtol=1e-6, atol=1e-7)
    assert their_ema.updates == our_ema.updates == 3
    theirs_ema = their_ema.ema.state_dict()
    compared = 0
    for key, value in our_ema.shadow.items():
        name = authors_key(f"model.{key}")
        if name is None or name not in theirs_ema or not value.is_floating_point():
            continue
        torch.testing.assert_close(value, theirs_ema[name], rtol=1e-6, atol=1e-7, msg=name)
        compared += 1
    assert compared > 400


def _sync_buffers(module: Any, theirs: Any) -> None:
    """Copy their BatchNorm buffers (moved by their training forward) into ours, by name."""
    mine = {authors_key(k): v for k, v in module.state_dict().items()}
    with torch.no_grad():
        for name, value in theirs.state_dict().items():
            if name in mine and "running" in name:
                mine[name].copy_(value)
