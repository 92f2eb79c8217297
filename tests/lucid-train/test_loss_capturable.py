"""The training loss of every task can be recorded as a CUDA graph: after a first (warm-up) call,
``compute_loss`` and its backward make no tensor from host data (nor on the host, by a factory
without a device) and read no device value.

On the GPU either would break the capture (a copy from pageable host memory, or a synchronising
read) and the loss recorder would fall back to eager for the whole fit (``capture failed``); on
the CPU the same calls are visible to a `TorchFunctionMode`, so CI guards what the GPU suite
would only find later.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.overrides import TorchFunctionMode

from lucid_train.data import LucidDataModule
from lucid_train.tasks.task_modules import module_class

# Calls that copy host data to the device or read a device value back to the host.
HOST_CALLS = {
    torch.tensor,
    torch.as_tensor,
    torch.from_numpy,
    torch.scalar_tensor,
    torch.nonzero,
    torch.Tensor.new_tensor,
    torch.Tensor.nonzero,
    torch.Tensor.item,
    torch.Tensor.tolist,
    torch.Tensor.cpu,
    torch.Tensor.numpy,
    torch.Tensor.__bool__,
    torch.Tensor.__float__,
    torch.Tensor.__int__,
}


# Factories make host tensors unless given a device; the loss would then copy them over.
FACTORIES = {
    torch.zeros,
    torch.ones,
    torch.empty,
    torch.full,
    torch.arange,
    torch.linspace,
    torch.eye,
    torch.rand,
    torch.randn,
}


class _HostCalls(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        # ``t[i] = 1.0`` copies the number from the host; ``t[i].fill_(1.0)`` does not.
        assigns_number = func is torch.Tensor.__setitem__ and not isinstance(args[2], torch.Tensor)
        host_factory = func in FACTORIES and (kwargs or {}).get("device") is None
        if func in HOST_CALLS or assigns_number or host_factory:
            ours = [f for f in traceback.extract_stack()[:-1] if "/src/lucid_" in f.filename]
            where = f"{ours[-1].filename.rsplit('/src/', 1)[-1]}:{ours[-1].lineno}" if ours else "?"
            self.seen.append(f"{getattr(func, '__name__', func)} at {where}")
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("task", ["detect", "segment", "pose", "obb"])
def test_loss_makes_no_host_copy_nor_host_read_after_its_first_call(
    task: str, small_synthetic: Callable[[str], Path]
) -> None:
    dm = LucidDataModule(task, small_synthetic(task), img_size=64, batch_size=4, num_workers=0)  # type: ignore[arg-type]
    dm.setup("fit")
    s = dm.schema
    module = module_class(task)(  # type: ignore[arg-type]
        num_classes=s.num_classes,
        num_keypoints=s.num_keypoints if task == "pose" else None,
        flip_index=s.flip_index,
        img_size=64,
        loss_capacity=16,
    )
    module.train()
    batch = next(iter(dm.train_dataloader()))
    targets = module.prepare_targets(batch)
    images = batch.float_images()

    def step() -> None:
        terms = module.compute_loss(module.forward_network(images), targets, (64, 64))
        terms.total.backward()

    step()  # warm-up: constants may be made once here, as in a recorder's warm-up
    with _HostCalls() as spy:
        step()
    assert not spy.seen, f"the {task} loss would not record: {sorted(set(spy.seen))}"
