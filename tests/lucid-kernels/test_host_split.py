"""host_split: one device-to-host transfer, pieces back exactly as per-piece ``.cpu()``."""

from __future__ import annotations

import doctest
import importlib
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
from torch import Tensor

from lucid_kernels import host_split


def assert_same_as_per_piece_cpu(out: Sequence[Tensor], pieces: Sequence[Tensor]) -> None:
    """The naive reference: each piece copied on its own."""
    assert len(out) == len(pieces)
    for index, (got, piece) in enumerate(zip(out, pieces, strict=True)):
        want = piece.cpu()
        assert got.device.type == "cpu", f"piece {index} not on the host"
        assert got.dtype == want.dtype, f"piece {index}: dtype {got.dtype} != {want.dtype}"
        assert got.shape == want.shape, f"piece {index}: shape {got.shape} != {want.shape}"
        assert torch.equal(got, want), f"piece {index}: values differ"


def test_zero_row_piece_keeps_own_trailing_shape(device: torch.device) -> None:
    """An image without people, keypoints (0, 0, 2), sits beside (n, 17, 2) neighbours."""
    gen = torch.Generator().manual_seed(0)
    pieces = [
        torch.randn(3, 17, 2, generator=gen).to(device),
        torch.zeros(0, 0, 2, device=device),
        torch.randn(2, 17, 2, generator=gen).to(device),
        torch.zeros(0, 17, 2, device=device),
    ]
    assert_same_as_per_piece_cpu(host_split(pieces), pieces)


def test_pieces_of_different_trailing_shapes_come_back_in_order(device: torch.device) -> None:
    """Row-holding pieces need not agree on trailing shape; order is kept, 0-d stays 0-d."""
    pieces = [
        torch.arange(8, device=device).view(2, 4),
        torch.arange(3, device=device),
        torch.arange(12, device=device).view(1, 3, 2, 2),
        torch.tensor(7, device=device),
        torch.arange(5, device=device).view(5, 1),
    ]
    assert_same_as_per_piece_cpu(host_split(pieces), pieces)


@pytest.mark.parametrize(
    "dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int64, torch.bool]
)
def test_dtype_is_preserved(device: torch.device, dtype: torch.dtype) -> None:
    """Every dtype comes back unchanged, bit for bit."""
    gen = torch.Generator().manual_seed(1)
    pieces = [(torch.randn(n, 4, generator=gen) * 10).to(dtype).to(device) for n in (2, 0, 5)]
    assert_same_as_per_piece_cpu(host_split(pieces), pieces)


def test_strided_piece_values_match(device: torch.device) -> None:
    """A transposed (non-contiguous) piece comes back with its logical values."""
    base = torch.arange(24.0, device=device).view(4, 6)
    pieces = [base.t(), base[:, ::2]]
    assert not pieces[0].is_contiguous()
    assert_same_as_per_piece_cpu(host_split(pieces), pieces)


def test_results_never_alias_host_inputs() -> None:
    """Writing into a result leaves the (already host) input untouched."""
    piece = torch.zeros(2, 3)
    (out,) = host_split([piece])
    out.fill_(1.0)
    assert torch.equal(piece, torch.zeros(2, 3))


def test_empty_list_gives_empty_list() -> None:
    """No pieces, nothing to move."""
    assert host_split([]) == []


def test_all_pieces_empty_keep_their_shapes(device: torch.device) -> None:
    """A batch without a single row still hands back every shape."""
    pieces = [torch.zeros(0, 0, 2, device=device), torch.zeros(0, 17, 3, device=device)]
    assert_same_as_per_piece_cpu(host_split(pieces), pieces)


def test_one_concatenation_and_one_transfer(monkeypatch: pytest.MonkeyPatch) -> None:
    """All row-holding pieces travel in one ``torch.cat`` and one ``.cpu()`` call."""
    calls = {"cat": 0, "cpu": 0}

    def counting(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return fn(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(torch, "cat", counting("cat", torch.cat))
    monkeypatch.setattr(torch.Tensor, "cpu", counting("cpu", torch.Tensor.cpu))
    pieces = [torch.ones(3, 17, 2), torch.zeros(0, 0, 2), torch.ones(1, 4), torch.ones(2, 17, 2)]
    host_split(pieces)
    assert calls == {"cat": 1, "cpu": 1}


def test_mixed_dtypes_raise_naming_the_piece() -> None:
    """Pieces of two dtypes cannot share one buffer: the error names the index."""
    with pytest.raises(ValueError, match=r"dtype torch\.float32.*got torch\.int64 at index 1"):
        host_split([torch.zeros(2), torch.zeros(2, dtype=torch.int64)])


def test_mixed_devices_raise_naming_the_piece() -> None:
    """Pieces on two devices cannot travel in one transfer: the error names the index."""
    with pytest.raises(ValueError, match=r"got meta at index 2"):
        host_split([torch.zeros(2), torch.zeros(1), torch.zeros(2, device="meta")])


def test_non_tensor_piece_raises_type_error() -> None:
    """A list of numbers is not a list of tensors."""
    with pytest.raises(TypeError, match=r"got list at index 1"):
        host_split([torch.zeros(1), [1.0]])  # type: ignore[list-item]


def test_docstring_example_runs() -> None:
    """The module's doctest (the zero-row keypoint case) runs and passes."""
    # ``lucid_kernels.host_split`` is the function (re-exported); fetch the module itself.
    module = importlib.import_module("lucid_kernels.host_split")
    result = doctest.testmod(module)
    assert result.attempted > 0
    assert result.failed == 0
