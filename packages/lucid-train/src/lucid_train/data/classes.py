"""Which of a dataset's categories are the model's classes (assumptions D22).

A COCO file may list a category that no annotation uses: exporters such as Roboflow's put the
dataset's own name in as category 0, and the YOLO export of the same data leaves it out, so the
authors' trainer on that export has one class fewer. A fit therefore trains the categories that
have an annotation in its train or val split (`annotated_classes`), says which it left out, and
the checkpoint keeps the ids; validate and test restrict the data to the checkpoint's ids
(`restrict_classes`). YOLO txt and DOTA labelTxt keep every class they declare: the authors'
trainer reads the same ``names`` (their ``nc`` is its length).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from lucid_train.data.records import DatasetIndex, DatasetSchema, ImageRecord
from lucid_train.errors import LucidError

logger = logging.getLogger("lucid_train.data")  # the readers' load reports' logger

__all__ = [
    "ClassesError",
    "annotated_classes",
    "check_split_classes",
    "model_classes",
    "repeated_names_line",
    "restrict_classes",
    "unannotated_line",
]


class ClassesError(LucidError, ValueError):
    """The classes asked for do not fit the data (none, or ids it lacks)."""


def check_split_classes(train: DatasetIndex, val: DatasetIndex, sources: tuple[Path, Path]) -> None:
    """Refuse splits that list other classes (``sources``: the train and val files or folders,
    named in the error): a label index means one class in every split, so a category in one
    file only would score val's labels against the wrong class, or none."""
    a, b = train.schema, val.schema
    pairs_a = list(zip(a.category_ids, a.class_names, strict=True))
    pairs_b = list(zip(b.category_ids, b.class_names, strict=True))
    if pairs_a == pairs_b:
        return
    only_a = [f"{name!r} (id {cid})" for cid, name in pairs_a if (cid, name) not in pairs_b]
    only_b = [f"{name!r} (id {cid})" for cid, name in pairs_b if (cid, name) not in pairs_a]
    what = "; ".join(
        f"only in {src}: {', '.join(names)}"
        for src, names in ((sources[0], only_a), (sources[1], only_b))
        if names
    )
    raise ClassesError(
        f"{sources[0]} and {sources[1]} list different classes ({what or 'another order'}); "
        "every split must list the same categories, with the same ids and names: copy train's "
        "'categories' (COCO) or 'names' (YOLO) into the other split"
    )


def annotated_classes(indices: Iterable[DatasetIndex]) -> tuple[int, ...] | None:
    """The category ids of the classes to train from the splits ``indices`` (one schema): those
    with an annotation in any of them, in the schema's order; None when that is every category,
    when none is (``allow_empty``'s background-only splits) or when a split was not read from a
    COCO file."""
    indices = list(indices)
    if not indices or any(index.coco_json is None for index in indices):
        return None
    schema = indices[0].schema
    used = np.zeros(schema.num_classes, np.bool_)
    for index in indices:
        for record in index.records:
            used[record.targets.labels] = True
    if used.all() or not used.any():  # none annotated: a background-only fit keeps them all
        return None
    return tuple(cid for cid, keep in zip(schema.category_ids, used, strict=True) if keep)


def repeated_names_line(schema: DatasetSchema) -> str | None:
    """The fit's warning when two classes share a name (ignoring case), else None. They train as
    two classes, as the authors' trainer trains them, but a prediction's label cannot say which
    one it is."""
    ids_of: dict[str, list[int]] = {}
    for name, cid in zip(schema.class_names, schema.category_ids, strict=True):
        ids_of.setdefault(name.lower(), []).append(cid)
    shared = [
        f"{name!r} (ids {', '.join(map(str, ids))})" for name, ids in ids_of.items() if len(ids) > 1
    ]
    if not shared:
        return None
    return (
        f"lucid data: classes share a name: {'; '.join(shared)}; they train as separate classes "
        "and predictions cannot tell them apart by name: give them one id if they are one "
        "class, else rename one"
    )


