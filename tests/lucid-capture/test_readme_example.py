"""The package README's plain-PyTorch example runs as written (eager here, replayed on a GPU)."""

from __future__ import annotations

import contextlib
import io
import re
import warnings
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "packages" / "lucid-capture" / "README.md"


def test_readme_example_runs_and_reports_its_summary() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    example = blocks[0]
    assert len(example.strip().splitlines()) <= 16, "keep the first example short"
    out = io.StringIO()
    with contextlib.redirect_stdout(out), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(example, str(README), "exec"), {})
    import torch

    if torch.cuda.is_available():
        assert out.getvalue().strip() == "network: 1 recording, 20 replays, 0 retired, 0 eager"
    else:
        assert (
            out.getvalue().strip()
            == "network: 0 recordings, 0 replays, 0 retired, 20 eager (no CUDA: 20)"
        )
