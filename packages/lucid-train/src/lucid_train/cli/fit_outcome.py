"""The line a finished ``lucid fit`` prints: how long, the best score, where the checkpoints are.

A fit that trained nothing (``--trainer.max_epochs 0``, or resumed at its last epoch) wrote no
checkpoint: it says so rather than naming a folder that was never made.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["done_line"]


def done_line(checkpoint_callback: Any, run_dir: Path, wall_s: float) -> str:
    """``lucid fit: done ...`` for a fit that ended normally."""
    folder = run_dir / "checkpoints"
    written = folder.is_dir() and any(folder.glob("*.ckpt"))
    if not written:
        return f"lucid fit: done in {wall_s:.0f} s; nothing trained, no checkpoint written"
    best = getattr(checkpoint_callback, "best_model_score", None)
    best_text = "n/a" if best is None else f"{float(best):.4f}"
    return (
        f"lucid fit: done in {wall_s:.0f} s; best val/mAP50-95 (e2e box) {best_text}; "
        f"checkpoints in {folder}"
    )
