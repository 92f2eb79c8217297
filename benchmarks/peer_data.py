"""The comparison's sets: built-in, harder, or held-out (`heldout_sets`), in COCO for ours and
exported to YOLO txt for the peer with the same class list."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any


def export_for_peer(root: Path, task: str, yolo: Path) -> tuple[dict[str, Any], Path, Path]:
    """Read the COCO-layout set at ``root`` and write its YOLO txt copy to ``yolo`` (replaced):
    ``(splits, our data.yaml, the peer's data-peer.yaml)``. The peer's yaml gets an absolute
    ``path`` (Ultralytics reads a relative one against its datasets folder or the cwd) and, for
    pose, ``kpt_shape`` / ``flip_idx``; JSON is YAML, so no YAML writer is needed."""
    from lucid_train.data import read_coco, write_yolo
    from lucid_train.data.classes import annotated_classes, restrict_classes

    splits = {
        s: read_coco(root / "annotations" / f"{s}.json", root / "images" / s, task=task)  # type: ignore[arg-type]
        for s in ("train", "val")
    }
    # the classes a fit of ours trains: a category without annotations is left out (D22)
    kept = annotated_classes(splits.values())
    if kept is not None:
        splits = {s: restrict_classes(index, kept) for s, index in splits.items()}
    if yolo.exists():
        shutil.rmtree(yolo)
    ours_yaml = write_yolo(splits, yolo)
    schema = splits["val"].schema
    doc: dict[str, Any] = {
        "path": str(yolo.resolve()),
        "train": "images/train",
        "val": "images/val",
        "names": list(schema.class_names),
    }
    if task == "pose":
        doc["kpt_shape"] = [schema.num_keypoints, 3]
        doc["flip_idx"] = list(schema.flip_index)
    peer_yaml = yolo / "data-peer.yaml"
    peer_yaml.write_text(json.dumps(doc, indent=1) + "\n")
    return splits, ours_yaml, peer_yaml


BUILTIN_SETS = ("builtin", "hard")


def prepare_data(
    work: Path,
    task: str = "detect",
    hard: bool = False,
    set_name: str | None = None,
    set_cache: Path | None = None,
) -> dict[str, Any]:
    """Generate (or reuse) the task's built-in set, its harder benchmark set
    (``SyntheticSpec.hard()``, or ``set_name="hard"``) under ``work/cache``, or the held-out set
    ``set_name`` of `heldout_sets` under ``set_cache`` (built there once; a carried cache is
    reused), and export it to YOLO txt under ``work/yolo-<task>...``; returns paths and counts.
    Every set but the built-in one reaches ``lucid fit`` through ``--data.root``."""
    set_name = set_name or ("hard" if hard else "builtin")
    start = time.perf_counter()
    cache = work / "cache"
    manifest: dict[str, Any] = {}
    if set_name in BUILTIN_SETS:
        from lucid_train.data import SyntheticSpec, synthetic_dataset

        spec = SyntheticSpec.hard() if set_name == "hard" else None
        root = synthetic_dataset(task, cache_dir=cache, spec=spec)  # type: ignore[arg-type]
        label = ("hard" if set_name == "hard" else "built-in") + f" {task} ({root.name})"
    else:
        import heldout_sets

        root = heldout_sets.build(set_cache or work / "heldout", set_name)
        manifest = json.loads((root / "manifest.json").read_text())
        label = f"{set_name} ({root.name}; {manifest['generator']} {manifest['version']})"
    gen_s = time.perf_counter() - start
    yolo = work / f"yolo-{task}{'' if set_name == 'builtin' else '-' + set_name}"
    splits, ours_yaml, peer_yaml = export_for_peer(root, task, yolo)
    schema = splits["val"].schema
    return {
        "task": task,
        "set": label,
        "set_name": set_name,
        "hard": set_name != "builtin",  # read as: fit with --data.root
        "cache_dir": str(cache),
        "coco_root": str(root),
        "val_json": str(root / "annotations" / "val.json"),
        "yolo_root": str(yolo),
        "yolo_data_yaml": str(ours_yaml),
        "peer_data_yaml": str(peer_yaml),
        "train_images": len(splits["train"].records),
        "val_images": len(splits["val"].records),
        "val_instances": int(sum(len(r.targets) for r in splits["val"].records)),
        "class_names": list(schema.class_names),
        "category_ids": [int(c) for c in schema.category_ids],
        "num_keypoints": int(schema.num_keypoints),
        "generate_s": round(gen_s, 2),
        **({"generator": {k: manifest[k] for k in ("generator", "version", "licence", "call")}}
           if manifest else {}),
    }  # fmt: skip
