"""The package README's example runs as written and prints the fixed shapes it promises, and
every file its table names exists."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "packages" / "lucid-models"
README = PACKAGE / "README.md"


def test_readme_example_decodes_both_branches_at_fixed_shapes() -> None:
    example = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)[0]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(example, str(README), "exec"), {})
    assert out.getvalue().strip() == (
        "torch.Size([2, 300, 4]) torch.Size([2, 300]) torch.Size([2, 300, 4])"
    )


def test_every_file_the_readme_names_exists() -> None:
    named = re.findall(r"`([a-z_]+\.py)`", README.read_text())
    assert len(named) > 10
    missing = [n for n in named if not (PACKAGE / "src" / "lucid_models" / n).is_file()]
    assert not missing, missing
