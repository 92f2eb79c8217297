"""`benchmarks/benchmark_loader.py` measures the loader a fit runs: its defaults are the data
module's and the augmentation's, and ``--render auto`` resolves as the fit's does."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import pytest
import torch

from lucid_train.data.augment.config import AugmentConfig
from lucid_train.data.datamodule import LucidDataModule
from lucid_train.data.render_choice import auto_render

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
benchmark_loader = pytest.importorskip("benchmark_loader")


def test_the_loader_benchmark_defaults_are_a_fits() -> None:
    args = benchmark_loader.parse_args(["--out", "unused.json", "--task", "detect"])
    pool = inspect.signature(LucidDataModule).parameters["mosaic_pool"].default
    assert args.mosaic_pool == pool == "buffer"
    assert (args.mixup, args.copy_paste) == (AugmentConfig().mixup, AugmentConfig().copy_paste)
    card = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    assert (args.render, args.render_why) == auto_render("detect", "n", args.workers, card=card)
