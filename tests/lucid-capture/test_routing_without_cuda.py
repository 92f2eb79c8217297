"""Without CUDA every recorder runs eager with reason ``no CUDA``: code using it runs anywhere."""

from __future__ import annotations

import copy
import pickle
import warnings
from collections.abc import Callable

import pytest
import torch

from lucid_capture import CaptureWarning, LossRecorder, NetworkRecorder, Reason
from lucid_testing.capture_models import TwoOutputNet, bitwise_equal, loss_of
from lucid_testing.padded_loss import pad, padded_detection_loss


def test_network_recorder_on_cpu_is_eager_bit_for_bit_and_says_why() -> None:
    torch.manual_seed(0)
    net = TwoOutputNet()
    twin = copy.deepcopy(net)
    recorder = NetworkRecorder(net)
    x = torch.randn(4, 16)
    with pytest.warns(CaptureWarning, match=r"ran eager \(no CUDA\)"):
        loss_of(recorder(x)).backward()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one warning per reason, not per call
        loss_of(recorder(x)).backward()
    loss_of(twin(x)).backward()
    loss_of(twin(x)).backward()
    for (name, p), q in zip(net.named_parameters(), twin.parameters(), strict=True):
        assert p.grad is not None and q.grad is not None
        assert bitwise_equal(p.grad, q.grad), name
    assert recorder.stats.eager == {Reason.NO_CUDA: 2}
    assert recorder.stats.recordings == recorder.stats.replays == 0
    assert recorder.summary() == "network: 0 recordings, 0 replays, 0 retired, 2 eager (no CUDA: 2)"


def test_loss_recorder_on_cpu_is_eager_and_checks_capacity_first() -> None:
    recorder = LossRecorder(padded_detection_loss, capacity=3, targets=(2, 3, 4))
    g = torch.Generator().manual_seed(0)
    boxes, logits = torch.randn(2, 5, 4, generator=g), torch.randn(2, 5, 3, generator=g)
    gt, mask = pad([torch.rand(2, 4, generator=g), torch.rand(4, 4, generator=g)], rows=4)
    labels, _ = pad([torch.tensor([0, 1]), torch.tensor([2, 2, 1, 0])], rows=4)
    args = (boxes, logits, gt, labels, mask, torch.tensor(7.5))
    assert not recorder.fits(args)
    with pytest.warns(CaptureWarning):
        loss, parts = recorder(*args)
    expected, expected_parts = padded_detection_loss(*args)
    assert bitwise_equal(loss, expected) and bitwise_equal(parts, expected_parts)
    assert recorder.stats.eager == {Reason.NO_CUDA: 1}


def test_loss_recorder_refuses_a_target_position_that_is_not_a_padded_tensor() -> None:
    recorder = LossRecorder(lambda a, b: a.sum(), capacity=3, targets=(1,))
    with pytest.raises(TypeError, match="argument 1 is named a padded target"):
        recorder.fits((torch.zeros(2, 3), 1.0))
    with pytest.raises(ValueError, match="capacity must be at least 1"):
        LossRecorder(lambda a: a, capacity=0, targets=(0,))


def test_a_disabled_recorder_runs_eager_quietly() -> None:
    recorder = NetworkRecorder(TwoOutputNet())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        recorder.enabled = False
        recorder(torch.randn(2, 16))
    assert recorder.stats.eager == {Reason.DISABLED: 1}


def test_top_level_forward_hooks_are_refused_with_the_fix() -> None:
    net = TwoOutputNet()
    net.register_forward_hook(lambda *a: None)
    with pytest.raises(ValueError, match="hooks on its top-level forward"):
        NetworkRecorder(net)


def test_deepcopy_starts_unrecorded_around_the_copied_module_and_pickle_is_refused() -> None:
    net = TwoOutputNet()
    recorder = NetworkRecorder(net)
    recorder(torch.randn(2, 16))
    clone = copy.deepcopy(recorder)
    assert clone.module is not net and clone.fn is clone.module
    assert clone.stats.eager_calls == 0 and not clone.recorded
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(recorder)


