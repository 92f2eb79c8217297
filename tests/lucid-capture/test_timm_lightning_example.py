"""The package's Lightning example (a timm classifier under ``CaptureCallback``) runs as written:
wired on the CPU (every call eager, ``no CUDA``), and on a GPU it replays every full batch and
ends its fit bit for bit where the same fit with capture off ends."""

from __future__ import annotations

import importlib.util
import sys
import warnings
from pathlib import Path
from types import ModuleType

import pytest
import torch

from lucid_capture import Reason
from lucid_testing.capture_models import bitwise_equal, strict_numerics

pytest.importorskip("timm", reason="the example needs timm (the `zoo` dependency group)")
pytest.importorskip("lightning.pytorch", reason="needs lucid-capture[lightning]")

EXAMPLE = Path(__file__).resolve().parents[2] / "packages/lucid-capture/examples/timm_lightning.py"


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("timm_lightning", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_example_is_wired_on_cpu() -> None:
    example = _example()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module, callback = example.fit(
            accelerator="cpu", precision="32-true", batches=3, batch_size=4, image_size=32
        )
    assert callback.recorders == [module.graphed]
    assert not any(key.startswith("graphed") for key in module.state_dict())
    assert module.graphed.stats.eager == {Reason.NO_CUDA: 3}
    assert callback.summaries == [
        "network: 0 recordings, 0 replays, 0 retired, 3 eager (no CUDA: 3)"
    ]


@pytest.mark.gpu
def test_example_replays_and_ends_its_fit_as_eager() -> None:
    example = _example()
    with strict_numerics(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eager, _ = example.fit(capture=False)
        replay, callback = example.fit(capture=True)
    stats = replay.graphed.stats
    assert stats.recordings == 1 and stats.replays == 11
    assert stats.eager == {Reason.SHAPE: 1}  # the partial last batch
    assert callback.summaries[0].startswith("network: 1 recording, 11 replays, 0 retired, 1 eager")
    a, b = eager.state_dict(), replay.state_dict()
    assert a.keys() == b.keys()
    diffs = [k for k in a if not bitwise_equal(a[k], b[k])]
    assert not diffs, f"{len(diffs)} tensors differ from eager, first: {diffs[:5]}"
    assert torch.cuda.is_available()
