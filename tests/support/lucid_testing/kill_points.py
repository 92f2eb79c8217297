"""``python -m lucid_testing.kill_points LOG <lucid args>``: `lucid_testing.recorded_fit` with one
more place to hold a run: ``LUCID_TEST_HOLD_VAL=N`` stops it inside its ``N``-th validation
sample read (1-based, counted over the process), creating ``LOG.held`` and waiting for
``LOG.release`` as the training hold (``LUCID_TEST_HOLD_AT``) does. A driver can then signal the
run at a known point of a validation (`benchmarks/kill_anywhere.py`). Needs
``--data.num_workers 0``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from lucid_testing import recorded_fit
from lucid_testing.recorded_fit import hold_until_released
from lucid_train.data.dataset import EvalDataset


def main(argv: list[str]) -> int:
    log_path = argv[0]
    read = EvalDataset.__getitem__
    hold_at = int(os.environ.get("LUCID_TEST_HOLD_VAL", "0") or 0)
    reads = 0

    def counted(self: EvalDataset, index: int) -> Any:
        nonlocal reads
        reads += 1
        if reads == hold_at:
            hold_until_released(log_path)
        return read(self, index)

    EvalDataset.__getitem__ = counted  # type: ignore[method-assign]
    return recorded_fit.main(argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
