"""The package's public surface: every name in ``__all__`` is importable from the top."""

from __future__ import annotations

import lucid_kernels


def test_every_exported_name_resolves() -> None:
    """``from lucid_kernels import *`` gives exactly the documented names."""
    missing = [name for name in lucid_kernels.__all__ if not hasattr(lucid_kernels, name)]
    assert missing == []
    assert len(set(lucid_kernels.__all__)) == len(lucid_kernels.__all__)


def test_version_is_a_string() -> None:
    """The workspace versions its members together."""
    assert isinstance(lucid_kernels.__version__, str)
