"""On CUDA a background checkpoint save queues its copies and returns: it never waits for the
GPU, copies each (device, dtype) group by one transfer, and the file holds the values of the
call, with their strides, whatever the stream runs after it. The CPU half of the writer's
contract is ``test_checkpoint_writer.py``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import torch

from lucid_train.run.checkpoint_io import AtomicCheckpointIO

pytestmark = pytest.mark.gpu


def _state(overlapping: bool = False) -> dict[str, Any]:
    dev = torch.device("cuda")
    conv = torch.randn(16, 8, 3, 3, device=dev).to(memory_format=torch.channels_last)
    depthwise = torch.randn(8, 1, 3, 3, device=dev).to(memory_format=torch.channels_last)
    state: dict[str, Any] = {
        "state_dict": {
            "big": torch.randn(1 << 22, device=dev),
            "conv": conv,
            "depthwise": depthwise,
            "t": torch.randn(5, 7, device=dev).t(),  # transposed: kept transposed
            "half": torch.randn(33, device=dev, dtype=torch.float16),
            "count": torch.tensor(7, device=dev),  # 0-dim int64
            "empty": torch.empty(0, 4, device=dev),
            "mask": torch.rand(10, device=dev) > 0.5,
            "host": torch.arange(4.0),
        },
        "optimizer_states": [{"state": {0: (torch.randn(4, 4, device=dev), 3)}}],
        "epoch": 2,
    }
    if overlapping:  # no memory image: copied alone, by a blocking copy
        state["broadcast"] = torch.randn(1, 6, device=dev).expand(3, 6)
    return state


def _leaves(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict):
        return {
            k: v for key, val in obj.items() for k, v in _leaves(val, f"{prefix}/{key}").items()
        }
    if isinstance(obj, (list, tuple)):
        return {k: v for i, val in enumerate(obj) for k, v in _leaves(val, f"{prefix}/{i}").items()}
    return {prefix: obj}


def test_a_save_queues_its_copies_and_the_file_holds_the_values_of_the_call(
    tmp_path: Path,
) -> None:
    state = _state()
    expected = {k: v.cpu().clone() if isinstance(v, torch.Tensor) else v
                for k, v in _leaves(state).items()}  # fmt: skip
    io = AtomicCheckpointIO(background=True)
    io.save_checkpoint(state, tmp_path / "first.ckpt")  # pinned memory is allocated once
    io.wait()
    plan = io._plan  # the second save packs the same tensors by the first one's plan
    torch.cuda.synchronize()
    torch.cuda._sleep(400_000_000)  # the GPU busy for a while, as mid-epoch
    start = time.perf_counter()
    io.save_checkpoint(state, tmp_path / "last.ckpt")
    took = time.perf_counter() - start
    assert not torch.cuda.current_stream().query(), "the save waited for the GPU"
    assert plan is not None and io._plan is plan
    for v in _leaves(state).values():  # training goes on: queued after the save's copies
        if isinstance(v, torch.Tensor) and v.is_cuda and v.dtype.is_floating_point:
            v.mul_(-3.0)
    io.wait()
    got = _leaves(io.load_checkpoint(tmp_path / "last.ckpt"))
    io.teardown()
    assert got.keys() == expected.keys()
    for key, want in expected.items():
        have = got[key]
        if isinstance(want, torch.Tensor):
            assert have.device.type == "cpu" and have.dtype == want.dtype, key
            assert have.shape == want.shape and torch.equal(have, want), key
        else:
            assert have == want, key
    for key in ("conv", "depthwise", "t"):
        assert got[f"/state_dict/{key}"].stride() == state["state_dict"][key].stride(), key
    assert took < 0.2, f"the save took {took:.3f} s on the host"


def test_each_device_dtype_group_is_one_transfer(tmp_path: Path) -> None:
    state = _state(overlapping=True)
    io = AtomicCheckpointIO(background=True)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        io.save_checkpoint(state, tmp_path / "last.ckpt")
        io.wait()
    io.teardown()
    copies = [e.name for e in prof.events() if "DtoH" in e.name]
    # float32, float16, int64, bool: one each; the expanded tensor alone (a blocking copy)
    assert len(copies) == 5, copies
