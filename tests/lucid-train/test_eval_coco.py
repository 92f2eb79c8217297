"""COCO evaluation (the pycocotools scorer) equals pycocotools called by hand, gives known AP
on hand-made cases, maps labels back to category ids, and scores masks and keypoints with the
stated sigmas."""

from __future__ import annotations

import contextlib
import copy
import io
from typing import Any

import numpy as np
import pytest
import torch
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from lucid_train.evaluation import (
    COCO_KPT_SIGMAS,
    UNIFORM_KPT_SIGMA,
    CocoEvaluator,
    MultiDecodeEvaluator,
    keypoint_sigmas,
)


def _gt(keypoints: bool = False) -> dict[str, Any]:
    cats = [{"id": 5, "name": "a"}, {"id": 9, "name": "b"}]
    if keypoints:
        cats = [{"id": 5, "name": "a", "keypoints": ["l", "r", "c"]}]
    anns: list[dict[str, Any]] = [
        {
            "id": 1,
            "image_id": 1,
            "category_id": 5,
            "bbox": [10, 10, 100, 100],
            "area": 10000,
            "iscrowd": 0,
            "segmentation": [[10, 10, 110, 10, 110, 110, 10, 110]],
        },
        {
            "id": 2,
            "image_id": 2,
            "category_id": 5 if keypoints else 9,
            "bbox": [50, 60, 40, 80],
            "area": 3200,
            "iscrowd": 0,
            "segmentation": [[50, 60, 90, 60, 90, 140, 50, 140]],
        },
    ]
    if keypoints:
        anns[0].update(keypoints=[30, 30, 2, 90, 30, 2, 60, 80, 2], num_keypoints=3)
        anns[1].update(keypoints=[55, 70, 2, 85, 70, 1, 0, 0, 0], num_keypoints=2)
    images = [{"id": i, "file_name": f"{i}.png", "width": 200, "height": 200} for i in (1, 2)]
    return {"images": images, "annotations": anns, "categories": cats}


def test_perfect_boxes_score_one_and_labels_map_back_to_category_ids() -> None:
    """Detections equal to the ground truth, with contiguous labels 0/1 → ids 5/9: mAP 1.0."""
    ev = CocoEvaluator(_gt(), category_ids=(5, 9))
    ev.add(1, [[10, 10, 110, 110]], [0.9], [0])
    ev.add(2, [[50, 60, 90, 140]], [0.8], [1])
    stats = ev.compute()["bbox"]
    assert stats["mAP"] == pytest.approx(1.0)
    assert stats["mAP50"] == pytest.approx(1.0)
    assert {d["category_id"] for d in ev.detections} == {5, 9}


def test_a_shifted_box_scores_the_share_of_thresholds_it_passes() -> None:
    """Shift by 10 px of a 100 px box: IoU 90/110 = 0.818 passes 0.50..0.80 (7 of 10) → AP 0.7."""
    gt = _gt()
    gt["annotations"] = gt["annotations"][:1]
    ev = CocoEvaluator(gt, category_ids=(5, 9))
    ev.add(1, [[20, 10, 120, 110]], [0.9], [0])
    stats = ev.compute()["bbox"]
    assert stats["mAP"] == pytest.approx(0.7)
    assert stats["mAP75"] == pytest.approx(1.0)


def test_wrong_class_scores_zero_and_no_detections_score_zero() -> None:
    """A right box with the wrong category is a miss; an empty result is 0, not an exception."""
    ev = CocoEvaluator(_gt(), category_ids=(5, 9))
    ev.add(1, [[10, 10, 110, 110]], [0.9], [1])
    assert ev.compute()["bbox"]["mAP"] == 0.0
    assert CocoEvaluator(_gt(), category_ids=(5, 9)).compute()["bbox"]["mAP"] == 0.0


def test_results_equal_pycocotools_called_directly_on_the_same_json() -> None:
    """Random detections: every summary statistic of the pycocotools scorer equals a
    hand-driven COCOeval run, exactly (the default scorer is held to it in
    test_eval_compiled_scorer.py)."""
    rng = np.random.default_rng(0)
    gt = _gt()
    ev = CocoEvaluator(gt, category_ids=(5, 9), iou_types=("bbox", "segm"), scorer="pycocotools")
    dets: list[dict[str, Any]] = []
    from pycocotools import mask as mask_utils

    for image_id in (1, 2):
        boxes = rng.uniform(0, 100, (6, 2))
        boxes = np.concatenate([boxes, boxes + rng.uniform(20, 100, (6, 2))], 1)
        scores, labels = rng.uniform(0, 1, 6), rng.integers(0, 2, 6)
        masks = np.zeros((6, 200, 200), bool)
        for i, (x1, y1, x2, y2) in enumerate(boxes.astype(int)):
            masks[i, y1:y2, x1:x2] = True
        ev.add(image_id, boxes, scores, labels, masks=masks)
        rles = mask_utils.encode(np.asfortranarray(masks.transpose(1, 2, 0).astype(np.uint8)))
        for i in range(6):
            x1, y1, x2, y2 = boxes[i]
            dets.append(
                {
                    "image_id": image_id,
                    "category_id": (5, 9)[labels[i]],
                    "bbox": [x1, y1, x2 - x1, y2 - y1],
                    "score": scores[i],
                    "segmentation": rles[i],
                }
            )
    ours = ev.compute()
    for iou_type in ("bbox", "segm"):
        with contextlib.redirect_stdout(io.StringIO()):
            coco = COCO()
            coco.dataset = _gt()
            coco.createIndex()
            res = [dict(d) for d in dets]
            if iou_type == "bbox":
                for d in res:
                    d.pop("segmentation")
            e = COCOeval(coco, coco.loadRes(res), iou_type)
            e.evaluate()
            e.accumulate()
            e.summarize()
        assert list(ours[iou_type].values()) == [float(v) for v in e.stats]


