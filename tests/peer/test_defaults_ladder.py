"""Defaults no other rung holds (docs/benchmarks/peer-equivalence.md, "What no test holds yet"):
our augmentation defaults and validation decode settings against the values the authors' 8.4.190
code gives at test time: their `default.yaml` as loaded (`DEFAULT_CFG_DICT`), the small-box
filter's signature, and each validator's own confidence floor, IoU and detection cap."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from lucid_train.data.augment import AugmentConfig
from lucid_train.tasks.task_modules import module_class
from lucid_train.tasks.validation import DecodeSettings

# Ours by the same name as theirs. Fill (114) and the small-box filter are checked below.
SHARED = ("hsv_h", "hsv_s", "hsv_v", "degrees", "translate", "scale", "shear", "fliplr",
          "mosaic", "mixup", "copy_paste", "close_mosaic")  # fmt: skip
# Theirs that ours does not implement: each must be off in their defaults for a fit at the
# defaults to mean the same recipe (erasing and auto_augment are classification's only).
NOT_IMPLEMENTED_OFF = {"perspective": 0.0, "flipud": 0.0, "cutmix": 0.0, "bgr": 0.0,
                       "multi_scale": 0.0, "copy_paste_mode": "flip"}  # fmt: skip


def test_augmentation_defaults_are_the_authors_default_yaml() -> None:
    from ultralytics.cfg import DEFAULT_CFG_DICT

    ours = AugmentConfig()
    assert {k: getattr(ours, k) for k in SHARED} == {k: DEFAULT_CFG_DICT[k] for k in SHARED}
    assert {k: DEFAULT_CFG_DICT[k] for k in NOT_IMPLEMENTED_OFF} == NOT_IMPLEMENTED_OFF
    assert not {f.name for f in dataclasses.fields(AugmentConfig)} & set(NOT_IMPLEMENTED_OFF)


def test_small_box_filter_is_the_authors_box_candidates() -> None:
    from ultralytics.data.augment import RandomPerspective

    theirs = inspect.signature(RandomPerspective.box_candidates).parameters
    ours = AugmentConfig()
    assert ours.min_size == theirs["wh_thr"].default == 2
    assert ours.min_visible == theirs["area_thr"].default == 0.1
    assert theirs["ar_thr"].default == 100  # ours: the literal in `warp.transform_targets`


@pytest.mark.parametrize("task", ["detect", "segment", "pose", "obb"])
def test_decode_settings_are_the_authors_validators(task: str) -> None:
    from ultralytics.models import yolo

    validators = {
        "detect": yolo.detect.DetectionValidator,
        "segment": yolo.segment.SegmentationValidator,
        "pose": yolo.pose.PoseValidator,
        "obb": yolo.obb.OBBValidator,
    }
    args = validators[task](args={"task": task}).args
    pose = {"num_keypoints": 17} if task == "pose" else {}
    ours: DecodeSettings = module_class(task)(num_classes=2, **pose).decode_settings
    assert (ours.score_threshold, ours.iou_threshold, ours.max_det) == (
        args.conf,
        args.iou,
        args.max_det,
    )


def test_the_end_to_end_rows_validated_are_the_authors() -> None:
    """The e2e path keeps what the authors' validation keeps of the one-to-one head's top rows:
    the rows above their ``conf`` (their `non_max_suppression`, end2end branch, at test time on
    our rows), not all 300. Logits are spread around the floor, some a hair under it."""
    import torch
    from ultralytics.utils.nms import non_max_suppression

    from lucid_models import BranchOutput, ModelOutput, make_anchors, topk_decode
    from lucid_train.tasks.validation import decode_paths

    sizes = [(8, 8), (4, 4), (2, 2)]  # 84 anchors, 3 classes
    g = torch.Generator().manual_seed(0)
    floor = float(torch.tensor(0.001).logit())
    logits = floor - 1 + torch.randn(2, 84, 3, generator=g) * 1.5  # a quarter above it
    logits[0, :5, 1] = floor  # scores a hair under their conf (1e-3 - 2e-10 in float32)
    branch = BranchOutput(boxes=torch.rand(2, 84, 4, generator=g) * 3, logits=logits)
    output = ModelOutput(branch, branch, *make_anchors(sizes))
    settings = module_class("detect")(num_classes=3).decode_settings
    ours = decode_paths(output, settings)["e2e"]
    rows = topk_decode(output, max_det=settings.max_det, multi_label=settings.multi_label)
    table = torch.cat(
        (rows.boxes, rows.scores[..., None], rows.labels[..., None].float()), -1
    )  # (B, 300, 6) as their end-to-end head gives it; the padding rows score 0
    theirs = non_max_suppression(
        table, settings.score_threshold, settings.iou_threshold, max_det=settings.max_det,
        end2end=True,
    )  # fmt: skip
    for b, kept in enumerate(theirs):
        valid = ours.labels[b] >= 0
        assert 0 < int(valid.sum()) == len(kept) < 84  # the floor bites
        assert torch.equal(ours.scores[b][valid], kept[:, 4])
        assert torch.equal(ours.labels[b][valid].float(), kept[:, 5])
        assert torch.equal(ours.boxes[b][valid], kept[:, :4])
