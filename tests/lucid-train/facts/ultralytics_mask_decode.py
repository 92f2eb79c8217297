"""Writes ultralytics_mask_decode.json: the authors' validation masks at the source size, for fixed
prototypes, coefficients and boxes.

Run with Ultralytics 8.4.190 installed (not a lucid dependency), from this folder:

    python ultralytics_mask_decode.py > ultralytics_mask_decode.json

Each case holds the inputs (prototypes ``(M, h, w)`` at stride 4 of a square ``canvas``,
coefficients ``(D, M)``, boxes in canvas pixels, the source size and its letterbox gain and
padding) and the source pixels the authors' segment validator keeps on, per detection, as flat
indices: ``ops.process_mask_native(..., shape=(canvas, canvas))`` (logits upsampled to the canvas,
thresholded at 0, cut to the box), then ``ops.scale_masks(..., ratio_pad=...)`` to the source and
``.byte()``, as its ``scale_preds`` does. `test_validation_masks.py` holds ours against them.
"""

import json

import torch
from ultralytics.utils import ops


def cases() -> list[dict]:
    out = []
    g = torch.Generator().manual_seed(0)
    for k, (canvas, h0, w0) in enumerate(
        [(64, 96, 128), (64, 160, 100), (32, 40, 40), (64, 128, 80)]
    ):
        m, d = 4, 3
        proto = torch.randn(m, canvas // 4, canvas // 4, generator=g)
        coeff = torch.randn(d, m, generator=g)
        gain = min(canvas / h0, canvas / w0)
        pad_w = (canvas - round(w0 * gain)) / 2
        pad_h = (canvas - round(h0 * gain)) / 2
        x1 = torch.rand(d, generator=g) * canvas * 0.5
        y1 = torch.rand(d, generator=g) * canvas * 0.5
        boxes = torch.stack(
            [
                x1,
                y1,
                x1 + 4 + torch.rand(d, generator=g) * canvas * 0.5,
                y1 + 4 + torch.rand(d, generator=g) * canvas * 0.5,
            ],
            -1,
        )
        masks = ops.process_mask_native(proto, coeff, boxes, shape=(canvas, canvas))
        src = ops.scale_masks(masks[None], (h0, w0), ratio_pad=((gain, gain), (pad_w, pad_h)))[
            0
        ].byte()
        out.append(
            {
                "name": f"case {k}",
                "canvas": canvas,
                "source_hw": [h0, w0],
                "letterbox": [gain, pad_w, pad_h],
                "prototypes": proto.tolist(),
                "coefficients": coeff.tolist(),
                "boxes_canvas": boxes.tolist(),
                "on": [torch.nonzero(s.reshape(-1)).reshape(-1).tolist() for s in src],
            }
        )
    return out


if __name__ == "__main__":
    print(json.dumps(cases()))
