"""Which categories are classes (assumptions D22): a fit leaves out a COCO category that no
annotation in train or val uses, as the YOLO export of such a file does, and says so; validate
and test restrict the data to the checkpoint's classes; YOLO txt keeps every declared name."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from lucid_train.data import LucidDataModule, read_coco, write_yolo
from lucid_train.data.classes import ClassesError
from lucid_train.data.records import DatasetIndex
from lucid_train.tasks.validation import DecodeSettings, Scorers

# the built-in detect set's categories are ids 1-3; these two have no annotation
BEFORE = [{"id": 0, "name": "shapes", "supercategory": "none"}]
AFTER = [{"id": 7, "name": "spare"}]


def _labels_name_their_annotations(index: DatasetIndex, root: Path, split: str) -> int:
    """Every target's class is its annotation's category; returns the targets checked."""
    anns = json.loads((root / "annotations" / f"{split}.json").read_text())["annotations"]
    checked = 0
    for record in index.records:
        for label, pos in zip(record.targets.labels, record.scored, strict=False):
            assert index.schema.category_ids[int(label)] == anns[pos]["category_id"]
            checked += 1
    return checked


def test_a_fit_leaves_out_coco_categories_without_annotations_and_says_so(
    coco_with_categories: Callable[..., Path], caplog: pytest.LogCaptureFixture
) -> None:
    root = coco_with_categories(BEFORE, AFTER)
    read = read_coco(root / "annotations" / "train.json", root / "images" / "train", task="detect")
    assert read.schema.category_ids == (0, 1, 2, 3, 7)  # the reader keeps the file's list
    dm = LucidDataModule("detect", root, batch_size=2, num_workers=0)
    with caplog.at_level(logging.INFO):
        dm.setup("fit")
    assert dm.schema.category_ids == (1, 2, 3)
    assert dm.classes == (1, 2, 3)
    assert "'shapes' (id 0), 'spare' (id 7) without annotations in train or val" in caplog.text
    for split in ("train", "val"):
        assert _labels_name_their_annotations(dm._index(split), root, split) > 0


def test_a_category_annotated_in_val_only_stays_a_class(
    coco_with_categories: Callable[..., Path],
) -> None:
    def spare_in_val(split: str, doc: Any) -> None:
        if split == "val":
            doc["annotations"][0]["category_id"] = 7

    root = coco_with_categories(BEFORE, AFTER, spare_in_val)
    dm = LucidDataModule("detect", root, batch_size=2, num_workers=0)
    dm.setup("fit")
    assert dm.schema.category_ids == (1, 2, 3, 7)
    assert _labels_name_their_annotations(dm._index("val"), root, "val") > 0


@pytest.mark.parametrize(
    ("edit", "differs"),
    [
        # a category (and an annotation of it) in val only: its label had no train class
        (
            lambda doc: (
                doc["categories"].append({"id": 9, "name": "extra"}),
                doc["annotations"][0].update(category_id=9),
            ),
            r"only in \S+val.json: 'extra' \(id 9\)",
        ),
        # one category renamed in val
        (
            lambda doc: doc["categories"][-1].update(name="RENAMED"),
            r"only in \S+train.json: .*only in \S+val.json: 'RENAMED'",
        ),
    ],
    ids=["extra-in-val", "renamed"],
)
def test_splits_that_list_other_classes_are_refused_naming_both_files(
    coco_with_categories: Callable[..., Path], edit: Callable[[Any], Any], differs: str
) -> None:
    def in_val(split: str, doc: Any) -> None:
        if split == "val":
            edit(doc)

    root = coco_with_categories([], [], in_val)
    dm = LucidDataModule("detect", root, batch_size=2, num_workers=0)
    refusal = rf"train.json and \S+val.json list different classes \({differs}.*copy train's"
    with pytest.raises(ClassesError, match=refusal):
        dm.setup("fit")


def test_given_classes_skip_and_count_the_annotations_of_others(
    coco_with_categories: Callable[..., Path],
) -> None:
    """Validate and test pass the checkpoint's ids: another category's annotations are skipped
    and counted (not scored), and an id the data lacks is refused."""
    root = coco_with_categories(BEFORE, AFTER)
    full = read_coco(root / "annotations" / "val.json", root / "images" / "val", task="detect")
    of_two = sum(int((r.targets.labels == 2).sum()) for r in full.records)  # id 2: label 2
    assert of_two > 0
    dm = LucidDataModule("detect", root, batch_size=2, num_workers=0, classes=(1, 3))
    dm.setup("validate")
    val = dm._index("val")
    assert val.schema.category_ids == (1, 3)
    assert val.report.counts[f"category {full.schema.class_names[2]!r} is not a class"] == of_two
    assert sum(len(r.targets) for r in val.records) == sum(len(r.targets) for r in full.records) - (
        of_two
    )
    assert _labels_name_their_annotations(val, root, "val") > 0
    with pytest.raises(ClassesError, match=r"classes \[9\] are not categories of this data"):
        LucidDataModule("detect", root, batch_size=2, num_workers=0, classes=(1, 9))._index("val")
    with pytest.raises(ClassesError, match="expected at least one category id"):
        LucidDataModule("detect", root, batch_size=2, num_workers=0, classes=())._index("val")
    with pytest.raises(ClassesError, match=r"ids \[1\] given twice"):  # was: one class
        LucidDataModule("detect", root, batch_size=2, num_workers=0, classes=(1, 1))._index("val")


def test_validation_refuses_data_of_another_class_count_and_names_the_models_ids(
    coco_with_categories: Callable[..., Path],
) -> None:
    """A model fitted on (1, 2, 3) scored on all five categories would have its classes named
    by the data's list (the peer benchmark's cross-validation scored 0 so): refused, with the
    ids to pass; the same data restricted to them scores."""
    root = coco_with_categories(BEFORE, AFTER)
    fitted = LucidDataModule("detect", root, batch_size=2, num_workers=0)
    fitted.setup("fit")
    model = fitted.schema
    assert model.category_ids == (1, 2, 3)
    every = LucidDataModule("detect", root, batch_size=2, num_workers=0)
    every.setup("validate")
    assert every.schema.num_classes == 5
    with pytest.raises(
        ClassesError, match=r"classes=\[1, 2, 3\]\) or --data.classes '\[1, 2, 3\]'"
    ):
        Scorers()(model, every, "val", DecodeSettings())
    kept = LucidDataModule("detect", root, batch_size=2, num_workers=0, classes=(1, 2, 3))
    kept.setup("validate")
    assert Scorers()(model, kept, "val", DecodeSettings()).schema.category_ids == (1, 2, 3)
    # a model with an id the data lacks: no --data.classes can help, so none is offered
    wider = replace(model, category_ids=(1, 2, 9), class_names=(*model.class_names[:2], "x"))
    with pytest.raises(ClassesError, match=r"the data has no category \[9\]: the model was"):
        Scorers()(wider, every, "val", DecodeSettings())


def test_yolo_txt_keeps_every_name_as_the_authors_trainer_reads_it(
    coco_with_categories: Callable[..., Path], tmp_path: Path
) -> None:
    root = coco_with_categories(BEFORE, AFTER)
    splits = {
        s: read_coco(root / "annotations" / f"{s}.json", root / "images" / s, task="detect")
        for s in ("train", "val")
    }
    data_yaml = write_yolo(splits, tmp_path / "yolo")
    dm = LucidDataModule("detect", data_yaml, batch_size=2, num_workers=0)
    dm.setup("fit")
    assert dm.schema.num_classes == 5
    assert dm.classes is None


def test_given_classes_say_how_many_annotations_of_other_categories_were_skipped(
    coco_with_categories: Callable[..., Path], caplog: pytest.LogCaptureFixture
) -> None:
    """The reader logs its report before the checkpoint's classes restrict the split: the
    annotations that restriction skips are said in a line of their own, by category, not only
    counted in a report nobody prints (a 3-class checkpoint on 4-class data lost a quarter of
    the val labels unsaid)."""
    root = coco_with_categories([], [])
    full = read_coco(root / "annotations" / "val.json", root / "images" / "val", task="detect")
    name = full.schema.class_names[2]
    of_two = sum(int((r.targets.labels == 2).sum()) for r in full.records)
    dm = LucidDataModule("detect", root, batch_size=2, num_workers=0, classes=(1, 2))
    with caplog.at_level(logging.WARNING, logger="lucid_train.data"):
        dm.setup("validate")
    assert f"skipped {of_two} annotation(s) of categories that are not classes " in caplog.text
    assert f"({of_two} x {name!r}); the classes are ids [1, 2]" in caplog.text


def test_validation_refuses_a_model_whose_classes_the_data_names_otherwise(
    coco_with_categories: Callable[..., Path],
) -> None:
    """Data of as many classes at the same ids but other names is other data (or renamed
    classes): scoring the model's class 'circle' as the data's 'dog' is refused, naming the
    pairs; a module built without names (digits) is not held to the data's."""
    root = coco_with_categories([], [])
    fitted = LucidDataModule("detect", root, batch_size=2, num_workers=0)
    fitted.setup("fit")
    model = fitted.schema
    other = replace(model, class_names=tuple(f"other{i}" for i in range(model.num_classes)))
    with pytest.raises(ClassesError, match=rf"id 1: 'other0' \(model\) / {model.class_names[0]!r}"):
        Scorers()(other, fitted, "val", DecodeSettings())
    unnamed = replace(model, class_names=tuple(str(i) for i in range(model.num_classes)))
    assert Scorers()(unnamed, fitted, "val", DecodeSettings()).schema == fitted.schema


def test_classes_that_share_a_name_train_apart_and_the_fit_warns(
    coco_with_categories: Callable[..., Path],
) -> None:
    def same_name(split: str, doc: Any) -> None:
        names = {c["id"]: c for c in doc["categories"]}
        names[3]["name"] = names[1]["name"].upper()

    root = coco_with_categories([], None, same_name)
    dm = LucidDataModule("detect", root, batch_size=2, num_workers=0)
    with pytest.warns(UserWarning, match=r"classes share a name: '\w+' \(ids 1, 3\)"):
        dm.setup("fit")
    assert dm.schema.num_classes == 3  # still three classes, as the authors' trainer keeps them
