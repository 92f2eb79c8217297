"""Newton–Schulz: singular values towards 1, singular vectors kept, float32 inside, float64 kept."""

from __future__ import annotations

import pytest
import torch

from lucid_train.optim import NS_COEFFICIENTS, compute_dtype, orthogonalize

SHAPES = [(32, 96), (96, 32), (16, 8 * 3 * 3), (48, 48 * 2)]


def _rotated(matrix: torch.Tensor, result: torch.Tensor) -> torch.Tensor:
    """``U^T result V`` for ``matrix = U S V^T``: diagonal iff the singular vectors are kept."""
    u, _, vh = torch.linalg.svd(matrix.double(), full_matrices=False)
    rotated: torch.Tensor = u.mT @ result.double() @ vh.mT
    return rotated


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(("dtype", "tol"), [(torch.float32, 1e-4), (torch.float64, 1e-10)])
def test_singular_values_near_one_and_vectors_kept(
    shape: tuple[int, int], dtype: torch.dtype, tol: float
) -> None:
    g = torch.randn(shape, generator=torch.Generator().manual_seed(0), dtype=dtype)
    out = orthogonalize(g)
    assert out.dtype == dtype and out.shape == g.shape
    rotated = _rotated(g, out)
    diagonal = torch.diagonal(rotated)
    off = rotated - torch.diag_embed(diagonal)
    assert off.abs().max() < tol  # float64 reaches 1e-10 only if it iterated in float64
    assert diagonal.min() > 0.6 and diagonal.max() < 1.25
    assert (diagonal.mean() - 1.0).abs() < 0.25


def test_coefficients_are_the_authors() -> None:
    assert NS_COEFFICIENTS == (3.4445, -4.7750, 2.0315)


def test_float64_is_not_rounded_through_float32() -> None:
    g = torch.randn(24, 40, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    via_float32 = orthogonalize(g.float()).double()
    exact = orthogonalize(g)
    assert compute_dtype(torch.float64) == torch.float64
    assert not torch.equal(exact, via_float32)
    torch.testing.assert_close(exact, via_float32, rtol=0, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_iterates_in_float32(dtype: torch.dtype) -> None:
    g = torch.randn(16, 40, generator=torch.Generator().manual_seed(2)).to(dtype)
    out = orthogonalize(g)
    assert compute_dtype(dtype) == torch.float32
    assert out.dtype == dtype
    assert torch.equal(out, orthogonalize(g.float()).to(dtype))


def test_zero_matrix_stays_zero() -> None:
    assert torch.equal(orthogonalize(torch.zeros(8, 12)), torch.zeros(8, 12))


def test_batch_equals_each_matrix_and_tall_equals_transposed_wide() -> None:
    g = torch.randn(3, 20, 12, generator=torch.Generator().manual_seed(3))
    batched = orthogonalize(g)
    for i in range(3):
        torch.testing.assert_close(batched[i], orthogonalize(g[i]), rtol=0, atol=1e-6)
        torch.testing.assert_close(
            batched[i], orthogonalize(g[i].T.contiguous()).T, rtol=0, atol=1e-6
        )


def test_input_is_not_modified() -> None:
    g = torch.randn(10, 14, generator=torch.Generator().manual_seed(4))
    before = g.clone()
    orthogonalize(g)
    assert torch.equal(g, before)


def test_vectors_are_refused() -> None:
    with pytest.raises(ValueError, match="matrices"):
        orthogonalize(torch.ones(5))
