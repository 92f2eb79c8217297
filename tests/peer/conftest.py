"""The equivalence ladder against Ultralytics 8.4.190 (issue 37): every test here computes the
authors' numbers at test time from their code (the dev-only `peer` dependency group) and
compares ours with them. Without Ultralytics the folder skips, saying so."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

# Their import probes the network and writes settings unless told otherwise: point both at a
# scratch folder before the first import, with a font so a validation never downloads one.
_CONFIG = Path(tempfile.mkdtemp(prefix="lucid-peer-"))
os.environ.setdefault("YOLO_OFFLINE", "1")
os.environ.setdefault("YOLO_CONFIG_DIR", str(_CONFIG))
os.environ.setdefault("MPLCONFIGDIR", str(_CONFIG / "mpl"))
try:
    import matplotlib

    font = Path(matplotlib.__file__).parent / "mpl-data" / "fonts" / "ttf" / "DejaVuSans.ttf"
    fonts = Path(os.environ["YOLO_CONFIG_DIR"]) / "Ultralytics"
    fonts.mkdir(parents=True, exist_ok=True)
    for name in ("Arial.ttf", "Arial.Unicode.ttf"):
        if not (fonts / name).exists():
            shutil.copy(font, fonts / name)
except ImportError:  # matplotlib comes with Ultralytics; without it the skip below says why
    pass


@pytest.fixture(scope="session", autouse=True)
def _authors_trainer() -> None:
    """Each test skips, saying why, where Ultralytics is absent (a skip at conftest import
    would stop the whole session instead). The test modules import it only inside tests."""
    pytest.importorskip(
        "ultralytics",
        reason="the peer ladder needs Ultralytics 8.4.190 (uv sync --group peer)",
    )
