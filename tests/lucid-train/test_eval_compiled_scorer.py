"""The default COCO scorer (faster-coco-eval's compiled COCOeval) gives pycocotools' numbers:
every summary statistic and per-class AP of `CocoEvaluator` equals pycocotools run by hand on
the same detections at test time, on seeded random cases that hold what validation meets:
crowd regions, images and categories without ground truth, tied scores, more than 100
detections of one class in an image, masks from both encoders, keypoints with our sigmas."""

from __future__ import annotations

import contextlib
import io
from typing import Any

import numpy as np
import pytest
import torch
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from lucid_train.evaluation import (
    DEFAULT_SCORER,
    CocoEvaluator,
    MultiDecodeEvaluator,
    coco_from_dict,
    run_cocoeval,
)
from lucid_train.evaluation.coco_eval import IouType, Scorer

# pycocotools divides by tp + fp + spacing(1): a category whose first detection is a hit has
# precision 1 / (1 + 2**-52) there, faster-coco-eval's 1.0; nothing else differs (2.2e-16)
TOLERANCE = 1e-12
W, H, K = 96, 80, 5
CATEGORY_IDS = (3, 5, 8, 11)  # 11 never has ground truth; contiguous labels 0..3
SIGMAS = np.array([0.02, 0.05, 0.072, 0.09, 0.12])  # not COCO's, not uniform


def _box_mask(x: float, y: float, w: float, h: float) -> np.ndarray:
    m = np.zeros((H, W), np.uint8)
    m[max(0, int(y)) : int(y + h) + 1, max(0, int(x)) : int(x + w) + 1] = 1
    return m


def _uncompressed_rle(mask: np.ndarray) -> dict[str, Any]:
    """A crowd region as COCO's files write it: run lengths, column-major, zeros first."""
    flat = mask.reshape(-1, order="F")
    bounds = np.concatenate(([0], np.flatnonzero(np.diff(flat)) + 1, [flat.size]))
    runs = np.diff(bounds).tolist()
    return {"counts": [0, *runs] if flat[0] else runs, "size": [H, W]}


def _ground_truth(rng: np.random.Generator, n_images: int, iou_type: IouType) -> dict[str, Any]:
    cats = [{"id": c, "name": f"c{c}"} for c in CATEGORY_IDS]
    if iou_type == "keypoints":
        for c in cats:
            c["keypoints"] = [f"k{i}" for i in range(K)]
    images = [
        {"id": 100 + i, "file_name": f"{i}.png", "width": W, "height": H} for i in range(n_images)
    ]
    anns: list[dict[str, Any]] = []
    for k, img in enumerate(images):
        # the first image and one in five others have no ground truth; the last category none
        for _ in range(0 if k == 0 or rng.random() < 0.2 else int(rng.integers(1, 10))):
            w, h = rng.uniform(2, 70), rng.uniform(2, 60)
            x, y = rng.uniform(0, W - w), rng.uniform(0, H - h)
            crowd = int(not anns or rng.random() < 0.1)  # the first one and one in ten
            ann: dict[str, Any] = {
                "id": len(anns) + 1,
                "image_id": img["id"],
                "category_id": int(rng.choice(CATEGORY_IDS[:-1])),
                "bbox": [x, y, w, h],
                # areas off the box's (polygon areas in real sets) move objects between buckets
                "area": w * h * rng.uniform(0.5, 1.0),
                "iscrowd": crowd,
                "segmentation": [[x, y, x + w, y, x + w * rng.uniform(0.3, 1), y + h, x, y + h]],
            }
            if crowd:
                ann["segmentation"] = _uncompressed_rle(_box_mask(x, y, w, h))
            if iou_type == "keypoints":
                v = rng.integers(0, 3, K) * (rng.random() > 0.1)  # some with none labelled
                kp = np.stack([rng.uniform(x, x + w, K), rng.uniform(y, y + h, K), v], 1)
                kp[v == 0, :2] = 0
                ann["keypoints"] = kp.reshape(-1).tolist()
                ann["num_keypoints"] = int((v > 0).sum())
            anns.append(ann)
    return {"images": images, "annotations": anns, "categories": cats}


