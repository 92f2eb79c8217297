"""Twin networks for the equivalence ladder (tests/peer): one file in the authors' released
format, read by both trainers, and one fixed batch laid out for each side.

The file is written by Ultralytics' own `YOLO.save` from a model their builder made (weights at
their init, BatchNorm statistics randomised so eval-mode numbers are not the identity), so both
sides read fp16-rounded values: theirs through `load_checkpoint`, ours through
`lucid_train.weights.load_weights` (what `python -m lucid_train.weights` runs). Imports
Ultralytics: only tests/peer use it, after their conftest has checked it is installed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from lucid_train.data.transport import Batch
from lucid_train.tasks.module import YOLOModule
from lucid_train.tasks.task_modules import module_class
from lucid_train.weights import load_weights

SUFFIX = {"detect": "", "segment": "-seg", "pose": "-pose", "obb": "-obb"}
NUM_CLASSES = 3
KEYPOINTS = 17
IMG = 128  # 16x16 + 8x8 + 4x4 = 336 anchors: small enough for a core, big enough to crowd


def authors_args(**overrides: Any) -> Any:
    """Their hyper-parameter namespace (`default.yaml`, with ``overrides``), as a trainer sets
    ``model.args``."""
    from ultralytics.cfg import get_cfg
    from ultralytics.utils import DEFAULT_CFG

    return get_cfg(DEFAULT_CFG, overrides)


def _authors_network(task: str) -> tuple[Any, torch.nn.Module]:
    """Their `YOLO` builder of ``task`` and a yolo26n network their model class made (their init
    at the current torch seed)."""
    from ultralytics import YOLO
    from ultralytics.nn.tasks import guess_model_task  # noqa: F401  (their task table)

    cfg = f"yolo26n{SUFFIX[task]}.yaml"
    kwargs: dict[str, Any] = {"nc": NUM_CLASSES, "verbose": False}
    builder = YOLO(cfg, task=task)
    model_cls = type(builder.model)
    if task == "pose":
        from ultralytics.nn.tasks import yaml_model_load

        d = yaml_model_load(cfg)
        d["kpt_shape"] = [KEYPOINTS, 3]
        return builder, model_cls(d, **kwargs)
    return builder, model_cls(cfg, **kwargs)


def write_released_weights(task: str, path: Path, *, seed: int = 0) -> Path:
    """A yolo26n file of ``task`` in the authors' released format, written by their `YOLO.save`."""
    torch.manual_seed(seed)
    builder, model = _authors_network(task)
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.copy_(torch.rand(m.running_mean.shape, generator=gen) * 0.4 - 0.2)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=gen) + 0.5)
    builder.model = model
    builder.save(path)
    return path


def write_trained_weights(task: str, path: Path, *, steps: int = 40, seed: int = 0) -> Path:
    """The file of `write_released_weights` after ``steps`` AdamW steps of our loss on the
    ladder's fixed batch, written again by their `YOLO.save`: class scores off their prior and
    overlaps near 1 (detect's best soft target 0.99, against 0.78 at init), where a difference
    that an initial network hides (its alignment maxima of 1e-7 to 1e-4) would show."""
    from lucid_testing.authors_layout import authors_state_dict

    write_released_weights(task, path, seed=seed)
    module = lucid_module(path, task)
    batch = fixed_batch(task, seed=seed)
    optimizer = torch.optim.AdamW(module.parameters(), lr=2e-3, foreach=False)
    images = batch.ours.float_images()
    targets = lucid_targets(module, batch.ours)
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=True)
        loss = module.criterion(module(images), targets, torch.tensor(0.8), (IMG, IMG)).total
        loss.backward()
        optimizer.step()
    builder, model = _authors_network(task)
    model.load_state_dict(authors_state_dict(module, dtype=torch.float32), strict=True)
    builder.model = model
    builder.save(path)
    return path


def authors_model(path: Path, task: str, **args: Any) -> Any:
    """Their network from the file: fp32, train mode, trainable, ``args`` as a trainer sets them."""
    from ultralytics.nn.tasks import load_checkpoint

    model, _ = load_checkpoint(path)
    model.args = authors_args(task=task, **args)
    model.train()
    for p in model.parameters():
        p.requires_grad_(True)
    return model


