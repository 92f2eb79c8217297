"""The package README's plain-PyTorch example runs as written (eager here, replayed on a GPU)."""

from __future__ import annotations

import contextlib
import io
import re
import warnings
from pathlib import Path

import pytest

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


def test_readme_lightning_example_fits_as_written() -> None:
    """The Lightning block defines a module that fits with the callback, its `.fit(...)` given
    a network, a loss and two batches (eager here, replayed on a GPU)."""
    pytest.importorskip("lightning.pytorch", reason="needs lucid-capture[lightning]")
    import torch

    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    block = next(b for b in blocks if "CaptureCallback" in b)
    assert block.count(".fit(...)") == 1, "the block's last line fits the module"
    data = torch.utils.data.TensorDataset(torch.randn(8, 16), torch.randn(8, 4))
    fit = (
        ".fit(Module(torch.nn.Linear(16, 4), torch.nn.functional.mse_loss),"
        " torch.utils.data.DataLoader(data, batch_size=4))"
    )
    example = block.replace(".fit(...)", fit).replace(
        "L.Trainer(",
        "L.Trainer(max_epochs=1, accelerator='cpu', logger=False, "
        "enable_checkpointing=False, enable_progress_bar=False, ",
    )
    example = example.replace('precision="16-mixed"', 'precision="32-true"')  # CPU
    scope = {"data": data}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exec(compile(example, str(README), "exec"), scope)
    assert "Module" in scope
