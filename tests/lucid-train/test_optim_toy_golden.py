"""The MuSGD-vs-SGD toy convergence golden (goldens/train/musgd_vs_sgd_toy.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lucid_train.optim.toy import COMMAND, TOY_LR, TOY_STEPS, train_toy

GOLDEN = Path(__file__).resolve().parents[2] / "goldens" / "train" / "musgd_vs_sgd_toy.json"


def test_golden_says_how_it_was_made() -> None:
    golden = json.loads(GOLDEN.read_text())
    assert golden["command"] == COMMAND
    assert (golden["steps"], golden["lr"]) == (TOY_STEPS, TOY_LR)


@pytest.mark.parametrize("optimizer", ["musgd", "sgd"])
def test_final_loss_matches_the_golden(optimizer: str) -> None:
    golden = json.loads(GOLDEN.read_text())
    expected = golden["final_loss"][optimizer]
    assert train_toy(optimizer) == pytest.approx(expected, rel=golden["rtol"])  # type: ignore[arg-type]


def test_musgd_converges_at_least_as_well_as_sgd() -> None:
    final = json.loads(GOLDEN.read_text())["final_loss"]
    assert final["musgd"] <= final["sgd"]
    assert train_toy("musgd") <= train_toy("sgd")
