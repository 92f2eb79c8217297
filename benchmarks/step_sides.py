"""One training step of each trainer, outside its loop, on one synthetic batch (`step_profile`).

`synthetic_batch` draws random images and 5-15 boxes an image (an instance map on the stride-4
grid for segment, later instances painted over earlier ones); `ours_step` and `peer_step` build
each trainer's step from it, with the part ranges of `step_trace.Parts`:

- ours (`lucid_train`): the task's module at ``loss_capacity`` rows an image, channels-last on
  CUDA, its recorders on (``capture``: network and loss replayed from CUDA graphs; no part
  ranges inside the network, whose hooks would keep it from being recorded) or off, under
  fp16 autocast with a GradScaler; then what Lightning and our hooks run around it on one
  device: unscale, clip to norm 10 (``GRADIENT_CLIP``), the optimizer `optimizer=auto` picks
  (`choose_optimizer`; fused AdamW on CUDA for a short run), the scaler's update, ``zero_grad``
  and the EMA's foreach update; the training terms' log add too (one concatenation).
- the peer (Ultralytics 8.4): its model from ``yolo26{scale}{suffix}.yaml`` with the data's
  class count, default hyper-parameters, its DFL frozen (as its trainer does), its loss through
  ``model.loss(batch, preds)``, the optimizer its trainer's ``build_optimizer`` picks for
  ``optimizer=auto`` with the same iterations, clipping at 10, and its ``ModelEMA``.

Both take the same images and boxes; the peer its own layout of them (normalised xywh rows, the
overlap mask ``k + 1``, the semantic class map). Not run: the non-finite guard's reads (ours)
and the loaders.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable
from typing import Any

import torch
from step_trace import Parts

SUFFIX = {"detect": "", "segment": "-seg", "pose": "-pose", "obb": "-obb"}
STEP_TASKS = ("detect", "segment")  # the synthetic batch holds boxes and masks only
NBS = 64
CLIP = 10.0


def synthetic_batch(
    batch: int, size: int, classes: int, capacity: int, seed: int = 0
) -> dict[str, torch.Tensor]:
    """Host tensors: ``images`` (B, 3, S, S) in [0, 1], ``boxes`` (B, M, 4) pixel xyxy (0 on
    padding), ``labels`` (B, M), ``mask`` (B, M) and ``counts`` (B,), M = ``capacity``, and the
    ``instance_map`` (B, S/4, S/4) uint8: 0 background, ``k + 1`` the image's k-th box."""
    g = torch.Generator().manual_seed(seed)
    counts = torch.randint(5, min(16, capacity + 1), (batch,), generator=g)
    mask = torch.arange(capacity)[None] < counts[:, None]
    wh = size * (0.05 + 0.25 * torch.rand(batch, capacity, 2, generator=g))
    xy = torch.rand(batch, capacity, 2, generator=g) * (size - wh)
    boxes = torch.where(mask[..., None], torch.cat([xy, xy + wh], -1), 0.0)
    labels = torch.where(mask, torch.randint(0, classes, (batch, capacity), generator=g), 0)
    grid = size // 4
    instance_map = torch.zeros(batch, grid, grid, dtype=torch.uint8)
    for b in range(batch):
        for k in range(int(counts[b])):
            x0, y0, x1, y1 = (int(v) // 4 for v in boxes[b, k].tolist())
            instance_map[b, y0 : max(y1, y0 + 1), x0 : max(x1, x0 + 1)] = k + 1
    images = torch.rand(batch, 3, size, size, generator=g)
    return {"images": images, "boxes": boxes, "labels": labels, "mask": mask,
            "counts": counts, "instance_map": instance_map}  # fmt: skip


def ours_step(
    task: str,
    scale: str,
    data: dict[str, torch.Tensor],
    device: torch.device,
    *,
    capture: bool,
    classes: int,
    images: int,
    epochs: int,
    parts: Parts,
) -> Callable[[], None]:
    from lucid_train.losses import PaddedTargets
    from lucid_train.losses.segment import with_instance_map
    from lucid_train.optim.ema import ModelEMA
    from lucid_train.tasks.loss_log import TrainingLossLog
    from lucid_train.tasks.recipe import build_optimizer, choose_optimizer
    from lucid_train.tasks.task_modules import module_class

    batch, capacity = data["mask"].shape
    size = int(data["images"].shape[-1])
    module = module_class(task)(  # type: ignore[arg-type]
        f"yolo26{scale}{SUFFIX[task]}", num_classes=classes, img_size=size, loss_capacity=capacity
    ).to(device)
    cuda = device.type == "cuda"
    if cuda:  # what the module's `setup` does for a fit on CUDA
        module.model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        module.channels_last = True
    for recorder in (module.network_recorder, module.loss_recorder):
        recorder.reset()
        recorder.enabled = capture
        recorder.grads_in_place = True  # one device: the replays write .grad themselves
    module.train()
    config = module.optimizer_config
    choice = choose_optimizer(
        config, num_classes=classes, num_images=images, batch_size=batch, epochs=epochs
    )
    accumulate = max(round(NBS / batch), 1)
    optimizer = build_optimizer(module, config, choice, batch_size=batch, accumulate=accumulate)
    scaler = torch.amp.GradScaler(device.type, enabled=cuda)
    ema = ModelEMA(module)
    log = TrainingLossLog()
    idx = torch.cumsum(data["mask"].flatten().long(), 0).view(batch, capacity) - 1
    targets: PaddedTargets = PaddedTargets(
        boxes=data["boxes"].to(device),
        labels=data["labels"].to(device),
        mask=data["mask"].to(device),
        counts=data["counts"].to(device),
        instance_index=torch.where(data["mask"], idx, -1).to(device),
        difficult=torch.zeros(batch, capacity, dtype=torch.bool, device=device),
    )
    if task == "segment":
        targets = with_instance_map(targets, data["instance_map"].to(device))
    pixels = data["images"].to(device)
    net = module.model
    if not capture:
        # Forward hooks on the network's parts: lucid-capture records no module with Python
        # hooks (reason `hooks`), so the replayed side has none; its network's kernels come
        # from one graph launch, in the `network` range, the parts' split is the eager side's.
        for name in ("backbone", "neck", "head"):
            part = getattr(net, name)
            parts.around_modules(name, part, part)
    for branch in (module.criterion.one2many, module.criterion.one2one):
        parts.around_method(branch, "assign", "assigner")
    info = {"optimizer": f"{choice.name}(lr={choice.lr})", "fused": _fused(optimizer)}
    dtype = torch.float16

    def step() -> None:
        with parts.part("optimizer"):
            optimizer.zero_grad()  # Lightning's, before the step (set_to_none)
        with torch.autocast(device.type, dtype=dtype, enabled=cuda):
            with parts.part("network"):  # a replay's kernels, or what wraps the three parts
                output = module.forward_network(pixels)
            with parts.part("loss"):
                terms = module.compute_loss(output, targets, (size, size))
        with parts.part("log"):
            log.add(terms.items, terms.total, terms.names, batch)
        with parts.part("backward"):
            scaler.scale(terms.total).backward()
        with parts.part("optimizer"):
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(module.parameters(), CLIP)
            scaler.step(optimizer)
            scaler.update()
        with parts.part("ema"):
            ema.update(module)

    step.info = info  # type: ignore[attr-defined]
    step.module = module  # type: ignore[attr-defined]
    return step


def _fused(optimizer: torch.optim.Optimizer) -> str:
    group = optimizer.param_groups[0]
    if group.get("fused"):
        return "fused"
    return "foreach" if group.get("foreach") else "per-tensor"


def peer_step(
    task: str,
    scale: str,
    data: dict[str, torch.Tensor],
    device: torch.device,
    *,
    classes: int,
    images: int,
    epochs: int,
    parts: Parts,
) -> Callable[[], None]:
    from ultralytics.cfg import get_cfg
    from ultralytics.engine.trainer import BaseTrainer
    from ultralytics.nn.tasks import DetectionModel, SegmentationModel
    from ultralytics.utils.torch_utils import ModelEMA

    batch, capacity = data["mask"].shape
    size = int(data["images"].shape[-1])
    cls = SegmentationModel if task == "segment" else DetectionModel
    model = cls(f"yolo26{scale}{SUFFIX[task]}.yaml", nc=classes, verbose=False).to(device)
    if device.type == "cuda":
        # as their trainer's `_setup_train` does on CUDA (`channels_last=None`, the default,
        # means on); the 2026-12-06 04:13 profile left their network NCHW, slower than their fit
        model = model.to(memory_format=torch.channels_last)
    args = get_cfg()
    model.args = args  # what its trainer sets: the loss reads its gains from here
    for name, p in model.named_parameters():
        p.requires_grad = ".dfl" not in name  # its trainer always freezes the DFL
    model.train()
    accumulate = max(round(args.nbs / batch), 1)
    decay = args.weight_decay * batch * accumulate / args.nbs
    iterations = math.ceil(images / max(batch, args.nbs)) * epochs
    owner = types.SimpleNamespace(args=args, data={"nc": classes})
    optimizer = BaseTrainer.build_optimizer(
        owner, model, name="auto", lr=args.lr0, momentum=args.momentum, decay=decay,  # type: ignore[arg-type]
        iterations=iterations,
    )  # fmt: skip
    cuda = device.type == "cuda"
    scaler = torch.amp.GradScaler(device.type, enabled=cuda)
    ema = ModelEMA(model)
    mask = data["mask"]
    b_idx = torch.arange(batch)[:, None].expand(batch, capacity)[mask]
    xyxy = data["boxes"][mask] / size
    xywh = torch.cat([(xyxy[:, :2] + xyxy[:, 2:]) / 2, xyxy[:, 2:] - xyxy[:, :2]], 1)
    peer_batch: dict[str, Any] = {
        "img": data["images"].to(device),
        "batch_idx": b_idx.float().to(device),
        "cls": data["labels"][mask].float()[:, None].to(device),
        "bboxes": xywh.to(device),
    }
    if task == "segment":
        imap = data["instance_map"].long()
        peer_batch["masks"] = imap.to(device)  # overlap_mask: k + 1 marks the k-th instance
        labels = torch.cat([torch.zeros(batch, 1, dtype=torch.long), data["labels"]], 1)
        peer_batch["sem_masks"] = labels.gather(1, imap.flatten(1)).view_as(imap).to(device)
    layers = model.model
    n_backbone = len(model.yaml["backbone"])
    parts.around_modules("backbone", layers[0], layers[n_backbone - 1])
    parts.around_modules("neck", layers[n_backbone], layers[len(layers) - 2])
    parts.around_modules("head", layers[-1], layers[-1])
    hooked = False
    info = {"optimizer": type(optimizer).__name__, "fused": _fused(optimizer)}

    def step() -> None:
        nonlocal hooked
        with torch.autocast(device.type, dtype=torch.float16, enabled=cuda):
            with parts.part("network"):
                preds = model(peer_batch["img"])
            with parts.part("loss"):
                if not hooked and getattr(model, "criterion", None) is None:
                    model.criterion = model.init_criterion()
                if not hooked:
                    for branch in (model.criterion.one2many, model.criterion.one2one):
                        parts.around_method(branch.assigner, "forward", "assigner")
                    hooked = True
                loss, _ = model.loss(peer_batch, preds)
                loss = loss.sum()
        with parts.part("backward"):
            scaler.scale(loss).backward()
        with parts.part("optimizer"):
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=CLIP)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad()
        with parts.part("ema"):
            ema.update(model)

    step.info = info  # type: ignore[attr-defined]
    return step
