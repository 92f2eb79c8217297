"""Rung g of the ladder: the same weights, on the same images, score the same mAP through our
validation and through the authors' validator, both sets of detections scored by pycocotools.

The weights are a short CPU overfit of ours (random weights detect nothing, and 0 = 0 would hold
any validator), loaded under the authors' names into their own model class. The sources are
exactly the canvas size, so neither letterbox resamples (their cv2 resize and our Pillow warp
differ by design, assumptions D18) and both sides see the same pixels: what is left to differ is
the validator's decode, thresholds, detection caps and coordinate mapping.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch

from lucid_testing.authors_layout import authors_state_dict
from lucid_testing.benchmark_scripts import load_benchmark
from lucid_train.data import SyntheticSpec
from lucid_train.overfit import fit_overfit, spec_for

SIDE = 128  # source side = canvas side: no resample on either side
# Both sides see the same pixels and the networks agree to 4e-7; the authors' predictions.json
# rounds boxes to 1e-3 px and scores to 1e-5, which can reorder near-ties in the scorer.
TOLERANCE = 1e-3


def _their_validation(
    module: Any, yolo_yaml: Path, work: Path, nms: bool, num_classes: int
) -> dict[str, Any]:
    from ultralytics import YOLO
    from ultralytics.nn.tasks import DetectionModel

    model = DetectionModel("yolo26n.yaml", nc=num_classes, verbose=False)
    model.load_state_dict(authors_state_dict(module, dtype=torch.float32), strict=True)
    weights = work / "lucid-weights.pt"
    torch.save({"model": model, "train_args": {"task": "detect", "imgsz": SIDE}}, weights)
    name = "nms" if nms else "e2e"
    metrics = YOLO(str(weights)).val(
        data=str(yolo_yaml), imgsz=SIDE, batch=4, device="cpu", workers=0, nms=nms, rect=False,
        save_json=True, plots=False, project=str(work), name=name, exist_ok=True, verbose=False,
    )  # fmt: skip
    return {"predictions": Path(metrics.save_dir) / "predictions.json", "own": metrics.box.map}


@pytest.mark.slow
def test_the_same_weights_score_the_same_map_through_both_validators(tmp_path: Path) -> None:
    peer = load_benchmark("peer_detect")
    spec = spec_for("detect", "cpu")
    sources = SyntheticSpec(num_train=spec.images, num_val=2, min_side=SIDE, max_side=SIDE)
    module, _, dm, _ = fit_overfit(spec, tmp_path / "fit", synthetic=sources)
    module.eval()

    ours = L.Trainer(
        accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False
    ).validate(module, datamodule=dm, verbose=False)[0]

    # The overfit scores the images it trained on: their validator reads that split too.
    splits, _, peer_yaml = peer.export_for_peer(dm.root, "detect", tmp_path / "yolo")
    doc = json.loads(peer_yaml.read_text())
    peer_yaml.write_text(json.dumps({**doc, "val": "images/train"}))
    gt = json.loads((dm.root / "annotations" / "train.json").read_text())
    data = {"category_ids": [int(c) for c in splits["train"].schema.category_ids]}
    num_classes = int(module.hparams["num_classes"])

    for decode in peer.PATHS:
        theirs = _their_validation(module, peer_yaml, tmp_path, decode == "nms", num_classes)
        scored = peer.rescore(theirs["predictions"], gt, data, "detect")
        for stat in ("mAP50-95", "mAP50"):
            mine = float(ours[f"val/{decode}/{stat}"])
            theirs_score = scored[f"pycocotools_{stat}"]
            print(f"{decode} {stat}: ours {mine:.5f}, theirs {theirs_score:.5f}")  # for -rP
            assert mine > 0.2, (decode, stat, mine)  # weights that detect: the check can fail
            assert abs(theirs_score - mine) <= TOLERANCE, (
                decode, stat, theirs_score, mine, theirs["own"],
            )  # fmt: skip
