"""What both sides of the peer comparison share: the decode paths, model names, metric columns,
the logged subprocess runner, the version stamp, and the authors' trainer set up to run offline."""

from __future__ import annotations

import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PATHS = ("e2e", "nms")
CONF_NOTE = {
    "e2e": "one-to-one head, top-k 300, no NMS",
    "nms": "one-to-many head, NMS IoU 0.7, conf 0.001",
}


MODEL_SUFFIX = {"detect": "", "segment": "-seg", "pose": "-pose", "obb": "-obb"}
EXTRA_KIND = {"segment": "mask", "pose": "pose"}  # the task's second metric beside the box one


def offline_authors_trainer() -> None:
    """The authors' trainer without the network: their settings' sync off, and their AMP
    check, which would fetch yolo26n.pt, answered yes (AMP stays on)."""
    import ultralytics.engine.trainer as trainer_module
    from ultralytics import settings

    settings.update({"sync": False})
    trainer_module.check_amp = lambda *a, **k: True


def _metric_prefixes(task: str) -> dict[str, str]:
    """Metric kind -> the column stem in our metrics.csv (``val/<path>/<stem>mAP50-95``); obb's
    box kind is the rotated (DOTA protocol) metric."""
    kinds = {"box": ""}
    if task in EXTRA_KIND:
        kinds[EXTRA_KIND[task]] = f"{EXTRA_KIND[task]}_"
    return kinds


def _run_logged(
    cmd: list[str], env: dict[str, str], log: Path, timeout: float
) -> tuple[int | str, float]:
    """Run ``cmd`` with stdout and stderr to ``log``; returns (exit status or "timeout", wall s)."""
    start = time.perf_counter()
    with log.open("w") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        try:
            rc: int | str = subprocess.run(
                cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, timeout=timeout, check=False
            ).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    wall = time.perf_counter() - start
    if rc != 0:
        tail = log.read_text(errors="replace").splitlines()[-25:]
        print(f"[{log.name}] exit {rc}; last lines:\n" + "\n".join(tail), flush=True)
    return rc, wall


def _child_env(device: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    if device != "cpu":
        env["CUDA_VISIBLE_DEVICES"] = device
    env.update(extra or {})
    return env


def _last_row_with(csv_path: Path, column: str) -> dict[str, str]:
    import csv

    rows = [r for r in csv.DictReader(csv_path.open()) if r.get(column)]
    if not rows:
        raise ValueError(f"{csv_path}: no row has {column}")
    return rows[-1]


def _versions() -> dict[str, Any]:
    v: dict[str, Any] = {"python": platform.python_version()}
    try:
        import torch

        v["torch"] = torch.__version__
        v["cuda_device"] = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    except ImportError:
        pass
    try:
        import lightning

        v["lightning"] = lightning.__version__
    except ImportError:
        pass
    git = ["git", "-C", str(REPO)]
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    dirty = subprocess.run(
        [*git, "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=False,
    )
    v["lucid_commit"] = head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    return v
