"""Padding to a fixed capacity: exact round trip, a true mask, overflow reported never truncated."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch
from torch import Tensor

from lucid_kernels import (
    CapacityExceededError,
    CapacityReport,
    Padded,
    capacity_report,
    pad_positions,
    pad_to_capacity,
    unpad,
)


def keypoint_batch(device: torch.device) -> list[Tensor]:
    """Ragged keypoints ``(n_i, 17, 3)``; the empty image holds the canonical ``(0, 0, 2)``."""
    gen = torch.Generator().manual_seed(0)
    return [
        torch.randn(3, 17, 3, generator=gen).to(device),
        torch.zeros(0, 0, 2, device=device),
        torch.randn(1, 17, 3, generator=gen).to(device),
        torch.randn(5, 17, 3, generator=gen).to(device),
    ]


def assert_same_pieces(got: Sequence[Tensor], want: Sequence[Tensor]) -> None:
    assert len(got) == len(want)
    for index, (a, b) in enumerate(zip(got, want, strict=True)):
        assert a.shape == b.shape, f"piece {index}: shape {a.shape} != {b.shape}"
        assert a.dtype == b.dtype, f"piece {index}: dtype {a.dtype} != {b.dtype}"
        assert a.device == b.device, f"piece {index}: device {a.device} != {b.device}"
        assert torch.equal(a, b), f"piece {index}: values differ"


def test_round_trip_is_exact(device: torch.device) -> None:
    """unpad(pad_to_capacity(pieces)) gives every piece back, zero-row shapes included."""
    pieces = keypoint_batch(device)
    padded = pad_to_capacity(pieces, capacity=6, fill=-1.0)
    assert padded.values.shape == (4, 6, 17, 3)
    assert_same_pieces(unpad(padded), pieces)


def test_rows_land_in_order_and_padding_holds_fill(device: torch.device) -> None:
    """Row r of image i sits at values[i, r]; every other slot holds ``fill``."""
    pieces = [
        torch.tensor([[1.0, 2.0], [3.0, 4.0]], device=device),
        torch.zeros(0, 2, device=device),
        torch.tensor([[5.0, 6.0]], device=device),
    ]
    padded = pad_to_capacity(pieces, capacity=3, fill=-7.0)
    f = -7.0
    expected = torch.tensor(
        [
            [[1.0, 2.0], [3.0, 4.0], [f, f]],
            [[f, f], [f, f], [f, f]],
            [[5.0, 6.0], [f, f], [f, f]],
        ],
        device=device,
    )
    assert torch.equal(padded.values, expected)


def test_mask_and_counts_mark_the_real_rows(device: torch.device) -> None:
    """mask[i, r] is True exactly for r < n_i; counts are int64 on the pieces' device."""
    padded = pad_to_capacity(keypoint_batch(device), capacity=6)
    expected_counts = torch.tensor([3, 0, 1, 5], device=device)
    assert padded.counts.dtype == torch.int64
    assert padded.counts.device == padded.values.device
    assert torch.equal(padded.counts, expected_counts)
    assert padded.mask.dtype == torch.bool
    expected_mask = torch.tensor(
        [[r < n for r in range(6)] for n in (3, 0, 1, 5)], dtype=torch.bool, device=device
    )
    assert torch.equal(padded.mask, expected_mask)
    assert padded.report == CapacityReport(counts=(3, 0, 1, 5), capacity=6)


def test_count_equal_to_capacity_fits(device: torch.device) -> None:
    """Capacity is inclusive: an image with exactly ``capacity`` rows fills its slots."""
    pieces = [torch.ones(4, 2, device=device), torch.ones(1, 2, device=device)]
    padded = pad_to_capacity(pieces, capacity=4)
    assert bool(padded.mask[0].all())
    assert_same_pieces(unpad(padded), pieces)


def test_over_capacity_raises_and_truncates_nothing() -> None:
    """An image over capacity raises with its index, count and capacity; no rows are dropped."""
    pieces = [torch.ones(2, 4), torch.ones(5, 4), torch.ones(0, 4), torch.ones(7, 4)]
    with pytest.raises(
        CapacityExceededError, match=r"image 1 holds 5 rows, over the capacity of 4"
    ) as info:
        pad_to_capacity(pieces, capacity=4)
    error = info.value
    assert isinstance(error, ValueError)
    assert (error.index, error.count, error.capacity) == (1, 5, 4)
    assert error.report.overflow == (0, 1, 0, 3)
    assert error.report.total_overflow == 4
    assert error.report.over_capacity == (1, 3)
    assert "at least 7" in str(error)


