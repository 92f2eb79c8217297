"""Rule 3 on the host: the first difference between a recording's call and a live one, by reason."""

from __future__ import annotations

import pytest
import torch

from lucid_capture import Reason
from lucid_capture.signature import CallSignature, parameter_identity, unsupported


def sig(*args: object) -> CallSignature:
    return CallSignature.of(args, device_type="cpu")


X = torch.zeros(4, 3, 8, 8)


@pytest.mark.parametrize(
    ("live", "reason"),
    [
        ((X,), None),
        ((torch.zeros(3, 3, 8, 8),), Reason.SHAPE),
        ((X.double(),), Reason.DTYPE),
        ((X.contiguous(memory_format=torch.channels_last),), Reason.LAYOUT),
        ((X.clone().requires_grad_(),), Reason.REQUIRES_GRAD),
        ((X, 2.0), Reason.ARGUMENTS),
    ],
)
def test_mismatch_names_the_first_difference(
    live: tuple[object, ...], reason: Reason | None
) -> None:
    assert sig(X).mismatch(sig(*live)) == reason


def test_autocast_state_is_part_of_the_signature() -> None:
    recorded = sig(X)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert recorded.mismatch(sig(X)) == Reason.AUTOCAST
        under = sig(X)
    with torch.autocast("cpu", dtype=torch.float16):
        assert under.mismatch(sig(X)) == Reason.AUTOCAST


def test_constants_compare_by_value_and_nan_equals_nan() -> None:
    nan = float("nan")
    assert sig(X, nan).mismatch(sig(X, nan)) is None
    assert sig(X, 1).mismatch(sig(X, 1.0)) == Reason.ARGUMENTS


def test_parameter_identity_changes_when_a_tensor_is_swapped() -> None:
    layer = torch.nn.Linear(2, 2)
    before = parameter_identity(list(layer.parameters()))
    layer.load_state_dict(torch.nn.Linear(2, 2).state_dict(), assign=True)
    assert parameter_identity(list(layer.parameters())) != before


def test_complex_and_sparse_inputs_cannot_be_recorded() -> None:
    assert unsupported([torch.zeros(2, dtype=torch.complex64)])
    assert unsupported([torch.zeros(2, 2).to_sparse()])
    assert not unsupported([X, 3, None])
