"""Frozen goldens match their sealed checksums, and the check notices any change."""

from __future__ import annotations

from pathlib import Path

from lucid_testing import goldens


def test_every_golden_is_sealed_and_intact() -> None:
    assert goldens.verify(goldens.GOLDENS) == []


def test_manifest_check_reports_edited_unsealed_and_missing_files(tmp_path: Path) -> None:
    (tmp_path / "a.json").write_text('{"x": 1}')
    (tmp_path / "b.json").write_text('{"y": 2}')
    goldens.write(tmp_path)
    assert goldens.verify(tmp_path) == []

    (tmp_path / "a.json").write_text('{"x": 2}')
    (tmp_path / "c.json").write_text("{}")
    (tmp_path / "b.json").unlink()
    problems = goldens.verify(tmp_path)
    assert any(p.startswith("a.json: sha256 changed") for p in problems)
    assert "c.json: not sealed in MANIFEST.sha256" in problems
    assert "b.json: listed in MANIFEST.sha256 but missing" in problems