def test_keypoints_use_uniform_sigma_for_non_coco_schemas_and_score_perfect_as_one() -> None:
    """K = 3: sigma 0.072 each; exact keypoints give OKS mAP 1.0."""
    ev = CocoEvaluator(_gt(keypoints=True), category_ids=(5,), iou_types=("keypoints", "bbox"))
    assert ev.kpt_sigmas is not None
    assert ev.kpt_sigmas.tolist() == [UNIFORM_KPT_SIGMA] * 3
    ev.add(1, [[10, 10, 110, 110]], [0.9], [0], keypoints=[[[30, 30, 1], [90, 30, 1], [60, 80, 1]]])
    ev.add(2, [[50, 60, 90, 140]], [0.8], [0], keypoints=[[[55, 70, 1], [85, 70, 1], [0, 0, 0]]])
    stats = ev.compute()
    assert stats["keypoints"]["mAP"] == pytest.approx(1.0)
    assert stats["bbox"]["mAP"] == pytest.approx(1.0)
    np.testing.assert_allclose(keypoint_sigmas(17), COCO_KPT_SIGMAS)
    assert COCO_KPT_SIGMAS[0] == pytest.approx(0.026)
    assert COCO_KPT_SIGMAS[-1] == pytest.approx(0.089)


def test_shifted_keypoints_score_below_one() -> None:
    """Keypoints shifted by 8 px in a 100 px box fall under the tighter OKS thresholds."""
    ev = CocoEvaluator(_gt(keypoints=True), category_ids=(5,), iou_types=("keypoints",))
    ev.add(1, [[10, 10, 110, 110]], [0.9], [0], keypoints=[[[38, 30, 1], [98, 30, 1], [68, 80, 1]]])
    ev.add(2, [[50, 60, 90, 140]], [0.8], [0], keypoints=[[[55, 70, 1], [85, 70, 1], [0, 0, 0]]])
    assert 0.3 < ev.compute()["keypoints"]["mAP"] < 1.0


def test_both_decode_paths_are_scored_separately() -> None:
    """e2e perfect and nms empty give 1.0 and 0.0 from one evaluator object."""
    ev = MultiDecodeEvaluator(("e2e", "nms"), _gt(), (5, 9))
    ev["e2e"].add(1, [[10, 10, 110, 110]], [0.9], [0])
    ev["e2e"].add(2, [[50, 60, 90, 140]], [0.9], [1])
    out = ev.compute()
    assert out["e2e"]["bbox"]["mAP"] == pytest.approx(1.0)
    assert out["nms"]["bbox"]["mAP"] == 0.0


def test_unknown_category_ids_are_refused() -> None:
    """A label map naming ids the ground truth lacks is an error at construction."""
    with pytest.raises(ValueError, match=r"category_ids \[7\] are not categories"):
        CocoEvaluator(_gt(), category_ids=(5, 7))


def test_an_image_without_detections_adds_nothing_even_with_keypoints() -> None:
    """Zero detections with an empty keypoint array (what a pose decode gives) are accepted."""
    from lucid_train.evaluation.coco_eval import CocoEvaluator

    gt = {
        "images": [{"id": 1, "width": 10, "height": 10}],
        "annotations": [],
        "categories": [{"id": 1, "name": "p", "keypoints": ["a", "b"]}],
    }
    evaluator = CocoEvaluator(gt, [1], iou_types=("keypoints",))
    evaluator.add(
        1, np.zeros((0, 4)), np.zeros(0), np.zeros(0, np.int64), keypoints=np.zeros((0, 2, 3))
    )
    assert evaluator.detections == []


