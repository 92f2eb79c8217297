"""`benchmarks/peer_detect.validate_with_lucid`: the peer's trained weights, read from the
authors' checkpoint layout, are validated exactly as lucid validates its own module.

The accuracy comparison puts this row beside the peer's own validation (assumptions D19), so it
must be lucid's validation of those very weights: the same numbers, every decode path and
metric, as validating the module the file was written from.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch

from lucid_testing.authors_layout import authors_state_dict, write_authors_checkpoint
from lucid_testing.benchmark_scripts import load_benchmark
from lucid_train.data import LucidDataModule, SyntheticSpec, synthetic_dataset
from lucid_train.tasks.module import schema_arguments
from lucid_train.tasks.task_modules import module_class
from lucid_train.weights.loading import loadable_keys


@pytest.mark.parametrize(
    ("task", "empty_category"), [("detect", False), ("segment", False), ("detect", True)]
)
def test_the_peers_weights_are_validated_as_lucid_validates_its_own_module(
    task: str, empty_category: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With ``empty_category`` the COCO files also list a category no annotation uses: the peer
    trains without it (`export_for_peer`, D22), so its weights are scored on the fit's classes,
    every tensor of the file in the validated network (a module of another class count would
    leave the class head fresh)."""
    peer_detect = load_benchmark("peer_detect")
    small = SyntheticSpec(num_train=4, num_val=6, min_side=128, max_side=192)
    root = synthetic_dataset(task, cache_dir=tmp_path / "cache", spec=small)  # type: ignore[arg-type]
    if empty_category:
        root = Path(shutil.copytree(root, tmp_path / "with-empty"))
        for split in ("train", "val"):
            path = root / "annotations" / f"{split}.json"
            doc = json.loads(path.read_text())
            doc["categories"].append({"id": 99, "name": "spare"})
            path.write_text(json.dumps(doc))
    dm = LucidDataModule(task, root, img_size=64, batch_size=4, num_workers=0)  # type: ignore[arg-type]
    dm.setup("fit")  # the fit's classes: the annotated categories
    assert 99 not in dm.schema.category_ids
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

    validated: list[L.LightningModule] = []
    validate = L.Trainer.validate

    def recording(trainer: L.Trainer, model: L.LightningModule, **kwargs: Any) -> Any:
        validated.append(model)
        return validate(trainer, model, **kwargs)

    monkeypatch.setattr(L.Trainer, "validate", recording)
    scored = peer_detect.validate_with_lucid(path, {"task": task, "coco_root": str(root)}, args)
    monkeypatch.undo()
    mine, theirs = loadable_keys(module), loadable_keys(validated[0])
    assert mine.keys() == theirs.keys()
    assert all(torch.equal(mine[k], theirs[k]) for k in mine)

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
