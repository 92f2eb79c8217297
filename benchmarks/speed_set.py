"""The peer-speed set: harder synthetic scenes as JPEGs of mixed sizes, in COCO layout for ours
and exported to YOLO txt for the peer (`peer_data.export_for_peer`), for any of the four tasks.

`make_set` generates `SHARDS` independently seeded parts side by side (seeds ``seed``..), each
scene re-encoded from PNG at quality 90 with sides 480-640 drawn independently, and merges them
with fresh image and annotation ids. A set already under ``work/coco-TASK`` is reused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from peer_data import export_for_peer

SHARDS = 16  # the set is generated in this many independently seeded parts, side by side


def _make_shard(job: tuple[str, int, int, int, str]) -> tuple[int, dict[str, Any]]:
    """Shard ``k`` of the set: its scenes (seed ``k``) as JPEGs under ``coco``, and its two
    COCO documents (image and annotation ids still the shard's own)."""
    from PIL import Image

    from lucid_train.data import SyntheticSpec, synthetic_dataset

    task, k, train, val, coco = job
    spec = SyntheticSpec(train, val, min_side=480, max_side=640, difficulty="hard")
    src = synthetic_dataset(task, cache_dir=Path(coco).parent / "png", spec=spec, seed=k)  # type: ignore[arg-type]
    docs = {}
    for split in ("train", "val"):
        doc = json.loads((src / "annotations" / f"{split}.json").read_text())
        out = Path(coco) / "images" / split
        out.mkdir(parents=True, exist_ok=True)
        for im in doc["images"]:
            name = f"s{k:02d}-{Path(im['file_name']).with_suffix('.jpg').name}"
            Image.open(src / "images" / split / im["file_name"]).convert("RGB").save(
                out / name, quality=90
            )
            im["file_name"] = name
        docs[split] = doc
    return k, docs


def make_set(
    work: Path, task: str, images: int, seed: int = 0, shards: int = SHARDS
) -> dict[str, Any]:
    """The JPEG set in COCO layout (``work/coco-TASK``) and its YOLO export (``work/yolo-TASK``):
    ``shards`` harder-scene sets made side by side (seeds ``seed``..), merged with fresh ids."""
    from concurrent.futures import ProcessPoolExecutor

    coco = work / f"coco-{task}"
    if not (coco / "annotations" / "val.json").is_file():
        per = -(-images // shards)
        jobs = [(task, seed + k, per, 1, str(coco)) for k in range(shards)]
        with ProcessPoolExecutor(shards) as pool:
            parts = dict(pool.map(_make_shard, jobs))
        (coco / "annotations").mkdir(parents=True, exist_ok=True)
        for split in ("train", "val"):
            merged: dict[str, Any] = {"images": [], "annotations": []}
            for k in sorted(parts):
                doc = parts[k][split]
                merged.setdefault("categories", doc["categories"])
                ids = {}
                for im in doc["images"]:
                    ids[im["id"]] = im["id"] = len(merged["images"]) + 1
                    merged["images"].append(im)
                for ann in doc["annotations"]:
                    ann["image_id"] = ids[ann["image_id"]]
                    ann["id"] = len(merged["annotations"]) + 1
                    merged["annotations"].append(ann)
            (coco / "annotations" / f"{split}.json").write_text(json.dumps(merged))
    splits, _, peer_yaml = export_for_peer(coco, task, work / f"yolo-{task}")
    return {
        "coco": str(coco),
        "peer_yaml": str(peer_yaml),
        "train_images": len(splits["train"].records),
    }
