"""Padded targets: the flat batch laid out at a fixed capacity, nothing truncated or invented."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from lucid_kernels import CapacityExceededError
from lucid_train.data import LucidDataModule
from lucid_train.data.records import Task
from lucid_train.data.transport import Batch
from lucid_train.losses import PaddedTargets, capacity_fits, pad_targets
from lucid_train.losses.segment import with_instance_masks
from lucid_train.tasks.capacity import CAPTURE_CAPACITY
from lucid_train.tasks.task_modules import module_class


def _batch(counts: list[int], *, obb: bool = False, keypoints: int = 0) -> Batch:
    """A hand-made batch of ``len(counts)`` 32 px images; instance ``i`` has box ``i * 10 + ..``."""
    total = sum(counts)
    b = len(counts)
    base = torch.arange(total, dtype=torch.float32)[:, None]
    return Batch(
        images=torch.zeros(b, 32, 32, 3, dtype=torch.uint8),
        batch_idx=torch.repeat_interleave(torch.arange(b), torch.tensor(counts)),
        labels=torch.arange(total, dtype=torch.int64) % 3 + 1,
        boxes=base * 10 + torch.tensor([1.0, 2.0, 5.0, 6.0]),
        difficult=torch.arange(total) % 2 == 0,
        rboxes=(base + torch.tensor([1.0, 2.0, 3.0, 1.0, 0.5])) if obb else torch.zeros(0, 5),
        keypoints=torch.arange(total * keypoints * 3, dtype=torch.float32).view(
            total, keypoints, 3
        ),
        instance_map=torch.zeros(b, 0, 0, dtype=torch.int16),
        image_ids=torch.arange(b),
        orig_hw=torch.full((b, 2), 32),
        letterbox=torch.full((b, 3), float("nan"), dtype=torch.float64),
    )


def test_rows_land_in_their_image_in_order_with_zero_padding() -> None:
    batch = _batch([2, 0, 3])
    t = pad_targets(batch)
    assert t.capacity == 3 and t.batch_size == 3
    assert t.mask.tolist() == [[True, True, False], [False] * 3, [True] * 3]
    assert t.counts.tolist() == [2, 0, 3]
    assert t.instance_index.tolist() == [[0, 1, -1], [-1, -1, -1], [2, 3, 4]]
    flat = t.instance_index[t.mask]
    assert torch.equal(t.boxes[t.mask], batch.boxes[flat])
    assert torch.equal(t.labels[t.mask], batch.labels[flat])
    assert torch.equal(t.difficult[t.mask], batch.difficult[flat])  # type: ignore[index]
    assert float(t.boxes[~t.mask].abs().sum()) == 0.0
    assert int(t.labels[~t.mask].abs().sum()) == 0
    assert t.boxes.dtype == torch.float32 and t.labels.dtype == torch.int64
    assert t.rboxes is None and t.keypoints is None


def test_capacity_is_kept_and_never_truncates() -> None:
    batch = _batch([2, 3])
    assert pad_targets(batch, capacity=8).boxes.shape == (2, 8, 4)
    assert capacity_fits(batch, 3) and not capacity_fits(batch, 2)
    with pytest.raises(CapacityExceededError):
        pad_targets(batch, capacity=2)


def test_batch_without_targets_gets_one_empty_row() -> None:
    t = pad_targets(_batch([0, 0]))
    assert t.boxes.shape == (2, 1, 4)
    assert not bool(t.mask.any())
    assert t.instance_index.tolist() == [[-1], [-1]]
    assert t.rboxes is not None and t.rboxes.shape == (2, 1, 5)  # T == 0: layout kept static


def test_rotated_boxes_and_keypoints_follow_their_instances() -> None:
    batch = _batch([1, 2], obb=True)
    t = pad_targets(batch)
    assert t.rboxes is not None
    assert torch.equal(t.rboxes[t.mask], batch.rboxes)
    assert pad_targets(batch, rotated=False).rboxes is None

    pose = _batch([2, 1], keypoints=4)
    p = pad_targets(pose, capacity=3)
    assert p.keypoints is not None and p.keypoints.shape == (2, 3, 4, 3)
    assert torch.equal(p.keypoints[p.mask], pose.keypoints)
    assert float(p.keypoints[~p.mask].abs().sum()) == 0.0


def test_given_counts_must_match_the_batch() -> None:
    batch = _batch([1, 2])
    assert pad_targets(batch, counts=[1, 2]).counts.tolist() == [1, 2]
    with pytest.raises(ValueError, match="counts"):
        pad_targets(batch, counts=[2, 2])


def test_to_moves_every_tensor_into_a_new_record() -> None:
    t = pad_targets(_batch([1, 2], keypoints=2))
    moved = t.to("cpu")
    assert isinstance(moved, PaddedTargets) and moved is not t
    assert torch.equal(moved.boxes, t.boxes) and moved.rboxes is None
    assert moved.keypoints is not None


@pytest.mark.parametrize("task", ["obb", "pose"])
def test_pads_a_datamodule_batch(task: Task, small_synthetic: Callable[[Task], Path]) -> None:
    dm = LucidDataModule(task, small_synthetic(task), img_size=128, batch_size=4, num_workers=0)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    assert batch.batch_idx.shape[0] > 0
    t = pad_targets(batch)
    flat = t.instance_index[t.mask]
    assert torch.equal(flat, torch.arange(batch.batch_idx.shape[0]))
    assert torch.equal(t.boxes[t.mask], batch.boxes)
    assert torch.equal(t.labels[t.mask], batch.labels)
    image_of_row = torch.arange(t.batch_size)[:, None].expand_as(t.mask)[t.mask]
    assert torch.equal(image_of_row, batch.batch_idx)
    if task == "obb":
        assert t.rboxes is not None and torch.equal(t.rboxes[t.mask], batch.rboxes)
    else:
        assert t.keypoints is not None and torch.equal(t.keypoints[t.mask], batch.keypoints)


def _without_image(batch: Batch, image: int) -> Batch:
    """``batch`` with every instance of ``image`` removed (its picture kept, its masks emptied)."""
    keep = batch.batch_idx != image
    flat = {"batch_idx", "labels", "boxes", "difficult", "keypoints"}
    if batch.rboxes.shape[0] == keep.shape[0]:
        flat.add("rboxes")
    fields = {
        f.name: getattr(batch, f.name)[keep] if f.name in flat else getattr(batch, f.name)
        for f in dataclasses.fields(batch)
    }
    if fields["instance_map"].numel():
        fields["instance_map"] = fields["instance_map"].clone()
        fields["instance_map"][image] = 0
    return Batch(**fields)


@pytest.mark.parametrize(
    ("device", "autocast"),
    [
        pytest.param("cpu", None, id="cpu"),
        pytest.param("cuda", None, id="cuda", marks=pytest.mark.gpu),
        pytest.param("cuda", torch.float16, id="cuda-fp16", marks=pytest.mark.gpu),
    ],
)
@pytest.mark.parametrize("task", ["detect", "segment", "pose", "obb"])
def test_the_loss_is_bitwise_invariant_to_the_padding_capacity(
    task: Task,
    device: str,
    autocast: torch.dtype | None,
    small_synthetic: Callable[[Task], Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Capture pads the targets to CAPTURE_CAPACITY, eager to each batch's largest count: the two
    # fits must train alike, so loss, terms and every gradient are equal bit for bit. Padding
    # rows (and the positive slots that grow with them, in segment and pose) must not regroup
    # any float sum, the pose flow's parameter gradients included. On CUDA a kernel may also
    # pick its reduction order by shape, so the contract is checked there too, under autocast
    # as the golden fits train. cuDNN's own choice of a non-deterministic convolution backward is
    # not what this test is about, so it is switched off.
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", True)
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    dm = LucidDataModule(task, small_synthetic(task), img_size=64, batch_size=4, num_workers=0)
    dm.setup("fit")
    s = dm.schema
    torch.manual_seed(0)
    module = module_class(task)(
        num_classes=s.num_classes,
        num_keypoints=s.num_keypoints if task == "pose" else None,
        flip_index=s.flip_index,
        img_size=64,
    ).to(device)
    module.train()
    batch = _without_image(next(iter(dm.train_dataloader())), 1)
    counts = batch.counts().tolist()
    assert counts[1] == 0 and len(set(counts)) > 2 and max(counts) < 17, counts
    images = batch.float_images().to(device)
    names = [n for n, _ in module.named_parameters()]

    def run(capacity: int | None) -> dict[str, torch.Tensor]:
        targets = pad_targets(batch, capacity=capacity, rotated=task == "obb")
        if task == "segment":
            targets = with_instance_masks(targets, batch.instance_masks())
        targets = targets.to(device)
        assert targets.capacity == (capacity or max(counts))
        module.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=autocast or torch.float32, enabled=autocast is not None):
            output = module.forward_network(images)
            heads = {
                f"{branch_name}.{f.name}": t
                for branch_name, branch in (("o2m", output.one2many), ("o2o", output.one2one))
                for f in dataclasses.fields(branch)
                if isinstance(t := getattr(branch, f.name), torch.Tensor)
            }
            for t in heads.values():
                t.retain_grad()
            terms = module.criterion(output, targets, module.o2m_weight, (64, 64))
        terms.total.backward()
        result = {"total": terms.total.detach(), "items": terms.items.detach()}
        for name, t in heads.items():
            assert t.grad is not None, name
            result[f"grad {name}"] = t.grad
        for name, p in zip(names, module.parameters(), strict=True):
            if p.grad is not None:
                result[f"grad {name}"] = p.grad
        return result

    own = run(None)
    assert _unequal(own, run(None)) == [], "the same capacity twice differs: not deterministic"
    for capacity in (17, CAPTURE_CAPACITY):
        unequal = _unequal(own, run(capacity))
        assert not unequal, f"{task}: capacity {capacity} changes {len(unequal)}: {unequal[:12]}"


def _unequal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> list[str]:
    assert a.keys() == b.keys()
    return [k for k in a if not torch.equal(a[k], b[k])]
