"""The per-task LightningModules: real loss terms logged, both decode paths scored, the ProgLoss
weight per epoch, the pose flow trained and checkpointed, empty images scored."""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch

from lucid_train.data import LucidDataModule
from lucid_train.data.transport import Batch
from lucid_train.losses import o2m_weight
from lucid_train.optim.ema import EMA_CHECKPOINT_KEY
from lucid_train.report.run_report import REPORT_FILES
from lucid_train.run.checkpoint_io import AtomicCheckpointIO
from lucid_train.run.trainer import build_trainer
from lucid_train.tasks.module import YOLOModule
from lucid_train.tasks.restore import load_module
from lucid_train.tasks.task_modules import module_class
from lucid_train.tasks.validation import DecodeSettings, Scorers, ValidationScorer
from lucid_train.weights.checkpoint_file import (
    CheckpointError,
    CheckpointTaskError,
    read_checkpoint_info,
)

TERMS = {
    "detect": ("box", "cls", "l1"),
    "segment": ("box", "cls", "l1", "seg", "sem"),
    "pose": ("box", "cls", "l1", "pose", "kobj", "rle"),
    "obb": ("box", "cls", "l1", "angle"),
}
EXTRA_METRIC = {"segment": "mask_mAP50-95", "pose": "pose_mAP50-95"}


def _datamodule(root: Path, task: str) -> LucidDataModule:
    dm = LucidDataModule(task, root, img_size=64, batch_size=4, num_workers=0)  # type: ignore[arg-type]
    dm.setup("fit")
    return dm


def _module(dm: LucidDataModule, **hparams: Any) -> YOLOModule:
    s = dm.schema
    return module_class(s.task)(
        num_classes=s.num_classes,
        class_names=s.class_names,
        category_ids=s.category_ids,
        num_keypoints=s.num_keypoints or None,
        keypoint_names=s.keypoint_names,
        flip_index=s.flip_index,
        skeleton=s.skeleton,
        img_size=64,
        **hparams,
    )


class _RecordWeight(L.Callback):
    """The o2m weight at each batch; the frozen object count at each batch and each validation's
    ground truth index (obb has none)."""

    def __init__(self) -> None:
        self.values: list[float] = []
        self.frozen: list[int] = []
        self.indices: list[Any] = []  # the objects: an id could be reused once one is freed

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, idx: int) -> None:
        self.values.append(float(pl_module.o2m_weight))
        self.frozen.append(gc.get_freeze_count())

    def on_validation_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if pl_module.scorer.coco is not None and not trainer.sanity_checking:
            self.indices.append(pl_module.scorer.coco["e2e"].gt)


@dataclass
class _Run:
    """One task's two-epoch fit, shared by the tests that read it."""

    out: Path
    dm: LucidDataModule
    trainer: L.Trainer
    weights: list[float]
    record: _RecordWeight
    frozen_after: int


@pytest.fixture(scope="module")
def task_run(
    small_synthetic: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory
) -> Callable[[str], _Run]:
    """Each task's fit, once per module (the checkpoint test reads detect's)."""
    runs: dict[str, _Run] = {}

    def run(task: str) -> _Run:
        if task not in runs:
            L.seed_everything(0)
            out = tmp_path_factory.mktemp(f"fit-{task}")
            dm = _datamodule(small_synthetic(task), task)
            weights = _RecordWeight()
            trainer = build_trainer(
                out, callbacks=[weights], max_epochs=2, limit_train_batches=1,
                limit_val_batches=1, enable_progress_bar=False, enable_model_summary=False,
            )  # fmt: skip
            trainer.fit(_module(dm), datamodule=dm)
            runs[task] = _Run(out, dm, trainer, weights.values, weights, gc.get_freeze_count())
        return runs[task]

    return run


