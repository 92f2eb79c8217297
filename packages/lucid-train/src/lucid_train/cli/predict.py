"""``lucid predict``: run a trained module on images and write JSON and overlays.

Each image is letterboxed to the module's training size, decoded end to end (top-k of the
one-to-one branch, no NMS), and mapped back to source pixels. Output in ``out_dir``:
``predictions.json`` (one entry per image, with its overlay's name) and ``<stem>.jpg`` overlays
drawn on the source image, in the source folder's subfolders; an image whose stem another image
of its folder already took (``a.jpg`` beside ``a.png``) gets ``<name>.jpg`` (``a.png.jpg``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pycocotools.mask as mask_utils
import torch

from lucid_models import topk_decode
from lucid_models.postprocessing import masks_to_source
from lucid_train.atomic_files import save_image, write_text
from lucid_train.data.augment.letterbox import LetterboxParams
from lucid_train.data.augment.warp import warp_image
from lucid_train.data.image_io import (
    IMAGE_SUFFIXES,
    UNREAD_SUFFIXES,
    CorruptImageError,
    open_rgb,
)
from lucid_train.errors import SettingError, check_range
from lucid_train.report.overlays import draw_overlay

__all__ = ["iter_images", "predict_images"]


VIDEO_SUFFIXES = frozenset({".mp4", ".avi", ".mov", ".mkv", ".webm", ".m4v", ".mpg", ".mpeg"})


def iter_images(source: str | Path) -> Iterator[Path]:
    """The image ``source``, or the images of the folder ``source`` (sorted, recursive).

    Raises:
        FileNotFoundError: nothing there, or a folder without images (names the path).
    """
    if "://" in str(source):
        raise FileNotFoundError(
            f"--source {source}: a URL; lucid predict reads local files: download it first"
        )
    p = Path(source)
    if p.is_file() and p.suffix.lower() in VIDEO_SUFFIXES:
        raise CorruptImageError(
            f"--source {p}: a video; lucid predict reads images: extract its frames first "
            f"(ffmpeg -i {p.name} frames/%06d.jpg) and pass the folder"
        )
    if p.is_file() and p.suffix.lower() == ".txt":  # the authors' predict reads it as a list
        raise CorruptImageError(
            f"--source {p}: a text file; lucid predict reads an image or a folder, not a list of "
            "images: copy or link the listed images into one folder and pass that"
        )
    if p.is_file():
        yield p
        return
    if not p.is_dir():
        wildcard = (
            "; lucid predict does not expand wildcards: pass the folder that holds the images"
            if any(c in str(source) for c in "*?[")
            else ""
        )
        raise FileNotFoundError(f"--source {p}: no such file or folder{wildcard}")
    files = list(p.rglob("*"))  # one walk of the folder for the images and the passed-over
    found = sorted(q for q in files if q.suffix.lower() in IMAGE_SUFFIXES)
    unread = _unread_files(files)
    if not found:
        raise FileNotFoundError(
            f"--source {p}: no images ({', '.join(sorted(IMAGE_SUFFIXES))}) in this folder"
            + (f"; it holds {unread}" if unread else "")
        )
    if unread:  # a phone's .heic beside its .jpg, a clip among frames: not passed over unsaid
        print(f"lucid predict: passed over {unread}", file=sys.stderr)
    yield from found


def _unread_files(files: list[Path]) -> str:
    """The videos and the image formats lucid does not decode among ``files`` (a folder's),
    counted with the fix for each, or ''."""
    videos = sorted(q.name for q in files if q.suffix.lower() in VIDEO_SUFFIXES)
    images = sorted(q.name for q in files if q.suffix.lower() in UNREAD_SUFFIXES)
    parts = [
        f"{len(names)} {what} ({', '.join(names[:3])}{' ...' * (len(names) > 3)}): {fix}"
        for names, what, fix in (
            (videos, "video(s)", "extract their frames (ffmpeg -i clip.mp4 frames/%06d.jpg)"),
            (images, "image(s) in a format lucid does not read", "convert them to JPEG or PNG"),
        )
        if names
    ]
    return "; ".join(parts)


@torch.no_grad()
def predict_images(
    module: Any,
    source: str | Path,
    out_dir: str | Path,
    *,
    img_size: int | None = None,
    conf: float = 0.25,
    device: str | torch.device = "cpu",
) -> Path:
    """Predict every image of ``source`` with ``module`` (a `YOLOModule`).

    Args:
        module: the trained module (e.g. from `lucid_train.tasks.restore.load_module`).
        source: an image or a folder.
        out_dir: where ``predictions.json`` and the overlays go (created).
        img_size: canvas side; None uses the module's training size.
        conf: detections scoring at or below it are left out.
        device: where the network runs.

    Returns:
        The path of ``predictions.json``.
    """
    check_range("conf", conf, low=0.0, high=1.0, flag="--conf")
    try:
        device = torch.device(device)
    except RuntimeError:
        raise SettingError(f"--device {device}: not a device; use cpu, cuda or cuda:N") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SettingError(
            f"--device {device}: torch finds no CUDA device here; use --device cpu, or run "
            "where torch.cuda.is_available() is true"
        )
    out = Path(out_dir)
    paths = list(iter_images(source))
    overlays = _overlay_names(paths, source)
    _refuse_overwriting_sources(paths, overlays, out)
    out.mkdir(parents=True, exist_ok=True)
    size = int(img_size or module.hparams.get("img_size", 640))
    module = module.to(device).eval()
    hp = module.hparams
    names = list(hp["class_names"])
    results: list[dict[str, Any]] = []
    bad: list[str] = []
    for path, overlay in zip(paths, overlays, strict=True):
        try:
            image = open_rgb(path)
        except CorruptImageError as err:
            if Path(source).is_file():  # the one image asked for: its error is the answer
                raise CorruptImageError(
                    f"--source {path}: cannot decode image ({err.__cause__ or err}); re-encode "
                    "it, or give another file or a folder (whose undecodable files are skipped "
                    "and counted)"
                ) from err
            bad.append(f"{path.name} ({err.__cause__ or err})")
            continue
        lb = LetterboxParams.fit(image.height, image.width, size)
        canvas = np.array(warp_image(image, lb.matrix, (size, size)), np.uint8)  # writable
        x = torch.from_numpy(canvas).to(device).permute(2, 0, 1)[None].float().div_(255)
        output = module.forward_network(x)
        det = topk_decode(output, max_det=int(hp.get("max_det", 300)), score_threshold=conf)
        keep = (det.labels[0] >= 0).cpu().numpy()
        boxes = lb.boxes_to_source(det.boxes[0].cpu().numpy()[keep])
        boxes[:, 0::2] = boxes[:, 0::2].clip(0, image.width)
        boxes[:, 1::2] = boxes[:, 1::2].clip(0, image.height)
        scores = det.scores[0].cpu().numpy()[keep]
        labels = det.labels[0].cpu().numpy()[keep]
        record: dict[str, Any] = {
            "image": np.asarray(image, np.uint8),
            "boxes": boxes,
            "scores": scores,
            "labels": labels,
        }
        if det.rotated is not None:
            record["rotated"] = lb.rboxes_to_source(det.rotated[0].cpu().numpy()[keep])
        if det.keypoints is not None:
            k = det.keypoints[0].cpu().numpy()[keep].astype(np.float64)
            k[..., :2] = lb.to_source(k[..., :2])
            record["keypoints"] = k
        if det.mask_coefficients is not None and output.prototypes is not None:
            n = int(keep.sum())
            record["masks"] = masks_to_source(
                det.mask_coefficients[0, :n].float(),
                output.prototypes[0].float(),
                boxes,
                (lb.gain, lb.pad_x, lb.pad_y),
                size,
                (image.height, image.width),
            )
        (out / overlay).parent.mkdir(parents=True, exist_ok=True)
        save_image(draw_overlay(record, names, hp.get("skeleton", ())), out / overlay)
        results.append({**_json_entry(path, image.size, record, names), "overlay": str(overlay)})
    if bad and not results:
        raise CorruptImageError(
            f"--source {source}: none of its {len(paths)} image(s) can be decoded: "
            f"{'; '.join(bad[:3])}"
        )
    if bad:
        print(
            f"lucid predict: skipped {len(bad)} of {len(paths)} image(s) that cannot be decoded "
            f"(predicted the other {len(paths) - len(bad)}): {'; '.join(bad[:5])}"
            + (" ..." if len(bad) > 5 else ""),
            file=sys.stderr,
        )
    target = out / "predictions.json"
    return write_text(target, json.dumps(results, indent=1))


def _refuse_overwriting_sources(paths: list[Path], overlays: list[Path], out: Path) -> None:
    """Refuse an ``out`` where an overlay would replace one of the images predicted (``--out``
    the source folder itself: each ``a.jpg`` overlay over its ``a.jpg``), before anything is
    written."""
    inputs = {p.resolve() for p in paths}
    for path, overlay in zip(paths, overlays, strict=True):
        target = out / overlay
        if target.resolve() in inputs:
            raise SettingError(
                f"--out {out}: the overlay of {path} would replace the image {target}, one of "
                "those predicted; pass an --out outside the source folder (the default is "
                "runs/<task>/predict)"
            )


def _overlay_names(paths: list[Path], source: str | Path) -> list[Path]:
    """Each path's overlay, relative to the output folder: its place under the source folder
    with the suffix ``.jpg``, else its whole name then ``.jpg`` (``a.png.jpg``) when an earlier
    image took that, so no overlay overwrites another's. One list serves the overwrite check
    and the writes, so an image skipped as undecodable cannot shift the names between them."""
    base = Path(source)
    taken: set[Path] = set()
    names: list[Path] = []
    for path in paths:
        rel = path.relative_to(base) if base.is_dir() else Path(path.name)
        name = rel.with_suffix(".jpg")
        if name in taken:
            name = rel.with_name(f"{rel.name}.jpg")
        for n in range(2, len(taken) + 2):
            if name not in taken:
                break
            name = rel.with_name(f"{rel.name}.{n}.jpg")
        taken.add(name)
        names.append(name)
    return names


def _json_entry(
    path: Path, size: tuple[int, int], rec: dict[str, Any], names: list[str]
) -> dict[str, Any]:
    dets: list[dict[str, Any]] = []
    for i, (box, score, label) in enumerate(
        zip(rec["boxes"], rec["scores"], rec["labels"], strict=True)
    ):
        d: dict[str, Any] = {
            "label": int(label),
            "name": names[int(label)] if 0 <= int(label) < len(names) else str(int(label)),
            "score": round(float(score), 5),
            "box": [round(float(v), 2) for v in box],
        }
        if "rotated" in rec:
            d["rotated"] = [round(float(v), 4) for v in rec["rotated"][i]]
        if "keypoints" in rec:
            d["keypoints"] = np.round(rec["keypoints"][i], 3).tolist()
        if "masks" in rec:
            rle = mask_utils.encode(np.asfortranarray(rec["masks"][i].astype(np.uint8)))
            d["mask_rle"] = {"size": rle["size"], "counts": rle["counts"].decode("ascii")}
        dets.append(d)
    return {"file": str(path), "width": size[0], "height": size[1], "detections": dets}
