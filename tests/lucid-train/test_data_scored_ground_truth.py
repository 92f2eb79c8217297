"""Validation scores exactly what the loader kept: a perfect prediction of the records' targets
scores mAP 1.000 on every bad-box case (negative, zero-width, fully outside, partly outside, a
YOLO zero-width box), because the ground truth pycocotools gets is the kept instances, clipped
as the reader clipped them, of the kept images."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lucid_train.data import LucidDataModule
from lucid_train.data.records import DataFormatError, DatasetIndex
from lucid_train.evaluation.coco_eval import coco_from_dict, run_cocoeval

W, H = 64, 48
GOOD = [4.0, 4.0, 20.0, 16.0]
BAD_BOXES: dict[str, list[float]] = {
    "negative": [30.0, 20.0, -8.0, 6.0],
    "zero-width": [30.0, 20.0, 0.0, 6.0],
    "fully-outside": [70.0, 50.0, 10.0, 10.0],
    "partly-outside": [50.0, 30.0, 30.0, 30.0],  # clipped to [50, 30, 64, 48]
}


def _coco_set(root: Path, bad: list[float], write_image: Callable[..., Path]) -> Path:
    for split in ("train", "val"):
        for name in ("a.png", "b.png"):
            write_image(root / "images" / split / name, W, H)
        anns = [
            {"id": 1, "image_id": 1, "category_id": 1, "bbox": GOOD, "iscrowd": 0, "area": 320.0},
            {"id": 2, "image_id": 1, "category_id": 2, "bbox": bad, "iscrowd": 0, "area": 48.0},
            {"id": 3, "image_id": 2, "category_id": 2, "bbox": GOOD, "iscrowd": 0, "area": 320.0},
            # an image the reader skips (missing file): its box must not be scored either
            {"id": 4, "image_id": 3, "category_id": 1, "bbox": GOOD, "iscrowd": 0, "area": 320.0},
        ]
        doc = {
            "images": [
                {"id": i, "file_name": n, "width": W, "height": H}
                for i, n in ((1, "a.png"), (2, "b.png"), (3, "gone.png"))
            ],
            "annotations": anns,
            "categories": [{"id": 1, "name": "cat"}, {"id": 2, "name": "dog"}],
        }
        (root / "annotations").mkdir(parents=True, exist_ok=True)
        (root / "annotations" / f"{split}.json").write_text(json.dumps(doc))
    return root


def _perfect(index: DatasetIndex) -> list[dict[str, Any]]:
    """Detections equal to every target the loader kept, in the dataset's category ids."""
    out = []
    for rec in index.records:
        for box, label in zip(rec.targets.boxes, rec.targets.labels, strict=True):
            x1, y1, x2, y2 = (float(v) for v in box)
            out.append(
                {
                    "image_id": rec.image_id,
                    "category_id": index.schema.category_ids[int(label)],
                    "bbox": [x1, y1, x2 - x1, y2 - y1],
                    "score": 0.9,
                }
            )
    return out


@pytest.mark.parametrize("case", sorted(BAD_BOXES))
def test_a_perfect_prediction_of_what_the_coco_reader_kept_scores_one(
    case: str, tmp_path: Path, write_image: Callable[..., Path]
) -> None:
    root = _coco_set(tmp_path / case, BAD_BOXES[case], write_image)
    dm = LucidDataModule("detect", root, img_size=64, batch_size=2, num_workers=0)
    index = dm.split_index("val")
    gt = dm.coco_ground_truth("val")
    kept = sum(len(r.targets) for r in index.records)
    assert len([a for a in gt["annotations"] if not a.get("iscrowd")]) == kept
    assert sorted(im["id"] for im in gt["images"]) == [1, 2]  # the missing image is not scored
    stats = run_cocoeval(coco_from_dict(gt), _perfect(index), "bbox")
    assert stats["mAP"] == pytest.approx(1.0, abs=1e-9), stats
    if case == "partly-outside":
        (clipped,) = [a["bbox"] for a in gt["annotations"] if a["id"] == 2]
        assert clipped == [50.0, 30.0, 14.0, 18.0]


