"""``lucid validate --save_json``: each decode path's detections as a COCO results file that
pycocotools reads back to the numbers validation printed (within 1e-12; boxes, masks,
keypoints), DOTA task-1 text for obb, and a per-class AP table printed and written."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lucid_testing.module_checkpoints import write_module_checkpoint
from lucid_train.cli import main
from lucid_train.cli.results_files import write_results
from lucid_train.data import LucidDataModule
from lucid_train.evaluation.coco_eval import BOX_STAT_NAMES, KPT_STAT_NAMES
from lucid_train.tasks.validation import DECODE_PATHS, IOU_TYPES, ValidationScorer


def _datamodule(root: Path, task: str) -> LucidDataModule:
    dm = LucidDataModule(task, root, img_size=64, batch_size=4, num_workers=0)  # type: ignore[arg-type]
    dm.setup("validate")
    return dm


def _noisy_coco_scorer(task: str, dm: LucidDataModule, seed: int = 0) -> ValidationScorer:
    """A scorer fed detections made from the ground truth: boxes jittered, random scores,
    labels sometimes wrong, masks shifted, keypoints moved; plus false positives."""
    rng = np.random.default_rng(seed)
    gt = dm.coco_ground_truth("val")
    scorer = ValidationScorer(task, dm.schema, gt)  # type: ignore[arg-type]
    assert scorer.coco is not None
    label_of = {c: i for i, c in enumerate(dm.schema.category_ids)}
    from pycocotools.coco import COCO

    coco = COCO()
    coco.dataset = gt
    coco.createIndex()
    for path in DECODE_PATHS:
        for image in gt["images"]:
            anns = [a for a in gt["annotations"] if a["image_id"] == image["id"]]
            boxes, scores, labels, masks, kpts = [], [], [], [], []
            for a in [*anns, *anns[:1]]:  # the first twice: a duplicate (false positive)
                x, y, w, h = a["bbox"]
                d = rng.normal(0, 0.08 * max(w, h), 4)
                boxes.append([x + d[0], y + d[1], x + w + d[2], y + h + d[3]])
                scores.append(float(rng.uniform(0.05, 1.0)))
                wrong = rng.uniform() < 0.15
                nc = len(label_of)
                labels.append(int(rng.integers(0, nc)) if wrong else label_of[a["category_id"]])
                if task == "segment":
                    masks.append(np.roll(coco.annToMask(a), int(rng.integers(-2, 3)), axis=1))
                if task == "pose":
                    k = np.asarray(a["keypoints"], np.float64).reshape(-1, 3).copy()
                    k[:, :2] += rng.normal(0, 2.0, (k.shape[0], 2))
                    k[:, 2] = rng.uniform(0.2, 1.0, k.shape[0])
                    kpts.append(k)
            kw: dict[str, Any] = {}
            if task == "segment":
                kw["masks"] = np.stack(masks) if masks else np.zeros((0, 1, 1), bool)
            if task == "pose":
                kw["keypoints"] = np.stack(kpts) if kpts else np.zeros((0, 7, 3))
            scorer.coco[path].add(image["id"], np.array(boxes).reshape(-1, 4), scores, labels, **kw)
    return scorer


@pytest.mark.parametrize("task", ["detect", "segment", "pose"])
def test_results_json_reads_back_to_the_same_numbers(
    task: str, small_synthetic: Callable[[str], Path], tmp_path: Path
) -> None:
    """pycocotools' loadRes + COCOeval on the written file give every summary statistic the
    scorer computed (within 1e-12: the compiled scorer's rounding) for each path and metric;
    a class's row of the table equals COCOeval on that class alone."""
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    dm = _datamodule(small_synthetic(task), task)
    scorer = _noisy_coco_scorer(task, dm)
    metrics = scorer.compute()
    assert 0.05 < metrics["mAP50-95"] < 0.95  # neither trivial nor perfect
    written = write_results(scorer, tmp_path, dm.image_files("val"))
    assert {p.name for p in written} == {
        "predictions_e2e.json", "predictions_nms.json", "per_class_ap.csv"
    }  # fmt: skip
    gt_file = tmp_path / "ground_truth.json"
    gt_file.write_text(json.dumps(dm.coco_ground_truth("val")))
    gt = COCO(str(gt_file))
    for path in DECODE_PATHS:
        file = tmp_path / f"predictions_{path}.json"
        expected = scorer.coco[path].compute()  # type: ignore[index]
        for iou_type in IOU_TYPES[task]:  # type: ignore[index]
            dt = gt.loadRes(str(file))
            ev = COCOeval(gt, dt, iou_type)
            if iou_type == "keypoints":
                ev.params.kpt_oks_sigmas = scorer.coco[path].kpt_sigmas  # type: ignore[index]
            ev.evaluate()
            ev.accumulate()
            ev.summarize()
            names = KPT_STAT_NAMES if iou_type == "keypoints" else BOX_STAT_NAMES
            # the compiled scorer's numbers are pycocotools' to 2.2e-16 (coco_eval's docstring)
            assert list(expected[iou_type]) == list(names)
            np.testing.assert_allclose(
                list(expected[iou_type].values()), ev.stats, rtol=0, atol=1e-12
            )
    rows = list(csv.DictReader((tmp_path / "per_class_ap.csv").open()))
    assert [r["class"] for r in rows] == list(dm.schema.class_names)
    cat = dm.schema.category_ids[0]
    ev = COCOeval(gt, gt.loadRes(str(tmp_path / "predictions_e2e.json")), "bbox")
    ev.params.catIds = [cat]
    ev.evaluate()
    ev.accumulate()
    ev.summarize()
    assert float(rows[0]["e2e/box_AP50-95"]) == pytest.approx(ev.stats[0], abs=1e-6)
    assert float(rows[0]["e2e/box_AP50"]) == pytest.approx(ev.stats[1], abs=1e-6)
    assert int(rows[0]["instances"]) == len(gt.getAnnIds(catIds=[cat], iscrowd=False))


def test_obb_results_are_dota_task1_text_in_source_pixels(tmp_path: Path) -> None:
    """One ``Task1_<class>.txt`` per class and path: ``<image stem> <score> x1 y1 .. x4 y4``
    with the canvas corners mapped back through each image's letterbox, every detection once;
    the table holds the evaluator's per-class AP."""
    from lucid_train.data.records import DatasetSchema
    from lucid_train.data.rotated import rbox_corners

    rng = np.random.default_rng(0)
    schema = DatasetSchema("obb", ("bar", "long bar"), (0, 1))
    scorer = ValidationScorer("obb", schema, None)
    images = {7: Path("/data/P0007.png"), 9: Path("/data/P0009.png")}
    letterbox = {7: (0.5, 4.0, 0.0), 9: (2.0, 0.0, 10.0)}
    for image_id in images:
        gt = np.column_stack([rng.uniform(20, 40, (3, 2)), [12, 9, 15], [4, 3, 5], [0.3, -1, 1.2]])
        gt_labels = np.array([0, 1, 1])
        dt = gt + rng.normal(0, 0.5, gt.shape)
        scorer.obb_images.append((image_id, letterbox[image_id]))
        for path in DECODE_PATHS:
            scorer.rotated[path].add(dt, rng.uniform(0.1, 1, 3), gt_labels, gt, gt_labels)
    metrics = scorer.compute()
    write_results(scorer, tmp_path, images)
    for path in DECODE_PATHS:
        seen = 0
        for c, name in enumerate(schema.class_names):
            for line in (tmp_path / f"dota_{path}" / f"Task1_{name}.txt").read_text().splitlines():
                stem, score, *xy = line.split(" ")
                image_id = int(stem[1:])
                k = list(images).index(image_id)
                image = scorer.rotated[path].images[k]
                row = int(np.flatnonzero(image.dt_scores == float(score))[0])
                gain, px, py = letterbox[image_id]
                corners = (rbox_corners(image.dt[row : row + 1])[0] - [px, py]) / gain
                assert image.dt_labels[row] == c
                assert np.array(xy, float).reshape(4, 2).tolist() == corners.tolist()
                seen += 1
        assert seen == 6
    rows = list(csv.DictReader((tmp_path / "per_class_ap.csv").open()))
    r = scorer.rotated_results["e2e"]
    assert float(rows[1]["e2e/rbox_AP50"]) == pytest.approx(r["AP50/1"], abs=1e-6)
    assert float(rows[1]["e2e/rbox_AP50-95"]) == pytest.approx(r["AP50-95/1"], abs=1e-6)
    assert metrics["e2e/mAP50"] == pytest.approx(r["mAP50"])


def test_validate_save_json_writes_and_prints_the_per_class_table(
    small_synthetic: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command: files in ``--save_dir``, the per-class table on the console, and a results
    file pycocotools loads."""
    from pycocotools.coco import COCO

    ckpt = tmp_path / "best.ckpt"
    write_module_checkpoint(ckpt)
    out = tmp_path / "val"
    root = small_synthetic("detect")
    code = main(["validate", "--ckpt", str(ckpt), "--data.root", str(root), "--data.num_workers",
                 "0", "--data.batch_size", "6", "--save_json", "--save_dir", str(out)])  # fmt: skip
    text = capsys.readouterr().out
    assert code == 0
    assert "per-class AP (val)" in text and "e2e/box_AP50-95" in text
    results = json.loads((out / "predictions_e2e.json").read_text())
    assert results and set(results[0]) == {"image_id", "category_id", "bbox", "score"}
    gt = COCO(str(next(root.rglob("*val*.json"))))
    assert len(gt.loadRes(str(out / "predictions_nms.json")).anns) > 0
    assert (out / "per_class_ap.csv").read_text().startswith("class,instances,e2e/box_AP50-95")


def test_a_save_dir_that_cannot_be_made_is_refused_before_scoring(
    small_synthetic: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Was: the whole validation ran, then the results files failed on the folder; now the
    folder is made when the run is set up, and one that cannot be (a file in the way) is one
    line before any image is scored."""
    ckpt = tmp_path / "best.ckpt"
    write_module_checkpoint(ckpt)
    (tmp_path / "taken").write_text("")
    out = tmp_path / "taken" / "val"
    root = small_synthetic("detect")
    code = main(["validate", "--ckpt", str(ckpt), "--data.root", str(root), "--data.num_workers",
                 "0", "--save_json", "--save_dir", str(out)])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 2
    assert f"lucid validate: error: cannot make the folder {out}" in captured.err
    assert "Path  Images" not in captured.out + captured.err  # nothing was scored
