"""The mask decode's effect on mask mAP: one trained segment model, validated in both orders.

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) python3 benchmarks/mask_decode.py --out OUT

Trains the CPU micro-overfit of segment (`lucid_train.overfit`'s preset: 4 images, 128 px, 100
epochs), then validates its weights twice: with `lucid_models.postprocessing.masks_on_source`,
as `lucid_train.tasks.validation` calls it (the authors' order, assumptions D20: threshold on
the canvas, resize the 0/1 mask, keep where it stays 1) and with the order lucid used before (logits
resized to the source, thresholded there). Writes ``OUT/mask_decode.json`` and prints both sets of
metrics.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from lucid_models import assemble_masks
from lucid_train.tasks import validation


def threshold_at_source(
    coefficients: Tensor,
    prototypes: Tensor,
    boxes_src: np.ndarray,
    letterbox: tuple[float, float, float],
    canvas: int,
    orig_hw: tuple[int, int],
) -> Tensor:
    """The order before D20: logits to the canvas, padding cut, logits to the source, > 0 there,
    kept inside the box by source pixel centres."""
    h0, w0 = orig_hw
    if coefficients.shape[0] == 0:
        return torch.zeros((0, h0, w0), dtype=torch.bool)
    gain, px, py = letterbox
    logits = assemble_masks(coefficients[None], prototypes[None])
    logits = F.interpolate(logits, size=(canvas, canvas), mode="bilinear", align_corners=False)
    hh, ww = max(round(h0 * gain), 1), max(round(w0 * gain), 1)
    logits = logits[:, :, int(py) : int(py) + hh, int(px) : int(px) + ww]
    logits = F.interpolate(logits, size=(h0, w0), mode="bilinear", align_corners=False)[0]
    masks = (logits > 0).cpu().numpy()
    ys = np.arange(h0)[None, :, None] + 0.5
    xs = np.arange(w0)[None, None, :] + 0.5
    b = boxes_src[:, :, None, None]
    inside = (xs >= b[:, 0]) & (xs < b[:, 2]) & (ys >= b[:, 1]) & (ys < b[:, 3])
    return torch.from_numpy(masks & inside)


def main() -> None:
    from lucid_train.overfit import fit_overfit, spec_for

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    spec = spec_for("segment", "cpu")
    module, trainer, dm, fit_s = fit_overfit(spec, args.out)
    authors = dict(module.last_metrics)
    chosen = validation.masks_on_source
    validation.masks_on_source = threshold_at_source
    try:
        trainer.validate(module, datamodule=dm, verbose=False)
    finally:
        validation.masks_on_source = chosen
    before = dict(module.last_metrics)
    doc: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "spec": spec.__dict__ if hasattr(spec, "__dict__") else str(spec),
        "fit_s": fit_s,
        "authors_order": authors,
        "threshold_at_source": before,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "mask_decode.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    for key in sorted(authors):
        if key.endswith("mAP50-95") or key.endswith("mAP50"):
            print(f"{key:24s} authors' order {authors[key]:.4f}   at source {before[key]:.4f}")


if __name__ == "__main__":
    main()