def model_classes(category_ids: Sequence[int]) -> tuple[int, ...] | None:
    """The ``classes`` to validate or test a model of these category ids on (a fit leaves out
    COCO categories without annotations): None where they are its class indices (YOLO txt data,
    or a module built without ids), the data's list as it is."""
    ids = tuple(int(c) for c in category_ids)
    return None if ids == tuple(range(len(ids))) else ids


def unannotated_line(schema: DatasetSchema, kept: Sequence[int]) -> str:
    """The fit's log line naming the categories left out of the classes."""
    kept_ids = set(kept)
    left = [
        f"{name!r} (id {cid})"
        for name, cid in zip(schema.class_names, schema.category_ids, strict=True)
        if cid not in kept_ids
    ]
    return (
        f"lucid data: {', '.join(left)} without annotations in train or val: not a class of the "
        f"model, as the YOLO export of such a file leaves it out ({len(kept)} classes; "
        "--data.classes chooses them)"
    )


def restrict_classes(index: DatasetIndex, category_ids: Sequence[int]) -> DatasetIndex:
    """``index`` with the classes ``category_ids`` (the dataset's ids, in the schema's order
    after restriction) and its labels renumbered to them; an annotation of another category is
    skipped and counted in the load report.

    Raises:
        ClassesError: no id, or one the data's categories lack (a checkpoint of other data).
    """
    schema = index.schema
    wanted = set(int(c) for c in category_ids)
    if not wanted:
        raise ClassesError("--data.classes: expected at least one category id, got none")
    if len(wanted) != len(category_ids):
        twice = sorted({int(c) for c in category_ids if list(category_ids).count(c) > 1})
        raise ClassesError(
            f"--data.classes {list(category_ids)}: ids {twice} given twice; name each once"
        )
    missing = sorted(wanted - set(schema.category_ids))
    if missing:
        raise ClassesError(
            f"{index.report.source}: classes {missing} are not categories of this data (ids "
            f"{list(schema.category_ids)}); give --data.classes ids of this data, or validate a "
            "checkpoint on the data it was trained on"
        )
    keep = [i for i, cid in enumerate(schema.category_ids) if cid in wanted]
    if len(keep) == schema.num_classes:
        return index
    new_label = np.full(schema.num_classes, -1, np.int64)
    new_label[keep] = np.arange(len(keep))
    records: list[ImageRecord] = []
    left_out: dict[str, int] = {}
    for record in index.records:
        labels = new_label[record.targets.labels]
        kept = labels >= 0
        if not kept.all():
            for i in np.flatnonzero(~kept):
                name = schema.class_names[int(record.targets.labels[i])]
                left_out[name] = left_out.get(name, 0) + 1
                index.report.skip(f"category {name!r} is not a class", str(record.path))
            # `scored` lists each target's annotation first, then the crowd regions
            n = len(labels)
            scored = [p for p, k in zip(record.scored[:n], kept, strict=False) if k]
            record = replace(
                record,
                targets=record.targets.select(kept),
                scored=(*scored, *record.scored[n:]),
            )
            labels = labels[kept]
        records.append(replace(record, targets=record.targets.replace(labels=labels)))
    if left_out:  # the reader logged its report before: this part is said here
        logger.warning(
            "%s: skipped %d annotation(s) of categories that are not classes (%s); the "
            "classes are ids %s (--data.classes, or the checkpoint's)",
            index.report.source,
            sum(left_out.values()),
            ", ".join(f"{n} x {name!r}" for name, n in left_out.items()),
            [int(c) for c in category_ids],
        )
    restricted = replace(
        schema,
        class_names=tuple(schema.class_names[i] for i in keep),
        category_ids=tuple(schema.category_ids[i] for i in keep),
    )
    return replace(index, schema=restricted, records=records)
