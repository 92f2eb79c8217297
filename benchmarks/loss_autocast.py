"""Our loss against the authors' under mixed precision, per task (assumptions T93): the heads'
outputs in float16, their loss inside CPU autocast as their trainer runs it, ours as it reads
them, with ``LUCID_LOSS_ARITHMETIC`` float32 and authors. Prints, for the initial and the fitted
weights of the loss ladder, the worst term's relative difference and each output's gradient
difference (relative L2). Needs the ``peer`` dependency group (Ultralytics); CPU only:

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:):tests/support \
        python benchmarks/loss_autocast.py --tasks detect segment pose obb
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
from torch import Tensor

from lucid_testing import peer_twins as pt
from lucid_train.losses import detection

BRANCHES = ("one2many", "one2one")
HALVED = ("boxes", "logits", "mask_coefficients", "keypoints", "keypoint_sigmas", "angles")


def _half(sides: pt.LossSides) -> list[tuple[str, Tensor]]:
    """Make the heads' outputs float16 leaves (as autocast leaves them); their names and
    tensors, for the gradients."""
    leaves = []
    for name in BRANCHES:
        branch = getattr(sides.output, name)
        for field in HALVED:
            if (value := getattr(branch, field, None)) is not None:
                setattr(branch, field, value.detach().half().requires_grad_())
                leaves.append((f"{name} {field}", getattr(branch, field)))
    for field in ("prototypes", "semantic_logits"):
        if (value := getattr(sides.output, field, None)) is not None:
            setattr(sides.output, field, value.detach().half().requires_grad_())
    like = {n: {"feats": [f.half() for f in sides.preds[n]["feats"]]} for n in sides.preds}
    sides.preds = pt.authors_preds(sides.output, like)
    return leaves


def _grads(total: Tensor, leaves: list[tuple[str, Tensor]]) -> list[Tensor | None]:
    for _, t in leaves:
        t.grad = None
    total.backward(retain_graph=True)
    return [None if t.grad is None else t.grad.float().clone() for _, t in leaves]


def measure(task: str, path: Path) -> dict[str, dict[str, float]]:
    """``{"float32" | "authors": {"worst term": x, "<branch> <output>": x, ...}}``."""
    sides = pt.LossSides(task, path)
    leaves = _half(sides)
    crit = sides.criterion
    crit.updates, crit.o2m, crit.o2o = 0, crit.o2m_copy, 1 - crit.o2m_copy
    with torch.autocast("cpu", dtype=torch.float16):
        theirs = {n: sides.their_branch(n)[1] for n in BRANCHES}
        their_total = sum(
            (getattr(crit, n).loss(sides.preds[n], sides.batch.theirs)[0] * w).sum()
            for n, w in (("one2many", crit.o2m), ("one2one", crit.o2o))
        )
    assert isinstance(their_total, Tensor)
    their_grads = _grads(their_total, leaves)
    out: dict[str, dict[str, float]] = {}
    for arithmetic in ("float32", "authors"):
        detection.AUTHORS_ARITHMETIC = arithmetic == "authors"
        ours = sides.ours.criterion(
            sides.output, sides.targets, torch.tensor(crit.o2m), (pt.IMG, pt.IMG)
        )
        assert ours.branches is not None
        row = {
            "worst term": max(
                abs(float(v) - float(t)) / abs(float(t))
                for name, mine in zip(BRANCHES, ours.branches, strict=True)
                for term, v in mine.terms.as_dict().items()
                for t in [theirs[name][pt.THEIR_NAME.get(term, f"{term}_loss")]]
            )
        }
        for (label, _), a, b in zip(leaves, _grads(ours.total, leaves), their_grads, strict=True):
            if a is not None and b is not None and float(b.norm()) > 0:
                row[label] = float((a - b).norm() / b.norm())
        out[arithmetic] = row
    detection.AUTHORS_ARITHMETIC = False
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["detect", "segment", "pose", "obb"])
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp())
    print("| task | weights | measure | float32 reads | authors' arithmetic |")
    print("| --- | --- | --- | --- | --- |")
    for task in args.tasks:
        for weights, write in (
            ("initial", pt.write_released_weights),
            ("fitted", pt.write_trained_weights),
        ):
            path = write(task, root / f"{weights}-yolo26n{pt.SUFFIX[task]}.pt")
            rows = measure(task, path)
            for key in rows["float32"]:
                a, b = rows["float32"][key], rows["authors"].get(key, float("nan"))
                print(f"| {task} | {weights} | {key} | {a:.2g} | {b:.2g} |")


if __name__ == "__main__":
    main()
