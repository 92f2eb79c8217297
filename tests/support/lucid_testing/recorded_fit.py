"""``python -m lucid_testing.recorded_fit LOG <lucid args>``: the ``lucid`` command in a fresh
interpreter that also appends, for every training sample it reads, ``epoch position index`` to
the file LOG (flushed line by line, so the record survives SIGKILL). The image order of each epoch
(the sampler's epoch, through the dataset's permutation) can then be compared between an
uninterrupted run and a killed-and-resumed one. Needs ``--data.num_workers 0`` (samples are
read in this process).

``LUCID_TEST_HOLD_AT="EPOCH POSITION"`` stops the run inside that read until the test lets it go:
the read creates ``LOG.held`` and waits for ``LOG.release``. A test can then signal the run at a
known batch of a known epoch however loaded the machine is, instead of racing its timing.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

from lucid_train import cli
from lucid_train.data.dataset import TrainDataset


def held(log: str | Path) -> Path:
    """The file a held read creates once it waits."""
    return Path(f"{log}.held")


def release(log: str | Path) -> Path:
    """The file that lets a held read go on."""
    return Path(f"{log}.release")


def hold_until_released(log: str | Path) -> None:
    """Say the read is held (`held`), then wait until the test releases it (`release`)."""
    held(log).touch()
    while not release(log).exists():
        time.sleep(0.01)


def main(argv: list[str]) -> int:
    log_path, args = argv[0], argv[1:]
    log = open(log_path, "a", buffering=1)  # noqa: SIM115 - open for the whole run
    read = TrainDataset.__getitem__
    hold_at = os.environ.get("LUCID_TEST_HOLD_AT", "")
    hold = tuple(int(v) for v in hold_at.split()) if hold_at else None

    def recorded(self: TrainDataset, key: tuple[int, int]) -> Any:
        epoch, position = key
        log.write(f"{epoch} {position} {int(self.permutation(epoch)[position])}\n")
        if (epoch, position) == hold:
            hold_until_released(log_path)
        return read(self, key)

    TrainDataset.__getitem__ = recorded  # type: ignore[method-assign]
    return cli.main(args)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