def test_capacity_report_flags_overflow_without_padding() -> None:
    """The report-only path: the caller learns it must run eager, with the counts."""
    report = capacity_report([3, 0, 9, 4], capacity=4)
    assert not report.fits
    assert report.counts == (3, 0, 9, 4)
    assert report.overflow == (0, 0, 5, 0)
    assert report.total_overflow == 5
    assert report.over_capacity == (2,)
    assert report.max_count == 9
    assert capacity_report([4, 1], capacity=4).fits


def test_capacity_report_reads_tensor_counts() -> None:
    """Counts may come as a 1-D integer tensor (read on the host)."""
    report = capacity_report(torch.tensor([1, 6]), capacity=5)
    assert report.overflow == (0, 1)


@pytest.mark.parametrize("counts", [torch.tensor([[1, 2]]), torch.tensor([1.0, 2.0])])
def test_capacity_report_rejects_non_integer_or_nested_counts(counts: Tensor) -> None:
    """Counts are a 1-D integer tensor or a sequence of ints."""
    with pytest.raises(ValueError, match="1-D integer tensor"):
        capacity_report(counts, capacity=3)


def test_capacity_report_rejects_negative_counts() -> None:
    """A negative row count is a bug upstream, named by index."""
    with pytest.raises(ValueError, match=r"got -1 at index 1"):
        capacity_report([2, -1], capacity=3)


@pytest.mark.parametrize("capacity", [-1, 2.5, True])
def test_invalid_capacity_raises(capacity: object) -> None:
    """Capacity is a non-negative int."""
    with pytest.raises(ValueError, match="capacity as an int >= 0"):
        pad_to_capacity([torch.ones(1, 2)], capacity=capacity)  # type: ignore[arg-type]


def test_all_empty_batch_keeps_the_requested_layout(device: torch.device) -> None:
    """Every image empty: ``trailing_shape`` keeps the static layout; unpad returns the shapes."""
    pieces = [torch.zeros(0, 0, 2, device=device), torch.zeros(0, 17, 3, device=device)]
    padded = pad_to_capacity(pieces, capacity=3, trailing_shape=(17, 3))
    assert padded.values.shape == (2, 3, 17, 3)
    assert not bool(padded.mask.any())
    assert torch.equal(padded.counts, torch.zeros(2, dtype=torch.int64, device=device))
    assert_same_pieces(unpad(padded), pieces)


def test_all_empty_batch_without_trailing_shape_uses_piece_zero() -> None:
    """Without ``trailing_shape`` and without rows, piece 0's trailing shape is laid out."""
    padded = pad_to_capacity([torch.zeros(0, 4), torch.zeros(0, 0, 2)], capacity=2)
    assert padded.values.shape == (2, 2, 4)


def test_zero_capacity_with_empty_images() -> None:
    """Capacity 0 is legal when no image holds rows."""
    padded = pad_to_capacity([torch.zeros(0, 4)], capacity=0)
    assert padded.values.shape == (1, 0, 4)
    assert_same_pieces(unpad(padded), [torch.zeros(0, 4)])


def test_trailing_shape_mismatch_raises_naming_the_piece() -> None:
    """Row-holding pieces must agree on trailing shape (zero-row pieces need not)."""
    pieces = [torch.ones(2, 17, 3), torch.zeros(0, 0, 2), torch.ones(1, 17, 2)]
    with pytest.raises(ValueError, match=r"expected trailing shape \(17, 3\).*at index 2"):
        pad_to_capacity(pieces, capacity=4)
    with pytest.raises(ValueError, match=r"\(from trailing_shape\), got \(17, 3\) at index 0"):
        pad_to_capacity(pieces[:2], capacity=4, trailing_shape=(5,))


def test_zero_dim_piece_raises() -> None:
    """A scalar has no rows to pad."""
    with pytest.raises(ValueError, match=r"0-d tensor at index 1"):
        pad_to_capacity([torch.ones(1), torch.tensor(2.0)], capacity=2)


def test_no_pieces_raises() -> None:
    """A batch has at least one image."""
    with pytest.raises(ValueError, match="at least one piece"):
        pad_to_capacity([], capacity=2)


