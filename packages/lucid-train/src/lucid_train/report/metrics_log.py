"""``metrics.csv`` and ``hparams.yaml`` of a run: crash-safe, and kept across a resume.

Lightning's CSVLogger deletes ``metrics.csv`` when a resumed run opens it (the epochs before the
kill are lost) and rewrites it in place when new columns appear, so a kill mid-write truncates
it. `RunCSVLogger` writes the same file (one sparse row per logging call, columns sorted) by
other rules:

- rows are appended as whole lines and flushed to the disk; when new columns appear, the file
  is rewritten through a temporary file and renamed (`lucid_train.atomic_files`);
- a reader takes the file up to its last complete line (`read_rows`);
- a resumed run (``resume_epoch``, the checkpoint's epoch count) keeps every row until it logs
  its first one, then drops the rows of that epoch and later ones, which it runs again (a killed
  run's partial epoch): every epoch appears once (assumptions.md T68). The cut is the epoch the
  run actually resumes at, not the checkpoint's count: a ``best.ckpt`` written at the end of
  epoch e's validation resumes at e + 1, and epoch e's row stays.
"""

from __future__ import annotations

import csv
import io
import os
import sys
from pathlib import Path
from typing import Any, cast

from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.pytorch.core.saving import save_hparams_to_yaml
from lightning.pytorch.loggers import CSVLogger
from torch import Tensor

from lucid_train.atomic_files import append_durably, atomic_path

__all__ = ["MetricsWriter", "RunCSVLogger", "read_rows"]

METRICS_FILE = "metrics.csv"
HPARAMS_FILE = "hparams.yaml"


def read_rows(path: str | Path) -> tuple[list[str], list[dict[str, str]]]:
    """``(columns, rows)`` of a CSV log, up to its last complete line (a crash mid-append can
    leave a partial one); a row with more or fewer fields than the header is dropped too."""
    columns, rows, _ = _read_rows_counting(path)
    return columns, rows


def _read_rows_counting(path: str | Path) -> tuple[list[str], list[dict[str, str]], int]:
    """`read_rows` and how many non-blank lines past the header it could not keep."""
    p = Path(path)
    if not p.is_file():
        return [], [], 0
    with p.open(newline="") as f:
        whole = f.read()
    text = whole
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    reader = csv.DictReader(io.StringIO(text, newline=""))
    rows = [r for r in reader if None not in r and None not in r.values()]
    lines = sum(1 for line in whole.splitlines() if line.strip()) - 1  # the header
    return list(reader.fieldnames or []), rows, max(lines - len(rows), 0)


def _epoch_of(row: dict[str, Any]) -> int | None:
    """A row's epoch: a number logged now (0 included) or the text of a row read back."""
    value = row.get("epoch")
    try:
        return None if value is None or value == "" else int(float(value))
    except ValueError:
        return None


def _say_dropped(path: str, dropped: int, kept: int) -> None:
    """Say on stderr that a resumed run's ``metrics.csv`` lost lines it cannot read (a partial
    last line of a run killed mid-write, a row cut short), which its rewrite drops."""
    if dropped:
        print(
            f"lucid fit: {path}: dropped {dropped} unreadable row"
            f"{'s' * (dropped != 1)} (cut short, as by a kill mid-write); kept {kept}",
            file=sys.stderr,
        )


class MetricsWriter:
    """The experiment object of `RunCSVLogger` (Lightning's ``logger.experiment``).

    Args:
        log_dir: the run folder.
        resume_epoch: None for a new run (an old ``metrics.csv`` there is replaced); else the
            checkpoint's epoch count: the rows are kept until the resumed run's first row, whose
            epoch and later ones are then dropped (the run logs them again).
    """

    def __init__(self, log_dir: str | Path, resume_epoch: int | None = None) -> None:
        self.log_dir = str(log_dir)
        self.metrics_file_path = os.path.join(self.log_dir, METRICS_FILE)
        self.metrics: list[dict[str, Any]] = []
        self.hparams: dict[str, Any] = {}
        os.makedirs(self.log_dir, exist_ok=True)
        self.metrics_keys: list[str] = []
        self._cut_pending = False
        if resume_epoch is None:
            if os.path.isfile(self.metrics_file_path):
                os.unlink(self.metrics_file_path)
            return
        keys, rows, dropped = _read_rows_counting(self.metrics_file_path)
        _say_dropped(self.metrics_file_path, dropped, len(rows))
        self.metrics_keys = keys
        self._cut_pending = bool(keys)
        if keys:
            self._rewrite(rows)  # whole lines only: a killed run's partial last line goes

    def log_metrics(self, metrics_dict: dict[str, Any], step: int | None = None) -> None:
        """Record one row (written by `save`)."""
        row = {k: v.item() if isinstance(v, Tensor) else v for k, v in metrics_dict.items()}
        row["step"] = len(self.metrics) if step is None else step
        self.metrics.append(row)

    def log_hparams(self, params: dict[str, Any]) -> None:
        """Merge ``params`` into ``hparams.yaml`` (written whole)."""
        self.hparams.update(params)
        with atomic_path(os.path.join(self.log_dir, HPARAMS_FILE)) as tmp:
            save_hparams_to_yaml(tmp, self.hparams)

    def save(self) -> None:
        """Write the recorded rows: appended, or the whole file anew when columns were added."""
        if not self.metrics:
            return
        if self._cut_pending:  # the resumed run's first rows: its epochs replace the old ones
            first = min((e for r in self.metrics if (e := _epoch_of(r)) is not None), default=None)
            if first is not None:  # rows without an epoch leave the cut for the next save
                self._cut_pending = False
                _, old = read_rows(self.metrics_file_path)
                self.metrics_keys = sorted(
                    {*self.metrics_keys, *(k for r in self.metrics for k in r)}
                )
                kept = [r for r in old if (e := _epoch_of(r)) is None or e < first]
                self._rewrite([*kept, *self.metrics])
                self.metrics = []
                return
        new = sorted({k for row in self.metrics for k in row} - set(self.metrics_keys))
        exists = os.path.isfile(self.metrics_file_path)
        if new or not exists:
            self.metrics_keys = sorted({*self.metrics_keys, *new})
            _, old = read_rows(self.metrics_file_path) if exists else ([], [])
            self._rewrite([*old, *self.metrics])
        else:
            buffer = io.StringIO(newline="")
            csv.DictWriter(buffer, fieldnames=self.metrics_keys).writerows(self.metrics)
            append_durably(self.metrics_file_path, buffer.getvalue())
        self.metrics = []

    def _rewrite(self, rows: list[dict[str, Any]]) -> None:
        with atomic_path(self.metrics_file_path) as tmp, open(tmp, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self.metrics_keys)
            writer.writeheader()
            writer.writerows(rows)


class RunCSVLogger(CSVLogger):
    """Lightning's CSVLogger writing ``<save_dir>/metrics.csv`` through `MetricsWriter`.

    Args:
        save_dir: the run folder.
        resume_epoch: see `MetricsWriter`.
    """

    def __init__(self, save_dir: str | Path, *, resume_epoch: int | None = None) -> None:
        super().__init__(save_dir=str(save_dir), name="", version="")
        self._resume_epoch = resume_epoch

    @property
    @rank_zero_experiment
    def experiment(self) -> MetricsWriter:
        if self._experiment is None:
            # Lightning's finalize() tests this attribute; the writer is ours, duck-typed.
            self._experiment = cast(Any, MetricsWriter(self.log_dir, self._resume_epoch))
        return cast(MetricsWriter, self._experiment)