def test_crowd_regions_of_kept_images_stay_in_the_ground_truth(
    tmp_path: Path, write_image: Callable[..., Path]
) -> None:
    root = _coco_set(tmp_path, GOOD, write_image)
    doc = json.loads((root / "annotations" / "val.json").read_text())
    doc["annotations"].append(
        {"id": 9, "image_id": 2, "category_id": 1, "bbox": [40, 2, 20, 20], "iscrowd": 1,
         "area": 400.0}
    )  # fmt: skip
    (root / "annotations" / "val.json").write_text(json.dumps(doc))
    dm = LucidDataModule("detect", root, img_size=64, batch_size=2, num_workers=0)
    gt = dm.coco_ground_truth("val")
    crowd = [a for a in gt["annotations"] if a.get("iscrowd")]
    assert [a["id"] for a in crowd] == [9] and crowd[0]["bbox"] == [40, 2, 20, 20]
    stats = run_cocoeval(coco_from_dict(gt), _perfect(dm.split_index("val")), "bbox")
    assert stats["mAP"] == pytest.approx(1.0, abs=1e-9)


def test_a_zero_width_yolo_box_is_skipped_counted_and_not_scored(
    tmp_path: Path, write_image: Callable[..., Path]
) -> None:
    """The COCO reader's rule for the same box: no area, no instance."""
    for split in ("train", "val"):
        write_image(tmp_path / "images" / split / "a.png", W, H)
        (tmp_path / "labels" / split).mkdir(parents=True)
        (tmp_path / "labels" / split / "a.txt").write_text(
            "0 0.5 0.5 0.25 0.25\n1 0.3 0.3 0 0.2\n1 0.7 0.7 0.2 0.2\n"
        )
    (tmp_path / "data.yaml").write_text(
        "path: .\ntrain: images/train\nval: images/val\nnames: [cat, dog]\n"
    )
    dm = LucidDataModule("detect", tmp_path, img_size=64, batch_size=1, num_workers=0)
    index = dm.split_index("val")
    assert len(index.records[0].targets) == 2
    assert index.report.counts == {"empty box (zero width or height)": 1}
    assert "a.txt:2" in index.report.examples["empty box (zero width or height)"][0]
    gt = dm.coco_ground_truth("val")
    assert len(gt["annotations"]) == 2
    stats = run_cocoeval(coco_from_dict(gt), _perfect(index), "bbox")
    assert stats["mAP"] == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize("area", [-5.0, float("nan"), float("inf"), 1e12, None, "12"])
def test_a_coco_area_the_scorer_would_ignore_is_refused_naming_the_annotation(
    area: Any, tmp_path: Path, write_image: Callable[..., Path]
) -> None:
    """An area outside COCOeval's ranges [0, 1e10] made every object of the file ignored (mAP
    -1.000, unsaid); a string or null stopped pycocotools with a TypeError."""
    root = _coco_set(tmp_path, GOOD, write_image)
    doc = json.loads((root / "annotations" / "val.json").read_text())
    doc["annotations"][2]["area"] = area
    (root / "annotations" / "val.json").write_text(json.dumps(doc))
    dm = LucidDataModule("detect", root, img_size=64, batch_size=2, num_workers=0)
    with pytest.raises(DataFormatError, match=r"val\.json: annotation 3: 'area' must be .*"
                       r"remove the key to have it computed from 'bbox'"):  # fmt: skip
        dm.split_index("val")


def test_a_coco_file_without_areas_scores_its_boxes(
    tmp_path: Path, write_image: Callable[..., Path]
) -> None:
    root = _coco_set(tmp_path, GOOD, write_image)
    doc = json.loads((root / "annotations" / "val.json").read_text())
    for ann in doc["annotations"]:
        del ann["area"]
    (root / "annotations" / "val.json").write_text(json.dumps(doc))
    dm = LucidDataModule("detect", root, img_size=64, batch_size=2, num_workers=0)
    gt = dm.coco_ground_truth("val")
    for scorer in ("faster", "pycocotools"):
        detections = _perfect(dm.split_index("val"))
        stats = run_cocoeval(coco_from_dict(gt), detections, "bbox", scorer=scorer)
        assert stats["mAP"] == pytest.approx(1.0, abs=1e-9), (scorer, stats)