def _add_detections(
    rng: np.random.Generator, ev: CocoEvaluator, doc: dict[str, Any], iou_type: IouType
) -> None:
    by_image: dict[int, list[dict[str, Any]]] = {}
    for a in doc["annotations"]:
        by_image.setdefault(a["image_id"], []).append(a)
    crowded = int(rng.integers(len(doc["images"])))  # one image: > 100 detections of a class
    for k, img in enumerate(doc["images"]):
        gts = by_image.get(img["id"], [])
        n = 140 if k == crowded else int(rng.integers(0, 60))
        boxes, labels = np.zeros((n, 4)), np.zeros(n, np.int64)
        for i in range(n):
            if gts and rng.random() < 0.6:  # near a ground truth, mostly of its class
                g = gts[int(rng.integers(len(gts)))]
                x, y, w, h = g["bbox"]
                x, y = x + rng.normal(0, 2), y + rng.normal(0, 2)
                w, h = w * rng.uniform(0.7, 1.3), h * rng.uniform(0.7, 1.3)
                label = CATEGORY_IDS.index(g["category_id"])
                if rng.random() < 0.15:
                    label = int(rng.integers(len(CATEGORY_IDS)))
            else:
                w, h = rng.uniform(1, 60), rng.uniform(1, 50)
                x, y = rng.uniform(0, W - w), rng.uniform(0, H - h)
                label = int(rng.integers(len(CATEGORY_IDS)))
            boxes[i] = [x, y, x + w, y + h]
            labels[i] = 0 if k == crowded else label
        scores = rng.uniform(0, 1, n)
        tied = rng.random(n) < 0.4  # scores as a half-precision head gives them: many equal
        scores[tied] = np.round(scores[tied], 1)
        kwargs: dict[str, Any] = {}
        if iou_type == "segm":
            masks = np.zeros((n, H, W), bool)
            for i, (x1, y1, x2, y2) in enumerate(boxes):
                masks[i] = _box_mask(x1, y1, x2 - x1, y2 - y1)
            masks[rng.random(n) < 0.05] = False  # empty masks
            # both encoders: rle_encode on a tensor, pycocotools' encode on an array
            kwargs["masks"] = torch.from_numpy(masks) if k % 2 else masks
        if iou_type == "keypoints":
            kp = rng.uniform(0, 1, (n, K, 3))
            kp[..., 0] = boxes[:, None, 0] + kp[..., 0] * (boxes[:, None, 2] - boxes[:, None, 0])
            kp[..., 1] = boxes[:, None, 1] + kp[..., 1] * (boxes[:, None, 3] - boxes[:, None, 1])
            kwargs["keypoints"] = kp
        ev.add(img["id"], boxes, scores, labels, **kwargs)


def _pycocotools(
    doc: dict[str, Any], results: list[dict[str, Any]], iou_type: IouType
) -> tuple[list[float], dict[int, tuple[float, float]]]:
    """pycocotools as its README calls it, and the per-class AP read from its precision."""
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO()
        gt.dataset = {**doc, "info": {}}
        gt.createIndex()
        ev = COCOeval(gt, gt.loadRes([dict(d) for d in results]), iou_type)
        if iou_type == "keypoints":
            ev.params.kpt_oks_sigmas = SIGMAS
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    per_class = {}
    for k, cat in enumerate(ev.params.catIds):
        p = ev.eval["precision"][:, :, k, 0, -1]
        per_class[int(cat)] = (
            float(p[p > -1].mean()) if (p > -1).any() else float("nan"),
            float(p[0][p[0] > -1].mean()) if (p[0] > -1).any() else float("nan"),
        )
    return [float(v) for v in ev.stats], per_class


CASES = [(iou_type, seed) for iou_type in ("bbox", "segm", "keypoints") for seed in range(8)]


@pytest.mark.parametrize(("iou_type", "seed"), CASES)
def test_the_compiled_scorer_gives_pycocotools_numbers(iou_type: IouType, seed: int) -> None:
    """Every summary statistic and per-class AP (AP50-95, AP50) of the default scorer equals
    pycocotools' within 1e-12 on a random case; the case is checked to hold crowds, an image
    without ground truth, a category without any and ties in score."""
    assert DEFAULT_SCORER == "faster"
    rng = np.random.default_rng(1000 * seed + len(iou_type))
    doc = _ground_truth(rng, int(rng.integers(4, 9)), iou_type)
    ev = CocoEvaluator(doc, CATEGORY_IDS, (iou_type,), SIGMAS if iou_type == "keypoints" else None)
    _add_detections(rng, ev, doc, iou_type)
    ours = ev.compute()[iou_type]
    results = ev.results(iou_type)
    assert len(results) > 100 and any(a["iscrowd"] for a in doc["annotations"])
    assert {i["id"] for i in doc["images"]} - {a["image_id"] for a in doc["annotations"]}
    assert len({d["score"] for d in results}) < len(results)

    stats, per_class = _pycocotools(doc, results, iou_type)
    assert len(ours) == len(stats)
    np.testing.assert_allclose(list(ours.values()), stats, rtol=0, atol=TOLERANCE)
    assert sorted(ev.per_class[iou_type]) == sorted(per_class) == sorted(CATEGORY_IDS)
    for cat, (ap, ap50) in per_class.items():
        np.testing.assert_allclose(ev.per_class[iou_type][cat], (ap, ap50), rtol=0, atol=TOLERANCE)
    assert np.isnan(per_class[CATEGORY_IDS[-1]][0])  # no ground truth: undefined, both sides


