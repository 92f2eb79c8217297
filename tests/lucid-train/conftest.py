"""Shared fixtures of the lucid-train data and evaluation tests (small synthetic sets, images)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from lucid_testing.mutations import apply_mutation
from lucid_train.data.builtin_sets.synthetic import SyntheticSpec, synthetic_dataset
from lucid_train.data.records import Task

SMALL = SyntheticSpec(num_train=12, num_val=6, min_side=128, max_side=192)


@pytest.fixture(scope="session")
def small_synthetic(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Task], Path]:
    """A tiny synthetic set per task (COCO layout), generated once per session."""
    cache = tmp_path_factory.mktemp("synthetic")

    def make(task: Task) -> Path:
        return synthetic_dataset(task, cache_dir=cache, spec=SMALL)

    return make


def _write_image(
    path: Path, width: int = 64, height: int = 48, colour: tuple[int, int, int] = (90, 90, 90)
) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((height, width, 3), colour, np.uint8)).save(path)
    return path


@pytest.fixture
def coco_with_categories(
    small_synthetic: Callable[[Task], Path], tmp_path: Path
) -> Callable[..., Path]:
    """``make(before, after=(), edit=None)``: a copy of the small detect set whose COCO files
    list the category dicts ``before`` ahead of their own and ``after`` behind (no annotation
    uses them); ``edit(split, doc)`` changes each file further before it is written."""

    def make(
        before: list[dict[str, Any]],
        after: list[dict[str, Any]] | None = None,
        edit: Callable[[str, dict[str, Any]], None] | None = None,
    ) -> Path:
        root = tmp_path / "with-categories"
        shutil.copytree(small_synthetic("detect"), root)
        for split in ("train", "val"):
            path = root / "annotations" / f"{split}.json"
            doc = json.loads(path.read_text())
            doc["categories"] = [*before, *doc["categories"], *(after or [])]
            if edit is not None:
                edit(split, doc)
            path.write_text(json.dumps(doc))
        return root

    return make


@pytest.fixture
def write_image() -> Callable[..., Path]:
    """``write_image(path, width=64, height=48, colour=...)``: a plain RGB PNG."""
    return _write_image


# -- rule mutations of capture in the trainer (``LUCID_TRAIN_MUTATION=<rule>``) ---------------
# ``python -m lucid_testing.mutations --suite train`` runs the trainer's capture tests once per
# rule removed here; docs/capture.md records which tests fail.


def _float_prog_weight(mp: pytest.MonkeyPatch) -> None:
    from lucid_train.tasks.module import YOLOModule

    def compute_loss(self: YOLOModule, output: Any, targets: Any, image_size: Any) -> Any:
        return self.loss_recorder(output, targets, float(self.o2m_weight), image_size)

    def criterion(self: YOLOModule, output: Any, targets: Any, weight: Any, size: Any) -> Any:
        weight = torch.full((), weight, device=self.o2m_weight.device)
        return self.criterion(output, targets, weight, size)

    mp.setattr(YOLOModule, "compute_loss", compute_loss)
    mp.setattr(YOLOModule, "_criterion", criterion)


def _targets_by_batch(mp: pytest.MonkeyPatch) -> None:
    from lucid_train.losses import pad_targets
    from lucid_train.tasks.module import YOLOModule

    mp.setattr(
        YOLOModule,
        "prepare_targets",
        lambda self, batch: pad_targets(batch, capacity=self.capacity_for(batch)),
    )


def _unpadded_eager_route(mp: pytest.MonkeyPatch) -> None:
    from lucid_train.tasks.module import YOLOModule

    capacity = property(
        lambda self: self.loss_recorder.capacity if self.loss_recorder.enabled else None
    )
    mp.setattr(YOLOModule, "target_capacity", capacity)


def _host_copies_in_the_loss(mp: pytest.MonkeyPatch) -> None:
    from lucid_train.losses import obb, pose, segment

    def copied(like: Any, values: Any, dtype: Any = None) -> Any:
        return like.new_tensor(values, dtype=dtype)

    mp.setattr(obb, "filled", copied)
    mp.setattr(segment, "filled", copied)
    mp.setattr(pose, "_default_constants", pose._default_constants.__wrapped__)


def _sums_by_length(mp: pytest.MonkeyPatch) -> None:
    from lucid_kernels import rle_negative_log_likelihood
    from lucid_train.losses import pose, segment

    def plain_sum(values: torch.Tensor) -> torch.Tensor:
        return values.sum()

    mp.setattr(pose, "positional_sum", plain_sum)
    mp.setattr(segment, "positional_sum", plain_sum)
    mp.setattr(  # one flow call over every slot
        pose,
        "_flow_nll",
        lambda diff, sigma, flow: rle_negative_log_likelihood(
            torch.zeros_like(diff), sigma, diff, flow
        ),
    )


TRAIN_MUTATIONS: dict[str, Callable[[pytest.MonkeyPatch], None]] = {
    "train-tensor-prog-weight": _float_prog_weight,
    "train-targets-by-task": _targets_by_batch,
    "train-padded-eager-route": _unpadded_eager_route,
    "train-loss-host-free": _host_copies_in_the_loss,
    "train-capacity-invariant-sums": _sums_by_length,
}


@pytest.fixture(autouse=True)
def _train_mutation(monkeypatch: pytest.MonkeyPatch) -> str | None:
    return apply_mutation("LUCID_TRAIN_MUTATION", TRAIN_MUTATIONS, monkeypatch)
