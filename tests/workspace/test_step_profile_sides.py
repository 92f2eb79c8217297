"""The step profile's replayed side (`benchmarks/step_profile.py`, `step_sides.ours_step`): it
hangs no part ranges on the network, whose Python hooks would keep lucid-capture from recording
it (the 2026-12-03 profile's "replayed" network ran eager so), and a side whose recorders did not
replay every measured step says so, with their eager reasons, in its row and in the report."""

from __future__ import annotations

import torch

from lucid_testing.benchmark_scripts import load_benchmark


def test_the_replayed_side_hooks_nothing_on_the_network_and_a_side_that_ran_eager_says_so() -> None:
    profile = load_benchmark("step_profile")
    sides = load_benchmark("step_sides")
    args = profile.parse_args(
        ["--out", "unused", "--device", "cpu", "--batch", "2", "--size", "64", "--warmup", "1",
         "--steps", "1", "--profiled", "1", "--scales", "n", "--tasks", "detect"]
    )  # fmt: skip
    data = sides.synthetic_batch(args.batch, args.size, args.classes, args.capacity)
    common = {"classes": args.classes, "images": args.images, "epochs": args.epochs}
    device = torch.device("cpu")
    for capture, hooked in ((True, False), (False, True)):
        step = sides.ours_step(
            "detect", "n", data, device, capture=capture, parts=sides.Parts(), **common
        )
        hooks = [m for m in step.module.model.modules() if m._forward_hooks or m._forward_pre_hooks]
        assert bool(hooks) == hooked, capture

    # On the CPU nothing is recorded: the replayed side's row names that, per recorder.
    row = profile.measure("ours_capture", "detect", "n", data, args)
    measured = args.warmup + args.steps + args.profiled
    assert row["not_replayed"] == {"network": {"no CUDA": measured}, "loss": {"no CUDA": measured}}
    doc = {"date": "d", "device": "cpu", "torch": "t", "settings": vars(args) | {"out": "o"},
           "rows": [{"scale": "n", "task": "detect", "ours_capture": row}]}  # fmt: skip
    assert "**not replayed on every measured step**" in load_benchmark("step_report").render(doc)
