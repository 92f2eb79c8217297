"""`benchmarks/peer_detect.validate_with_lucid`: the peer's trained weights, read from the
authors' checkpoint layout, are validated exactly as lucid validates its own module.

The accuracy comparison puts this row beside the peer's own validation (assumptions D19), so it
must be lucid's validation of those very weights: the same numbers, every decode path and
metric, as validating the module the file was written from.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import lightning as L
import pytest
import torch

from lucid_testing.authors_layout import authors_state_dict, write_authors_checkpoint
from lucid_testing.benchmark_scripts import load_benchmark
from lucid_train.data import LucidDataModule, SyntheticSpec, synthetic_dataset
from lucid_train.tasks.module import schema_arguments
from lucid_train.tasks.task_modules import module_class


@pytest.mark.parametrize("task", ["detect", "segment"])
def test_the_peers_weights_are_validated_as_lucid_validates_its_own_module(
    task: str, tmp_path: Path
) -> None:
    peer_detect = load_benchmark("peer_detect")
    small = SyntheticSpec(num_train=4, num_val=6, min_side=128, max_side=192)
    root = synthetic_dataset(task, cache_dir=tmp_path / "cache", spec=small)  # type: ignore[arg-type]
    dm = LucidDataModule(task, root, img_size=64, batch_size=4, num_workers=0)  # type: ignore[arg-type]
    dm.setup("validate")
    torch.manual_seed(0)
    suffix = peer_detect.MODEL_SUFFIX[task]
    module = module_class(task)(  # type: ignore[arg-type]
        model=f"yolo26n{suffix}", img_size=64, capture="off", **schema_arguments(dm.schema)
    )
    with torch.no_grad():  # the authors' files hold fp16: make the module's weights exactly that
        for p in module.parameters():
            p.copy_(p.half().float())
    path = write_authors_checkpoint(
        tmp_path / "last.pt",
        authors_state_dict(module),
        task=task,
        num_classes=module.hparams["num_classes"],
    )
    args = argparse.Namespace(imgsz=64, batch=4, workers=0, device="cpu", ours_precision=None)

    scored = peer_detect.validate_with_lucid(path, {"task": task, "coco_root": str(root)}, args)

    trainer = L.Trainer(
        accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False
    )
    direct = trainer.validate(module, datamodule=dm, verbose=False)[0]
    stems = peer_detect._metric_prefixes(task)
    assert set(stems) == ({"box", "mask"} if task == "segment" else {"box"})
    for decode in peer_detect.PATHS:
        for kind, stem in stems.items():
            prefix = "" if kind == "box" else f"{kind}_"
            for stat in ("mAP50-95", "mAP50"):
                got = scored[decode][f"{prefix}pycocotools_{stat}"]
                assert got == float(direct[f"val/{decode}/{stem}{stat}"]), (decode, kind, stat)