@pytest.mark.slow
@pytest.mark.parametrize("task", ["detect", "segment", "pose", "obb"])
def test_each_task_trains_with_its_loss_terms_and_scores_both_paths(
    task: str, task_run: Callable[[str], _Run]
) -> None:
    run = task_run(task)
    dm, trainer, tmp_path = run.dm, run.trainer, run.out
    logged = trainer.callback_metrics
    for term in TERMS[task]:
        assert torch.isfinite(logged[f"train/o2o_{term}_epoch"])
    for path in ("e2e", "nms"):
        assert f"val/{path}/mAP50-95" in logged
        if task in EXTRA_METRIC:
            assert f"val/{path}/{EXTRA_METRIC[task]}" in logged
    assert logged["val/mAP50-95"] == logged["val/e2e/mAP50-95"]
    assert run.weights == pytest.approx([o2m_weight(0, 2), o2m_weight(1, 2)])

    assert list((tmp_path / "overlays").glob("val_*.jpg"))  # drawn as the task needs
    missing = [name for name in REPORT_FILES if not (tmp_path / name).is_file()]
    assert not missing, f"{task} run report lacks {missing}"  # sizes: test_run_report.py

    info = read_checkpoint_info(tmp_path / "checkpoints" / "last.ckpt")
    assert info.task == task
    assert info.hyper_parameters["class_names"] == dm.schema.class_names
    assert info.hyper_parameters["num_classes"] == dm.schema.num_classes


