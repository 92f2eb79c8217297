"""Training goldens: each task's micro overfit reaches its floor (CPU, in CI), and the 100-image
GPU overfit reaches the GPU golden's floor (GPU session)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from lucid_train.overfit import OverfitSpec, run_overfit, spec_for

GOLDENS = Path(__file__).resolve().parents[2] / "goldens"
TASKS = ["detect", "segment", "pose", "obb"]


def _golden(folder: str, task: str) -> dict[str, object] | None:
    path = GOLDENS / folder / f"overfit_{task}.json"
    return json.loads(path.read_text()) if path.exists() else None


@pytest.mark.parametrize("task", TASKS)
def test_golden_spec_is_the_preset_it_names(task: str) -> None:
    doc = _golden("train", task)
    assert doc is not None, f"goldens/train/overfit_{task}.json is missing"
    assert OverfitSpec(**doc["spec"]) == spec_for(task, "cpu")  # type: ignore[arg-type]
    assert f"--task {task}" in str(doc["command"])


@pytest.mark.slow
@pytest.mark.parametrize("task", TASKS)
def test_micro_overfit_reaches_its_floor_on_cpu(task: str, tmp_path: Path) -> None:
    doc = _golden("train", task)
    assert doc is not None
    metrics = run_overfit(OverfitSpec(**doc["spec"]), tmp_path)  # type: ignore[arg-type]
    assert metrics["mAP50-95"] >= float(doc["floor"]), metrics  # type: ignore[arg-type]


@pytest.mark.gpu
@pytest.mark.heavy(4)
@pytest.mark.parametrize("capture", ["on", "off"])
@pytest.mark.parametrize("task", TASKS)
def test_gpu_overfit_reaches_its_floor(task: str, capture: str, tmp_path: Path) -> None:
    doc = _golden("gpu", task)
    if doc is None:
        pytest.skip(
            f"no GPU golden yet: python -m lucid_train.overfit --task {task} --preset gpu "
            f"--capture on --write goldens/gpu/overfit_{task}.json"
        )
    spec = replace(OverfitSpec(**doc["spec"]), capture=capture)  # type: ignore[arg-type]
    metrics = run_overfit(spec, tmp_path)
    print(f"{task} capture {capture}: {metrics}")  # the figures docs/gpu-results.md quotes (-rP)
    assert metrics["mAP50-95"] >= float(doc["floor"]), metrics  # type: ignore[arg-type]
