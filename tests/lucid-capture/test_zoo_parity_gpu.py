"""The fast subset of the zoo (``benchmarks/capture_zoo.py``): third-party models replay bit for
bit like eager, and each model that capture must refuse runs eager under its named reason with
eager's bits: a host draw (``host RNG``), a host sync, a Python hook, a private generator.

Each case trains six batches, the last one partial, eager and then recorded, from the same weights
and data, and compares weights, gradients, optimizer state, buffers, losses and the GradScaler's
scale before every optimizer step and at the end (``lucid_testing.zoo``).
"""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from lucid_capture import NetworkRecorder, Reason
from lucid_testing.zoo import ZOO, ZooModel, differences, train

pytestmark = pytest.mark.gpu


def _entry(name: str) -> ZooModel:
    entry = ZOO[name]
    library = {"torchvision": "torchvision", "timm": "timm"}.get(entry.library)
    if library is not None:
        pytest.importorskip(library, reason=f"{name} needs {library} (the `zoo` group)")
    return entry


REPLAYED = [
    ("mobilenet_v3_small", "16-mixed", 2),  # dropout and BatchNorm under GradScaler
    ("convnext_tiny", "32-true", 1),  # stochastic depth, TF32 off
    ("vit_small_patch16_224", "bf16-mixed", 2),  # timm drop_path
    ("efficientnet_b0", "16-mixed", 1),  # timm dropout + drop_path + BatchNorm
    ("bert_base_encoder", "bf16-mixed", 2),  # dropout; the loss in a LossRecorder
    ("private_generator_registered", "32-true", 2),  # generators=[g]
]


@pytest.mark.parametrize(("name", "precision", "accumulate"), REPLAYED)
def test_zoo_model_replays_bit_for_bit_like_eager(
    name: str, precision: str, accumulate: int
) -> None:
    entry = _entry(name)
    eager = train(entry, capture=False, precision=precision, accumulate=accumulate)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the partial batch's `shape` warning
        replay = train(entry, capture=True, precision=precision, accumulate=accumulate)
    diffs = differences(eager, replay)
    assert not diffs, f"{len(diffs)} differ from eager, first: {diffs[:5]}"
    recorders = len(replay.summaries)
    assert replay.replays == 5 * recorders, replay.summaries  # every full batch
    assert replay.eager == {Reason.SHAPE.value: recorders}, replay.summaries  # the partial one


REFUSED = [
    ("fcos_resnet50_fpn", Reason.CPU_TENSOR),  # its transform's pageable host-to-device copies
    ("layerdrop_encoder", Reason.HOST_RNG),  # torch.rand([]) on the host picks the layers
    ("python_layerdrop", Reason.HOST_RNG),  # random.random() picks the layers
    ("adaptive_depth", Reason.HOST_SYNC),  # `if tensor:` picks the branch
    ("resnet18_python_hook", Reason.HOOKS),  # a forward hook with Python state
]


@pytest.mark.parametrize(("name", "reason"), REFUSED)
def test_zoo_model_capture_cannot_hold_runs_eager_with_its_code_and_eager_bits(
    name: str, reason: Reason
) -> None:
    """Without the refusal, the host draw, the hook's ramp or the branch would be frozen at the
    recorded call and the fit would silently leave eager's."""
    entry = _entry(name)
    eager = train(entry, capture=False, precision="16-mixed", accumulate=2)
    with pytest.warns(UserWarning, match=rf"ran eager \({reason.value}\)"):
        replay = train(entry, capture=True, precision="16-mixed", accumulate=2)
    assert replay.eager == {reason.value: 6} and replay.replays == 0, replay.summaries
    diffs = differences(eager, replay)
    assert not diffs, f"{len(diffs)} differ from eager, first: {diffs[:5]}"


def test_a_private_generator_not_handed_over_is_named_and_keeps_eagers_bits() -> None:
    """Its draws cannot be replayed; with ``generators=[g]`` they are (``REPLAYED`` above). The
    refused recording's warm-up drew from it too: put back, the fit is eager's to the bit."""
    entry = _entry("private_generator")
    eager = train(entry, capture=False, accumulate=2)
    with pytest.warns(UserWarning, match=r"generators=\[g\]"):
        replay = train(entry, capture=True, accumulate=2)
    assert replay.eager == {Reason.UNREGISTERED_RNG.value: 6} and replay.replays == 0
    diffs = differences(eager, replay)
    assert not diffs, f"{len(diffs)} differ from eager, first: {diffs[:5]}"


class _MovesAConstant(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x) * torch.tensor([2.0]).to(x.device)  # a pageable host copy


class _TakesAHostScale(_MovesAConstant):
    def forward(self, x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return self.inner(x) * scale.to(x.device)


def test_cpu_tensors_are_named_inside_the_call_and_among_the_arguments() -> None:
    torch.manual_seed(0)
    x = torch.randn(4, 8, device="cuda")
    inside = NetworkRecorder(_MovesAConstant().cuda())
    with pytest.warns(UserWarning, match=r"ran eager \(CPU tensor\)"):
        inside(x).sum().backward()
    assert inside.stats.eager == {Reason.CPU_TENSOR: 1} and not inside.recorded
    argument = NetworkRecorder(_TakesAHostScale().cuda())
    with pytest.warns(UserWarning, match=r"ran eager \(CPU tensor\)"):
        argument(x, torch.tensor([2.0])).sum().backward()
    assert argument.stats.eager == {Reason.CPU_TENSOR: 1} and not argument.recorded