def test_scoring_leaves_the_collected_detections_as_they_were() -> None:
    """pycocotools adds keys to the result dicts it loads; ours stay unchanged, so a second
    scoring of the same detections gives the same numbers."""
    ev = CocoEvaluator(_gt(), category_ids=(5, 9), iou_types=("bbox", "segm"))
    masks = np.zeros((1, 200, 200), bool)
    masks[0, 20:110, 10:110] = True
    ev.add(1, [[10, 20, 110, 110]], [0.9], [0], masks=masks)
    ev.add(2, [[50, 60, 90, 140]], [0.8], [1], masks=np.zeros((1, 200, 200), bool))
    before = copy.deepcopy(ev.detections)
    first = ev.compute()
    assert ev.detections == before
    assert ev.compute() == first


def test_rle_encode_of_a_tensor_is_pycocotools_encode() -> None:
    """Runs found on the tensor give pycocotools' own RLEs: random masks, empty and full ones,
    masks that start on, and a single image."""
    from pycocotools import mask as mask_utils

    from lucid_train.evaluation.coco_eval import rle_encode

    g = torch.Generator().manual_seed(0)
    h, w = 37, 53
    masks = torch.rand(6, h, w, generator=g) > 0.6
    masks[1] = False
    masks[2] = True
    masks[3, 0, 0] = True
    masks[4] = False
    masks[4, 10:20, 5:30] = True  # a box of ones, as a decoded mask
    theirs = mask_utils.encode(np.asfortranarray(masks.numpy().transpose(1, 2, 0).astype(np.uint8)))
    assert rle_encode(masks) == theirs
    assert rle_encode(masks[:0]) == []
    one = rle_encode(masks[5:6])
    assert one == theirs[5:6]
    assert np.array_equal(mask_utils.decode(one)[:, :, 0], masks[5].numpy())


def test_an_evaluator_given_mask_tensors_scores_as_given_arrays() -> None:
    boxes = np.array([[12.0, 8.0, 108.0, 104.0], [50.0, 60.0, 90.0, 140.0]])
    masks = np.zeros((2, 200, 200), bool)
    masks[0, 8:104, 12:108] = True  # overlaps image 1's square partly
    masks[1, 60:140, 50:90] = True
    results = []
    for given in (masks, torch.from_numpy(masks)):
        ev = CocoEvaluator(_gt(), category_ids=(5, 9), iou_types=("bbox", "segm"))
        ev.add(1, boxes, [0.9, 0.8], [0, 1], masks=given)
        results.append(ev.compute())
    assert results[0] == results[1]
    assert 0.0 < results[0]["segm"]["mAP"] < 1.0


def test_a_category_without_annotations_is_left_out_of_the_mean_even_when_predicted() -> None:
    """A COCO category with no ground truth (as in the harder sets, assumptions D22) stays a
    class of the model and counts neither way in mAP: pycocotools leaves its precision
    undefined, as the authors' metric keeps only the classes present in the labels. A confident
    false positive of that class changes nothing."""
    from lucid_train.evaluation.coco_eval import coco_from_dict, run_cocoeval

    doc = _gt()
    with_empty = copy.deepcopy(doc)
    with_empty["categories"].append({"id": 12, "name": "never"})
    hits = [
        {"image_id": 1, "category_id": 5, "bbox": [12, 10, 100, 100], "score": 0.9},
        {"image_id": 2, "category_id": 9, "bbox": [50, 62, 40, 80], "score": 0.8},
        {"image_id": 2, "category_id": 5, "bbox": [0, 0, 30, 30], "score": 0.95},  # a miss first
    ]
    ghost = {"image_id": 1, "category_id": 12, "bbox": [10, 10, 100, 100], "score": 0.99}
    base = run_cocoeval(coco_from_dict(doc), hits, "bbox")
    per_class: dict[int, tuple[float, float]] = {}
    empty = run_cocoeval(coco_from_dict(with_empty), [*hits, ghost], "bbox", per_class=per_class)
    assert 0.0 < base["mAP"] < 1.0
    assert empty == base
    assert np.isnan(per_class[12][0]) and not np.isnan(per_class[5][0])


def test_collecting_and_scoring_many_rows_never_start_a_full_collection() -> None:
    """Rows are kept as arrays and scored with the collector paused: adding 200 images of 300
    rows starts no full (generation 2) collection and scoring them none at all (a dict a row,
    or scoring with the collector on, starts them over and over); the collector is on again
    afterwards, as it was."""
    import gc

    rng = np.random.default_rng(0)
    ev = CocoEvaluator(_gt(), category_ids=(5, 9))
    xy = rng.uniform(0, 150, (200, 300, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(5, 50, (200, 300, 2))], -1)
    scores, labels = rng.random((200, 300)), rng.integers(0, 2, (200, 300))
    collections: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    assert gc.isenabled()
    gc.collect()
    gc.callbacks.append(count)
    try:
        for i in range(200):
            ev.add(1 + i % 2, boxes[i], scores[i], labels[i])
        added = list(collections)
        stats = ev.compute()["bbox"]
    finally:
        gc.callbacks.remove(count)
    assert 2 not in added, added
    assert collections == added, collections[len(added) :]
    assert gc.isenabled()
    assert 0 < stats["mAP"] <= 1
    assert len(ev.detections) == 60_000
