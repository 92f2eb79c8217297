"""Validation masks follow the authors' decode (assumptions D20), held against their build.

`facts/ultralytics_mask_decode.json` (written by the script beside it, with Ultralytics 8.4.190)
holds the source pixels their segment validator keeps for fixed prototypes, coefficients and
boxes; `lucid_models.postprocessing.masks_to_source` must keep exactly those. They were written
with torch on more than one CPU thread, and the tests run so (`_threads_of_the_facts`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from lucid_models import assemble_masks
from lucid_models.postprocessing import masks_to_source

FACTS = json.loads((Path(__file__).parent / "facts" / "ultralytics_mask_decode.json").read_text())


@pytest.fixture(autouse=True)
def _threads_of_the_facts() -> Iterator[None]:
    """Two CPU threads, whatever the process has (xdist's workers have one): torch's bilinear
    upsampling rounds some values otherwise on one thread (its serial path) than on two or more.
    Measured with torch 2.11: on one thread ours equals the authors' decode (the facts' script)
    on one thread pixel for pixel, and both leave the facts by 33 and 6 pixels in case 1; on 2-16
    threads ours gives the facts exactly."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _inputs(
    case: dict,
) -> tuple[torch.Tensor, torch.Tensor, np.ndarray, tuple[float, float, float]]:  # type: ignore[type-arg]
    gain, pad_w, pad_h = case["letterbox"]
    boxes = np.asarray(case["boxes_canvas"], np.float64)
    boxes_src = (boxes - np.array([pad_w, pad_h, pad_w, pad_h])) / gain
    coefficients = torch.tensor(case["coefficients"])
    prototypes = torch.tensor(case["prototypes"])
    return coefficients, prototypes, boxes_src, (gain, pad_w, pad_h)


@pytest.mark.parametrize("case", FACTS, ids=lambda c: c["name"])
def test_the_source_masks_are_the_authors_pixels(case: dict) -> None:  # type: ignore[type-arg]
    coefficients, prototypes, boxes_src, letterbox = _inputs(case)
    h0, w0 = case["source_hw"]
    ours = masks_to_source(coefficients, prototypes, boxes_src, letterbox, case["canvas"], (h0, w0))
    for k, on in enumerate(case["on"]):
        theirs = np.zeros(h0 * w0, bool)
        theirs[on] = True
        assert int((ours[k].reshape(-1) != theirs).sum()) == 0, (case["name"], k)


def test_thresholding_at_the_source_instead_keeps_more_pixels() -> None:
    """The control: the order before D20 (logits resized to the source, then thresholded) keeps
    pixels the authors' order drops, so the facts tell the two apart."""
    extra = 0
    for case in FACTS:
        coefficients, prototypes, boxes_src, letterbox = _inputs(case)
        h0, w0 = case["source_hw"]
        gain, px, py = letterbox
        logits = assemble_masks(coefficients[None], prototypes[None])
        c = case["canvas"]
        logits = F.interpolate(logits, size=(c, c), mode="bilinear", align_corners=False)
        hh, ww = round(h0 * gain), round(w0 * gain)
        logits = logits[:, :, int(py) : int(py) + hh, int(px) : int(px) + ww]
        at_source = (
            F.interpolate(logits, size=(h0, w0), mode="bilinear", align_corners=False)[0] > 0
        )
        ours = masks_to_source(coefficients, prototypes, boxes_src, letterbox, c, (h0, w0))
        extra += int((at_source.numpy() & ~ours).sum())
    assert extra > 100