def lucid_module(path: Path, task: str) -> YOLOModule:
    """Our module from the same file, capture off, train mode."""
    kpt = KEYPOINTS if task == "pose" else None
    module = module_class(task)(  # type: ignore[arg-type]
        model=f"yolo26n{SUFFIX[task]}",
        num_classes=NUM_CLASSES,
        num_keypoints=kpt,
        flip_index=tuple(range(KEYPOINTS)) if task == "pose" else (),
        capture="off",
        img_size=IMG,
    )
    load_weights(module, path)
    module.train()
    return module


@dataclass
class FixedBatch:
    """One batch of 4 images, no augmentation, both sides' layout of the same instances."""

    ours: Batch
    theirs: dict[str, Tensor]


def _boxes(rng: np.random.Generator) -> list[np.ndarray]:
    """Per image xyxy boxes: mixed sizes, a crowd of overlapping ones, tiny ones (2-10 px), two."""

    def box(cx: float, cy: float, w: float, h: float) -> list[float]:
        return [cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2]

    mixed = [box(*rng.uniform(20, 108, 2), *rng.uniform(6, 70, 2)) for _ in range(9)]
    crowd = [box(*rng.uniform(50, 78, 2), *rng.uniform(16, 44, 2)) for _ in range(16)]
    tiny = [box(*rng.uniform(8, 120, 2), *rng.uniform(2, 10, 2)) for _ in range(12)]
    few = [box(40, 40, 30, 50), box(90, 90, 12, 8)]
    return [np.clip(np.array(b, np.float32), 0, IMG) for b in (mixed, crowd, tiny, few)]