def test_mixed_dtypes_raise() -> None:
    """One padded tensor has one dtype."""
    with pytest.raises(ValueError, match=r"at index 1"):
        pad_to_capacity([torch.ones(1, 2), torch.ones(1, 2, dtype=torch.float64)], capacity=2)


def test_unpad_slices_another_tensor_with_the_same_counts(device: torch.device) -> None:
    """A per-target result ``(B, capacity)`` is cut back into ``(n_i,)`` pieces."""
    padded = pad_to_capacity(keypoint_batch(device), capacity=6)
    per_target = torch.arange(24.0, device=device).view(4, 6)
    got = unpad(padded, per_target)
    assert [tuple(t.shape) for t in got] == [(3,), (0,), (1,), (5,)]
    assert torch.equal(got[3], per_target[3, :5])
    with pytest.raises(ValueError, match=r"expected values of shape \(4, 6\)"):
        unpad(padded, per_target[:, :5])


def test_integer_and_bool_pieces_round_trip(device: torch.device) -> None:
    """Class ids and flags pad like coordinates."""
    ids = [torch.tensor([3, 1], device=device), torch.tensor([], dtype=torch.int64, device=device)]
    flags = [torch.tensor([True], device=device), torch.tensor([False, True], device=device)]
    assert_same_pieces(unpad(pad_to_capacity(ids, capacity=2, fill=-1)), ids)
    assert_same_pieces(unpad(pad_to_capacity(flags, capacity=3)), flags)


def test_gradients_flow_back_to_the_pieces() -> None:
    """Padding is differentiable: each real row receives its gradient, padding none."""
    pieces = [torch.randn(2, 3, requires_grad=True), torch.randn(1, 3, requires_grad=True)]
    padded = pad_to_capacity(pieces, capacity=4)
    weights = torch.arange(24.0).view(2, 4, 3)
    (padded.values * weights).sum().backward()
    assert pieces[0].grad is not None
    assert pieces[1].grad is not None
    assert torch.equal(pieces[0].grad, weights[0, :2])
    assert torch.equal(pieces[1].grad, weights[1, :1])


def test_padded_rejects_inconsistent_fields() -> None:
    """A hand-built Padded whose fields disagree is refused at construction."""
    padded = pad_to_capacity([torch.ones(1, 2)], capacity=2)
    with pytest.raises(ValueError, match=r"expected mask of shape \(1, 2\)"):
        Padded(padded.values, padded.mask[:, :1], padded.counts, padded.shapes)


@pytest.mark.gpu
@pytest.mark.filterwarnings("ignore:Synchronization debug mode is a prototype")
def test_cuda_padding_and_unpadding_never_synchronise() -> None:
    """Counts come from host shapes; the index copy is pinned and non-blocking."""
    pieces = keypoint_batch(torch.device("cuda"))
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    try:
        torch.cuda.set_sync_debug_mode("error")
        padded = pad_to_capacity(pieces, capacity=6)
        back = unpad(padded)
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    assert_same_pieces(back, pieces)


@pytest.mark.parametrize("counts", [[3, 0, 5, 1], [0], [0, 0], [4], [2, 2, 2]])
@pytest.mark.parametrize("capacity", [5, 9])
def test_positions_from_counts_pad_as_the_split_positions_do(
    counts: list[int], capacity: int, device: torch.device
) -> None:
    """`pad_positions` is `pad_to_capacity` of the flat positions split by the counts, fill -1:
    the same values, mask, counts and shapes, on the requested device."""
    positions = torch.arange(sum(counts), dtype=torch.int64, device=device)
    want = pad_to_capacity(list(torch.split(positions, counts)), capacity, fill=-1)
    got = pad_positions(counts, capacity, device)
    for name in ("values", "mask", "counts"):
        a, b = getattr(got, name), getattr(want, name)
        assert a.dtype == b.dtype and a.device == b.device, name
        assert torch.equal(a, b), name
    assert got.shapes == want.shapes


def test_positions_over_capacity_raise_and_no_counts_refused() -> None:
    """An image over the capacity is refused as `pad_to_capacity` refuses it; so is B = 0."""
    with pytest.raises(CapacityExceededError, match="image 1 holds 6 rows"):
        pad_positions([2, 6, 1], 5)
    with pytest.raises(ValueError, match="at least one count"):
        pad_positions([], 5)