def test_reset_zeroes_the_counters_for_a_new_fit() -> None:
    recorder = NetworkRecorder(TwoOutputNet())
    recorder(torch.randn(2, 16))
    recorder.reset()
    assert recorder.stats.eager_calls == 0 and not recorder.recorded


def test_loss_recorder_reads_rows_from_a_structure_when_told_how() -> None:
    def loss(pred: torch.Tensor, targets: dict[str, torch.Tensor]) -> torch.Tensor:
        return (pred[:, None] - targets["boxes"]).abs().sum()

    recorder = LossRecorder(loss, capacity=4, rows=lambda args: int(args[1]["boxes"].shape[1]))
    pred = torch.randn(2, 4)
    assert recorder.fits((pred, {"boxes": torch.zeros(2, 4, 4)}))
    assert not recorder.fits((pred, {"boxes": torch.zeros(2, 5, 4)}))
    with pytest.raises(ValueError, match="say where the padded rows are"):
        LossRecorder(loss, capacity=4)


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: NetworkRecorder(lambda x: x), TypeError, r"wraps an nn\.Module, got function"),
        (lambda: NetworkRecorder(torch.nn.Linear), TypeError, "a class: pass an instance"),
        (lambda: NetworkRecorder(None), TypeError, "got NoneType"),
        (lambda: NetworkRecorder(TwoOutputNet(), warmup_iters="3"), TypeError, "warmup_iters"),
        (lambda: NetworkRecorder(TwoOutputNet(), max_recordings=0), ValueError, "max_recordings"),
        (lambda: NetworkRecorder(TwoOutputNet(), generators=5), TypeError, "list of CUDA"),
        (
            lambda: NetworkRecorder(TwoOutputNet(), generators=[torch.Generator()]),
            ValueError,
            r"only CUDA generators \(torch\.Generator\(device='cuda'\)\)",
        ),
        (lambda: LossRecorder(torch.add, capacity="4", targets=(0,)), TypeError, "capacity"),
    ],
    ids=["function", "class", "none", "warmup-str", "recordings-0", "generators-int", "cpu-gen",
         "capacity-str"],
)  # fmt: skip
def test_a_recorder_built_from_wrong_arguments_is_refused_naming_the_argument(
    make: Callable[[], object], error: type[Exception], match: str
) -> None:
    """Was: an AttributeError from deep inside, a comparison of str with int, or (a CPU
    generator) a recorder accepted here that crashed the process at its first recording."""
    with pytest.raises(error, match=match):
        make()


def test_a_loss_recorder_whose_targets_miss_the_call_is_refused_on_the_cpu_too() -> None:
    """Was: accepted on the CPU (every call eager) and an IndexError on a GPU."""
    recorder = LossRecorder(lambda a: a.sum(), capacity=4, targets=(9,))
    with pytest.raises(ValueError, match=r"targets names argument 9, but the call has 1"):
        recorder(torch.zeros(2, 3))
    with pytest.raises(TypeError, match="argument 0 is named a padded target"):
        LossRecorder(lambda a: a.sum(), capacity=4, targets=(0,))(torch.zeros(3))


class _MaskedNet(torch.nn.Module):
    """A forward whose mask and scale are keyword arguments, as a transformer's are."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(
        self, x: torch.Tensor, *, mask: torch.Tensor | None = None, scale: float = 1.0
    ) -> torch.Tensor:
        y = self.proj(x) * scale
        return y if mask is None else y * mask


def test_keyword_arguments_reach_the_forward_as_keywords() -> None:
    torch.manual_seed(0)
    net = _MaskedNet()
    recorder = NetworkRecorder(net)
    x, mask = torch.randn(2, 8), (torch.rand(2, 8) > 0.5).float()
    with pytest.warns(CaptureWarning, match=r"no CUDA"):
        out = recorder(x, mask=mask, scale=0.5)
    assert bitwise_equal(out, net(x, mask=mask, scale=0.5))
    assert bitwise_equal(recorder(x, scale=0.5, mask=mask), out)  # keywords in another order
    assert bitwise_equal(recorder(x), net(x))
    assert recorder.stats.eager == {Reason.NO_CUDA: 3}