def fixed_batch(task: str, *, seed: int = 0) -> FixedBatch:
    """The ladder's batch for ``task``: the same pixels and instances on both sides."""
    rng = np.random.default_rng(seed)
    per_image = _boxes(rng)
    n = [len(b) for b in per_image]
    boxes = np.concatenate(per_image)
    t = len(boxes)
    labels = rng.integers(0, NUM_CLASSES, t)
    images = rng.integers(0, 256, (4, IMG, IMG, 3), dtype=np.uint8)
    cx, cy = (boxes[:, 0] + boxes[:, 2]) / 2, (boxes[:, 1] + boxes[:, 3]) / 2
    w, h = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    rboxes = np.zeros((0, 5), np.float32)
    keypoints = np.zeros((t, 0, 3), np.float32)
    instance_map = np.zeros((4, 0, 0), np.int16)
    if task == "obb":
        theta = rng.uniform(-math.pi / 4, 3 * math.pi / 4, t).astype(np.float32)
        long = np.maximum(w, h)
        short = np.minimum(w, h)
        rboxes = np.stack([cx, cy, long, short, theta], 1).astype(np.float32)
    if task == "pose":
        kx = cx[:, None] + (rng.uniform(-0.5, 0.5, (t, KEYPOINTS)) * w[:, None])
        ky = cy[:, None] + (rng.uniform(-0.5, 0.5, (t, KEYPOINTS)) * h[:, None])
        vis = (rng.uniform(0, 1, (t, KEYPOINTS)) > 0.25).astype(np.float32) * 2
        keypoints = np.stack([kx, ky, vis], -1).astype(np.float32)
        keypoints[vis == 0, :2] = 0
    if task == "segment":
        instance_map = np.zeros((4, IMG // 4, IMG // 4), np.int16)
        start = 0
        for b, k in enumerate(n):
            # paint largest first so small instances stay visible, as the authors' overlap masks
            order = sorted(range(k), key=lambda i, s=start: -(w[s + i] * h[s + i]))
            for i in order:
                x0, y0, x1, y1 = (boxes[start + i] / 4).tolist()
                ys, xs = np.mgrid[0 : IMG // 4, 0 : IMG // 4] + 0.5
                ell = ((xs - (x0 + x1) / 2) / max((x1 - x0) / 2, 0.5)) ** 2 + (
                    (ys - (y0 + y1) / 2) / max((y1 - y0) / 2, 0.5)
                ) ** 2 <= 1
                instance_map[b][ell] = i + 1
            start += k
    batch_idx = np.repeat(np.arange(4), n)
    ours = Batch(
        images=torch.from_numpy(images),
        batch_idx=torch.from_numpy(batch_idx).long(),
        labels=torch.from_numpy(labels).long(),
        boxes=torch.from_numpy(boxes),
        difficult=torch.zeros(t, dtype=torch.bool),
        rboxes=torch.from_numpy(rboxes),
        keypoints=torch.from_numpy(keypoints),
        instance_map=torch.from_numpy(instance_map),
        image_ids=torch.arange(4),
        orig_hw=torch.full((4, 2), IMG),
        letterbox=torch.full((4, 3), float("nan"), dtype=torch.float64),
    )
    xywh = np.stack([cx, cy, w, h], 1) / IMG
    theirs: dict[str, Tensor] = {
        "img": ours.float_images().contiguous(),
        "batch_idx": torch.from_numpy(batch_idx).float(),
        "cls": torch.from_numpy(labels).float().view(-1, 1),
        "bboxes": torch.from_numpy(xywh.astype(np.float32)),
    }
    if task == "obb":
        r = rboxes.copy()
        r[:, :4] /= IMG
        theirs["bboxes"] = torch.from_numpy(r)
    if task == "pose":
        kp = keypoints.copy()
        kp[..., :2] /= IMG
        theirs["keypoints"] = torch.from_numpy(kp)
    if task == "segment":
        theirs["masks"] = torch.from_numpy(instance_map.astype(np.float32))
        # their semantic target: each pixel's instance class (0 where uncovered: masked anyway)
        sem = np.zeros(instance_map.shape, np.float32)
        start = 0
        for b, k in enumerate(n):
            cls = labels[start : start + k]
            sem[b] = np.where(instance_map[b] > 0, cls[np.maximum(instance_map[b] - 1, 0)], 0)
            start += k
        theirs["sem_masks"] = torch.from_numpy(sem)
    return FixedBatch(ours=ours, theirs=theirs)


def lucid_targets(module: YOLOModule, batch: Batch) -> Any:
    """The padded targets our training step builds for ``batch``."""
    return module.device_targets(module.host_targets(batch), batch)


def authors_preds(output: Any, like: dict[str, Any]) -> dict[str, Any]:
    """Our `ModelOutput` in the layout of the authors' training predictions ``like`` (their
    forward's dict, whose ``feats`` only give the grid shapes), so both losses read the very
    same tensors; the one-to-one branch reads detached prototypes, as their head hands it."""

    def channels_first(t: Tensor) -> Tensor:
        return t.reshape(t.shape[0], t.shape[1], -1).permute(0, 2, 1)

    out: dict[str, Any] = {}
    for name in ("one2many", "one2one"):
        branch = getattr(output, name)
        d: dict[str, Any] = {
            "boxes": channels_first(branch.boxes),
            "scores": channels_first(branch.logits),
            "feats": like[name]["feats"],
        }
        if branch.mask_coefficients is not None:
            d["mask_coefficient"] = channels_first(branch.mask_coefficients)
            proto = (output.prototypes, output.semantic_logits)
            d["proto"] = tuple(p.detach() for p in proto) if name == "one2one" else proto
        if branch.angles is not None:
            d["angle"] = branch.angles[:, None, :]
        if branch.keypoints is not None:
            d["kpts"] = channels_first(branch.keypoints)
            if branch.keypoint_sigmas is not None:
                d["kpts_sigma"] = channels_first(branch.keypoint_sigmas)
        out[name] = d
    return out


# their loss items' names for our terms (the rest are ours + "_loss")
THEIR_NAME = {"seg": "seg_loss", "sem": "sem_loss", "pose": "pose_loss", "kobj": "kobj_loss"}


class LossSides:
    """Both trainers' loss of one task on the fixed batch, from one forward of our network."""

    def __init__(self, task: str, path: Path, epochs: int = 20) -> None:
        self.task = task
        self.theirs = authors_model(path, task, epochs=epochs)
        self.ours = lucid_module(path, task)
        self.batch = fixed_batch(task)
        self.criterion = self.theirs.init_criterion()
        with torch.no_grad():
            like = self.theirs(self.batch.theirs["img"])
        self.output = self.ours(self.batch.ours.float_images())
        self.preds = authors_preds(self.output, like)
        self.targets = lucid_targets(self.ours, self.batch.ours)

    def their_branch(self, name: str) -> tuple[torch.Tensor, dict[str, torch.Tensor], Any]:
        """Their branch loss (gained, times B), its items, and what their assigner returned."""
        loss = getattr(self.criterion, name)
        seen: dict[str, Any] = {}
        forward = loss.assigner.forward

        def record(*args: Any, **kwargs: Any) -> Any:
            out = forward(*args, **kwargs)
            seen["out"] = tuple(t.clone() for t in out)  # their loss divides boxes in place
            return out

        loss.assigner.forward = record
        try:
            total, items = loss.loss(self.preds[name], self.batch.theirs)
        finally:
            loss.assigner.forward = forward
        return total, items, seen["out"]
