"""`RunArtifacts` redraws the loss and metric curves after a validation, once `PLOT_INTERVAL_S`
has passed, and at the fit's end, not at every training epoch; metrics.csv is flushed every
epoch all the same."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from lightning.pytorch.loggers import CSVLogger

from lucid_train.report import training_curves as plots
from lucid_train.run import trainer as runs


def test_curves_are_drawn_after_validation_after_the_interval_and_at_the_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn: list[float] = []
    now = [100.0]
    monkeypatch.setattr(runs.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(plots, "write_run_plots", lambda csv, out: drawn.append(now[0]) or [])
    saved: list[float] = []
    logger = CSVLogger(tmp_path)
    monkeypatch.setattr(logger, "save", lambda: saved.append(now[0]))
    trainer: Any = SimpleNamespace(is_global_zero=True, loggers=[logger], sanity_checking=False)
    module: Any = SimpleNamespace(hparams={}, overlay_samples=[])
    cb = runs.RunArtifacts(tmp_path)

    def epoch(seconds: float, validate: bool = False) -> None:
        now[0] += seconds
        if validate:
            cb.on_validation_epoch_end(trainer, module)
        cb.on_train_epoch_end(trainer, module)

    epoch(1)  # the first epoch: drawn
    epoch(1)
    epoch(1)  # 2 s after: not drawn
    epoch(1, validate=True)  # validation: drawn
    epoch(runs.PLOT_INTERVAL_S)  # the interval passed: drawn
    epoch(1)
    cb.on_fit_end(trainer, module)  # the end: drawn
    assert drawn == [101.0, 104.0, 104.0 + runs.PLOT_INTERVAL_S, 105.0 + runs.PLOT_INTERVAL_S]
    assert len(saved) == 7  # metrics.csv flushed at every epoch's end and the fit's
