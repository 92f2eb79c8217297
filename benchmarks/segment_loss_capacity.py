"""What the padded capacity costs the segment loss: one batch's loss and backward at the
batch's own largest instance count (the eager fit's padding) and at larger capacities (the
recorded loss pads to `CAPTURE_CAPACITY`), same values by construction.

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) python3 benchmarks/segment_loss_capacity.py \\
        --root SET --img-size 640 --batch 8 --capacities 32,64

Runs on whatever device is given (``--device cpu`` by default): the network's output for one
training batch of ``SET`` (a segment dataset) is computed once, then the module's criterion
(assignment with the mask-aware overlap, both branches' terms) and its backward into that
output are timed (median of ``--repeats``) at each padding. The loss must be equal at every
padding (capacity-invariant sums, docs/capture.md), which the script checks.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from lucid_train.data import LucidDataModule
from lucid_train.data.augment import AugmentConfig
from lucid_train.losses import pad_targets
from lucid_train.tasks.task_modules import SegmentModule


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True)
    parser.add_argument("--img-size", type=int, default=640)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--capacities", default="32,64")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--mosaic", type=float, default=0.0,
        help="mosaic probability of the batch (0: a close-mosaic epoch, as peer_speed.py's)",
    )  # fmt: skip
    args = parser.parse_args()
    device = torch.device(args.device)
    dm = LucidDataModule("segment", args.root, img_size=args.img_size, batch_size=args.batch,
                         num_workers=0, augment=AugmentConfig(mosaic=args.mosaic))  # fmt: skip
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader())).render()
    torch.manual_seed(0)
    module = SegmentModule(num_classes=dm.schema.num_classes, img_size=args.img_size).to(device)
    module.train()
    counts = batch.counts().tolist()
    with torch.no_grad():
        output = module.forward_network(batch.float_images().to(device))
    size = (args.img_size, args.img_size)

    # The loss's inputs as leaves, so its backward runs as in training and stops there.
    heads = [
        value
        for branch in (output.one2many, output.one2one)
        for value in vars(branch).values()
        if isinstance(value, torch.Tensor) and value.is_floating_point()
    ]
    for t in heads:
        t.requires_grad_(True)

    def run(capacity: int | None) -> tuple[float, float]:
        targets = module.device_targets(pad_targets(batch, capacity=capacity), batch)
        targets = targets.to(device)
        times, total = [], 0.0
        for _ in range(args.repeats):
            start = time.perf_counter()
            terms = module.criterion(output, targets, module.o2m_weight, size)
            terms.total.backward()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            times.append(time.perf_counter() - start)
            total = float(terms.total.detach())
        return statistics.median(times), total

    largest = max(counts)
    rows = [("batch's largest", largest, *run(None))]
    capacities = [int(v) for v in args.capacities.split(",")]
    rows += [(f"{c}", c, *run(c)) for c in capacities if c >= largest]
    print(f"segment loss + backward, batch {args.batch} at {args.img_size} px on {device}, "
          f"{torch.get_num_threads()} threads; instances per image {counts}")  # fmt: skip
    print("| padding | rows per image | seconds (median) | loss |")
    print("| --- | --- | --- | --- |")
    for name, m, seconds, loss in rows:
        print(f"| {name} | {m} | {seconds:.2f} | {loss:.6f} |")
    if len({loss for *_, loss in rows}) != 1:
        raise SystemExit("the loss changed with the padding: the sums are not capacity-invariant")


if __name__ == "__main__":
    main()
