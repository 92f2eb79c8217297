"""The package README's Python example trains as written (shortened here to two batches of a
small canvas on the CPU), and every file its reading guide points at exists."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "packages" / "lucid-train"
README = PACKAGE / "README.md"
# the example's run, shortened for the CPU: each replacement must find its text
SHORTER = {
    "img_size=320": "img_size=64",  # the data's and the module's
    "batch_size=16": "batch_size=4, num_workers=0",
    "max_epochs=6": "max_epochs=1, limit_train_batches=2, limit_val_batches=1, accelerator='cpu'",
}


def test_readme_python_example_fits_and_writes_its_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    example = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)[0]
    for old, new in SHORTER.items():
        assert old in example, f"the README's example no longer says {old!r}"
        example = example.replace(old, new)
    monkeypatch.chdir(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(example, str(README), "exec"), {})
    run = tmp_path / "runs" / "detect" / "train"
    assert (run / "checkpoints" / "last.ckpt").is_file()
    assert (run / "metrics.csv").is_file()


def test_every_file_the_reading_guide_names_exists() -> None:
    guide = README.read_text().split("## Where to start reading", 1)[1]
    named = re.findall(r"`([a-z_/]+\.py)`", guide)
    assert len(named) > 10
    source = PACKAGE / "src" / "lucid_train"
    missing = [n for n in named if not ((source / n).is_file() or (PACKAGE / n).is_file())]
    assert not missing, missing
