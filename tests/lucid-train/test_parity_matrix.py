"""The GPU session's trainer parity cases cover every pair of task, precision and accumulation
(lucid_testing.parity_matrix)."""

from __future__ import annotations

import pytest

from lucid_testing.parity_matrix import COVERING, FULL, session_matrix, uncovered_pairs


def test_the_session_matrix_puts_every_pair_of_factors_in_some_fit() -> None:
    assert uncovered_pairs(COVERING) == set()
    assert set(COVERING) <= set(FULL) and len(set(COVERING)) == len(COVERING)


def test_detect_runs_the_whole_grid_and_no_other_fit_is_spare() -> None:
    """Detect is the reference task at every pair of precision and accumulation; each other fit
    is the only one to meet some pair, so the check above can fail."""
    assert [c for c in COVERING if c[0] == "detect"] == [c for c in FULL if c[0] == "detect"]
    for i, case in enumerate(COVERING):
        if case[0] != "detect":
            assert uncovered_pairs(COVERING[:i] + COVERING[i + 1 :]), case


@pytest.mark.parametrize(("value", "cases"), [(None, COVERING), ("full", FULL)])
def test_the_full_product_runs_on_request(
    value: str | None, cases: list[object], monkeypatch: pytest.MonkeyPatch
) -> None:
    if value is None:
        monkeypatch.delenv("LUCID_PARITY_MATRIX", raising=False)
    else:
        monkeypatch.setenv("LUCID_PARITY_MATRIX", value)
    assert session_matrix() == cases