def test_all_scores_tied_keep_pycocotools_order() -> None:
    """Every detection at one score: which ones match depends only on the order they were
    given in (pycocotools' stable sort), and the compiled scorer keeps that order."""
    rng = np.random.default_rng(7)
    doc = _ground_truth(rng, 6, "bbox")
    drawn = CocoEvaluator(doc, CATEGORY_IDS)
    _add_detections(rng, drawn, doc, "bbox")
    ev = CocoEvaluator(doc, CATEGORY_IDS)
    for d in drawn.detections:  # the same rows, one image at a time, every score 0.5
        x, y, w, h = d["bbox"]
        ev.add(d["image_id"], [[x, y, x + w, y + h]], [0.5], [CATEGORY_IDS.index(d["category_id"])])
    assert {d["score"] for d in ev.results("bbox")} == {0.5}
    stats, _ = _pycocotools(doc, ev.results("bbox"), "bbox")
    np.testing.assert_allclose(list(ev.compute()["bbox"].values()), stats, atol=TOLERANCE)


def test_both_scorers_agree_on_no_detections_and_reject_an_unknown_one() -> None:
    """No detections: every statistic 0.0 from either scorer (pycocotools itself refuses an
    empty result list); per-class AP 0.0 for every category. A scorer not named is an error."""
    doc = _ground_truth(np.random.default_rng(3), 4, "bbox")
    for scorer in ("faster", "pycocotools"):
        per_class: dict[int, tuple[float, float]] = {}
        stats = run_cocoeval(coco_from_dict(doc, scorer), [], "bbox", per_class=per_class)
        assert set(stats.values()) == {0.0}
        assert per_class == dict.fromkeys(CATEGORY_IDS, (0.0, 0.0))
    assert isinstance(CocoEvaluator(doc, CATEGORY_IDS, scorer="pycocotools").gt, COCO)
    with pytest.raises(ValueError, match="scorer"):
        CocoEvaluator(doc, CATEGORY_IDS, scorer="fast")  # type: ignore[arg-type]


def _assert_paths_score_as_pycocotools(
    rng: np.random.Generator, paths: MultiDecodeEvaluator, doc: dict[str, Any], kind: IouType
) -> None:
    """Random detections into both paths ``a`` and ``b``; each path and type scores as
    pycocotools on its own."""
    for path in ("a", "b"):
        _add_detections(rng, paths[path], doc, kind)
    for path, per_type in paths.compute().items():
        for iou_type, ours in per_type.items():
            stats, _ = _pycocotools(doc, paths[path].results(iou_type), iou_type)
            np.testing.assert_allclose(list(ours.values()), stats, rtol=0, atol=TOLERANCE)


@pytest.mark.parametrize("iou_types", [("bbox", "segm"), ("keypoints", "bbox")])
def test_decode_paths_sharing_one_ground_truth_score_as_each_alone(
    iou_types: tuple[IouType, IouType],
) -> None:
    """`MultiDecodeEvaluator`'s paths share one ground truth index, which scoring annotates
    (ignore flags, RLEs): each path and type still scores as pycocotools does on its own."""
    rng = np.random.default_rng(11)
    kind: IouType = "segm" if "segm" in iou_types else "keypoints"
    doc = _ground_truth(rng, 5, kind)
    sigmas = SIGMAS if kind == "keypoints" else None
    paths = MultiDecodeEvaluator(("a", "b"), doc, CATEGORY_IDS, iou_types, sigmas)
    _assert_paths_score_as_pycocotools(rng, paths, doc, kind)


@pytest.mark.parametrize("scorer", ["faster", "pycocotools"])
@pytest.mark.parametrize("iou_types", [("bbox", "segm"), ("keypoints", "bbox")])
def test_one_ground_truth_index_scored_again_each_epoch_gives_pycocotools_numbers(
    iou_types: tuple[IouType, IouType], scorer: Scorer
) -> None:
    """The fit builds a split's index once and hands it to every epoch's evaluators
    (`lucid_train.tasks.validation.Scorers`): each later epoch, with other detections, still
    scores as pycocotools does on a fresh copy of the ground truth."""
    rng = np.random.default_rng(12)
    kind: IouType = "segm" if "segm" in iou_types else "keypoints"
    doc = _ground_truth(rng, 5, kind)
    sigmas = SIGMAS if kind == "keypoints" else None
    index = coco_from_dict(doc, scorer)
    for _epoch in range(3):
        paths = MultiDecodeEvaluator(
            ("a", "b"), doc, CATEGORY_IDS, iou_types, sigmas, scorer, index=index
        )
        assert all(paths[p].gt is index for p in ("a", "b"))
        _assert_paths_score_as_pycocotools(rng, paths, doc, kind)