@pytest.mark.slow
def test_bf16_mixed_precision_with_accumulation_trains(
    small_synthetic: Callable[[str], Path], tmp_path: Path
) -> None:
    L.seed_everything(0)
    dm = _datamodule(small_synthetic("detect"), "detect")
    module = _module(dm, accumulate=2)
    trainer = build_trainer(
        tmp_path, max_epochs=1, limit_train_batches=2, limit_val_batches=1, precision="bf16-mixed",
        enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(module, datamodule=dm)
    assert trainer.global_step == 2  # batches: the module's accumulation steps once
    state = trainer.optimizers[0].state_dict()["state"]
    assert {int(v["step"]) for v in state.values()} == {1}
    assert torch.isfinite(trainer.callback_metrics["train/o2o_box_epoch"])


@pytest.mark.slow
def test_pose_flow_is_trained_and_checkpointed(
    small_synthetic: Callable[[str], Path], tmp_path: Path
) -> None:
    L.seed_everything(0)
    dm = _datamodule(small_synthetic("pose"), "pose")
    module = _module(dm)
    flow_before = {k: v.clone() for k, v in module.state_dict().items() if k.startswith("flow.")}
    assert flow_before
    trainer = build_trainer(
        tmp_path, max_epochs=1, limit_train_batches=2, limit_val_batches=1,
        enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(module, datamodule=dm)
    trained = {id(p) for g in trainer.optimizers[0].param_groups for p in g["params"]}
    assert all(id(p) in trained for p in module.flow.parameters())  # type: ignore[union-attr]
    ckpt = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    moved = [k for k, v in flow_before.items() if not torch.equal(v, ckpt["state_dict"][k])]
    assert moved


@pytest.mark.slow
def test_loading_a_checkpoint_for_another_task_is_refused(task_run: Callable[[str], _Run]) -> None:
    ckpt = task_run("detect").out / "checkpoints" / "last.ckpt"
    assert load_module(ckpt).task == "detect"
    with pytest.raises(CheckpointTaskError, match="trained for detect"):
        load_module(ckpt, task="obb", model="yolo26n-obb")
    with pytest.raises(CheckpointTaskError, match="holds yolo26n, but --model yolo26s was asked"):
        load_module(ckpt, task="detect", model="yolo26s")  # another scale of the same task
    assert load_module(ckpt, task="detect", model="yolo26n").task == "detect"


@pytest.mark.slow
def test_a_checkpoint_with_non_finite_weights_is_refused_where_it_would_be_used(
    task_run: Callable[[str], _Run], tmp_path: Path
) -> None:
    """Validate, predict and export (`load_module`) and a resume (the fit's checkpoint reader)
    refuse it in one line naming the file and the first bad tensor, instead of scoring zeros."""
    ckpt = torch.load(task_run("detect").out / "checkpoints" / "last.ckpt", weights_only=True)
    name = next(k for k, v in ckpt["state_dict"].items() if v.is_floating_point())
    for state in (ckpt["state_dict"], ckpt[EMA_CHECKPOINT_KEY]["shadow"]):
        state[name] = torch.full_like(state[name], float("nan"))
    bad = tmp_path / "diverged.ckpt"
    torch.save(ckpt, bad)
    refusal = rf"diverged.ckpt: 1 of its \d+ weights tensors .*{name}"
    with pytest.raises(CheckpointError, match=refusal):
        load_module(bad)
    with pytest.raises(CheckpointError, match="use an earlier checkpoint"):
        AtomicCheckpointIO().load_checkpoint(bad)


def _without_instances_of_image(batch: Batch, image: int) -> Batch:
    keep = batch.batch_idx != image
    per_instance = {"batch_idx", "labels", "boxes", "difficult", "keypoints"}
    if batch.rboxes.shape[0] == batch.batch_idx.shape[0]:
        per_instance.add("rboxes")
    values = {
        f.name: getattr(batch, f.name)[keep] if f.name in per_instance else getattr(batch, f.name)
        for f in fields(batch)
    }
    return replace(batch, **values)


@pytest.mark.parametrize("task", ["pose", "obb", "segment"])
def test_validation_scores_a_batch_with_an_image_without_instances(
    task: str, small_synthetic: Callable[[str], Path]
) -> None:
    dm = _datamodule(small_synthetic(task), task)
    batch = _without_instances_of_image(next(iter(dm.val_dataloader())), image=0)
    assert int(batch.counts()[0]) == 0
    module = _module(dm).eval()
    gt = None if task == "obb" else dm.coco_ground_truth("val")
    scorer = ValidationScorer(task, dm.schema, gt)  # type: ignore[arg-type]
    with torch.no_grad():
        scorer.update(module.forward_network(batch.float_images()), batch)
    metrics = scorer.compute()
    assert set(metrics) >= {"e2e/mAP50-95", "nms/mAP50-95", "mAP50-95"}


def test_a_pose_module_built_from_its_keypoint_count_alone_scores_its_data(
    small_synthetic: Callable[[str], Path],
) -> None:
    """The API takes ``num_keypoints`` and ``flip_index`` without names (the trainer parity
    fits build it so): its schema names the keypoints by index, and validation's scorer,
    which reads the module's schema, accepts it (it raised 'flip_index must permute 0..K-1')."""
    dm = _datamodule(small_synthetic("pose"), "pose")
    s = dm.schema
    module = module_class("pose")(
        num_classes=s.num_classes, num_keypoints=s.num_keypoints, flip_index=s.flip_index
    )
    assert module.schema.num_keypoints == s.num_keypoints
    assert module.schema.flip_index == s.flip_index
    scorer = Scorers()(module.schema, dm, "val", DecodeSettings())
    assert scorer.schema.num_classes == s.num_classes


def test_a_fit_keeps_what_it_built_out_of_the_cyclic_collector_and_scores_one_index(
    task_run: Callable[[str], _Run],
) -> None:
    """Validation's tens of thousands of result dicts set off the collector's full passes, which
    would scan everything the fit built: that is frozen from the fit's start to its teardown,
    and the split's ground truth is indexed once for every epoch (`run.frozen_heap.FrozenHeap`,
    `tasks.validation.Scorers`; docs/benchmarks/epoch-overhead.md)."""
    run = task_run("detect")
    assert min(run.record.frozen) > 10_000 and run.frozen_after == 0
    first, second = run.record.indices
    assert second is first
