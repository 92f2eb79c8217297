"""The line a finished ``lucid fit`` prints: how long, the best score, where the checkpoints are.

A fit that trained nothing (``--trainer.max_epochs 0``) wrote no checkpoint: it says so rather
than naming a folder that was never made. A fit that never validated (validation off, every n
epochs past the run, a step or time limit first) wrote no ``best.ckpt``: it says so and why,
rather than "best n/a". A resume of a run that already reached its
``max_epochs`` (or ``max_steps``) is not started at all (`already_finished`): Lightning would
restore it, train nothing and still run the end-of-fit hooks, which redraw the run's report
without the validation it was drawn from.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from lucid_train.cli.resume import CONFIG_FILE, Resume

__all__ = ["already_finished", "done_line", "finished_line", "stopped"]


def done_line(checkpoint_callback: Any, run_dir: Path, wall_s: float) -> str:
    """``lucid fit: done ...`` for a fit that ended normally."""
    folder = run_dir / "checkpoints"
    written = folder.is_dir() and any(folder.glob("*.ckpt"))
    if not written:
        return f"lucid fit: done in {wall_s:.0f} s; nothing trained, no checkpoint written"
    best = getattr(checkpoint_callback, "best_model_score", None)
    if best is None and not (folder / "best.ckpt").is_file():
        return (
            f"lucid fit: done in {wall_s:.0f} s; no validation ran, so no best.ckpt "
            "(--trainer.limit_val_batches 0, --trainer.check_val_every_n_epoch past the run's "
            "epochs, or --trainer.max_steps / max_time ending it before the first); last.ckpt "
            f"in {folder}; lucid validate --ckpt {folder / 'last.ckpt'} scores it"
        )
    best_text = "n/a" if best is None else f"{float(best):.4f}"
    return (
        f"lucid fit: done in {wall_s:.0f} s; best val/mAP50-95 (e2e box) {best_text}; "
        f"checkpoints in {folder}"
    )


def finished_line(resume: Resume, max_epochs: int | None, max_steps: int) -> str | None:
    """The line for a resume whose checkpoint already reached the Trainer's limits, as
    Lightning's ``_FitLoop.done`` decides it (a limit of -1 is none), or None."""
    info = resume.checkpoint
    epochs, steps = info.epochs_run, info.global_step
    max_epochs = -1 if max_epochs is None else max_epochs
    if steps is not None and max_steps != -1 and steps >= max_steps:
        reached = f"its {steps} step{'s' * (steps != 1)} (trainer.max_steps {max_steps})"
    elif epochs is not None and max_epochs != -1 and epochs >= max_epochs:
        reached = f"its {epochs} epoch{'s' * (epochs != 1)} (trainer.max_epochs {max_epochs})"
    else:
        return None
    config = resume.run_dir / CONFIG_FILE
    flags = f"--config {config}" if config.is_file() else "<the run's flags>"
    return (
        f"lucid fit: {resume.run_dir} already finished {reached} at {info.path.name}; nothing "
        "trained, its checkpoints and metrics.csv left as they were. To train more, start a new "
        f"run from its weights: lucid fit {flags} --model.weights {info.path.resolve()} "
        "--trainer.max_epochs E (E: the epochs to train; --ckpt_path keeps the run's own limits)"
    )


def already_finished(resume: Resume | None, trainer: Any) -> bool:
    """Whether ``resume`` already reached ``trainer``'s limits; if so rank 0 says so
    (`finished_line`) and the fit is not started. A resume that goes on says at which epoch
    (`resuming_line`)."""
    line = resume and finished_line(resume, trainer.max_epochs, trainer.max_steps)
    if trainer.is_global_zero and resume is not None:
        print(line or resuming_line(resume), file=sys.stdout)
    return bool(line)


def resuming_line(resume: Resume) -> str:
    """``lucid fit: resuming RUN at epoch N ...``: the epoch the resumed fit starts with (the
    epochs its checkpoint counts as run) and that the rows of the epochs before stay."""
    info = resume.checkpoint
    at = info.epochs_run if info.epochs_run is not None else info.epoch
    if at is None:
        return f"lucid fit: resuming {resume.run_dir} from {info.path}"
    done = "no epoch" if at == 0 else "epoch 0" if at == 1 else f"epochs 0-{at - 1}"
    kept = f"{done} done, their metrics.csv rows kept" if at else "no epoch done before it"
    return f"lucid fit: resuming {resume.run_dir} at epoch {at} from {info.path.name} ({kept})"


def stopped(trainer: Any, run_dir: Path | None, cause: str) -> int:
    """A fit stopped by a signal (SIGTERM: Lightning stopped after the batch in flight; Ctrl-C:
    its shutdown): rank 0 names the epoch and the resume command; last.ckpt (written at the
    epoch's start) is the resume point. Returns the exit status of a SIGTERM, 0."""
    assert run_dir is not None
    last = (run_dir / "checkpoints" / "last.ckpt").resolve()
    if trainer.is_global_zero and not last.is_file():  # stopped before the first one
        print(
            f"lucid fit: stopped by {cause} in epoch {trainer.current_epoch}, before its first "
            "checkpoint; nothing to resume: run the same command again",
            file=sys.stderr,
        )
    elif trainer.is_global_zero:
        print(
            f"lucid fit: stopped by {cause} in epoch {trainer.current_epoch}; resume with "
            f"`lucid fit --ckpt_path {last}` (the run's {CONFIG_FILE} holds its flags; that "
            "epoch runs again from its start)",
            file=sys.stderr,
        )
    return 0
