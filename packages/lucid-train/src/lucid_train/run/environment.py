"""The environment a command runs in, checked before it starts: each ``LUCID_*`` switch's value
and a rank variable left outside a data-parallel launch, refused in one line each."""

from __future__ import annotations

import os
from pathlib import Path

from lucid_models.conv import FUSE_BN_SILU_ERROR
from lucid_train.distributed import check_rank_environment
from lucid_train.errors import LucidError
from lucid_train.losses.detection import ARITHMETIC_ERROR

__all__ = ["check_environment"]


def check_environment() -> None:
    """Refuse what the process's environment holds that a command would misread.

    Raises:
        LucidError: a rank variable outside a launch (`check_rank_environment`), a switch of
            unknown value (``LUCID_LOSS_ARITHMETIC``, ``LUCID_FUSE_BN_SILU``), or a
            ``LUCID_EPOCH_MARKS`` that no file can be written at.
    """
    check_rank_environment()
    for error in (ARITHMETIC_ERROR, FUSE_BN_SILU_ERROR):
        if error is not None:
            raise LucidError(f"{error}; fix or unset the variable")
    marks = os.environ.get("LUCID_EPOCH_MARKS")
    if marks and (Path(marks).is_dir() or not Path(marks).parent.is_dir()):
        raise LucidError(
            f"LUCID_EPOCH_MARKS={marks}: the epochs' marks are appended to this file, and it is "
            "a folder or its folder does not exist; name a file in an existing folder, or unset it"
        )
