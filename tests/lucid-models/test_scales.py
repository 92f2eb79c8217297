"""The scale rows and compound-scaling rules."""

from __future__ import annotations

import pytest

from lucid_models.scales import SCALES, parse_model_name


def test_scale_rows_are_the_authors_depth_width_and_channel_caps() -> None:
    """The five rows are those of the authors' yolo26*.yaml."""
    rows = {k: (s.depth, s.width, s.max_channels) for k, s in SCALES.items()}
    assert rows == {
        "n": (0.50, 0.25, 1024),
        "s": (0.50, 0.50, 1024),
        "m": (0.50, 1.00, 512),
        "l": (1.00, 1.00, 512),
        "x": (1.00, 1.50, 512),
    }


def test_channels_cap_then_scale_then_round_up_to_eight() -> None:
    """``channels(1024)`` at x is ``min(1024, 512) * 1.5 = 768``; n's 64 becomes 16."""
    assert SCALES["x"].channels(1024) == 768
    assert SCALES["n"].channels(64) == 16
    assert SCALES["n"].channels(100) == 32  # 25 rounds up to 32


def test_repeats_scale_with_depth_and_a_single_unit_stays_single() -> None:
    """Two base repeats become one at depth 0.5 and two at depth 1; one stays one."""
    assert SCALES["n"].repeats(2) == 1
    assert SCALES["l"].repeats(2) == 2
    assert SCALES["x"].repeats(1) == 1


def test_scale_table_is_read_only() -> None:
    """Rows cannot be replaced at run time."""
    with pytest.raises(TypeError):
        SCALES["n"] = SCALES["s"]  # type: ignore[index]


@pytest.mark.parametrize("name", ["yolo26", "yolo26q", "yolo11n", "YOLO26n"])
def test_unknown_model_names_are_refused_with_the_valid_ones_listed(name: str) -> None:
    """A bad name names the accepted scales."""
    with pytest.raises(ValueError, match=r"yolo26<scale>.*'l', 'm', 'n', 's', 'x'"):
        parse_model_name(name)
