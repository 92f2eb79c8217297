"""``python -m lucid_testing.recorded_fit LOG <lucid args>``: the ``lucid`` command in a fresh
interpreter that also appends, for every training sample it reads, ``epoch position index`` to
the file LOG (flushed line by line, so the record survives SIGKILL). The image order of each epoch
(the sampler's epoch, through the dataset's permutation) can then be compared between an
uninterrupted run and a killed-and-resumed one. Needs ``--data.num_workers 0`` (samples are
read in this process). ``LUCID_TEST_SAMPLE_SECONDS`` (default 0) holds each read that long, so
that a test can stop a run on a fast GPU mid-epoch rather than at the epoch's end.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from lucid_train import cli
from lucid_train.data.dataset import TrainDataset


def main(argv: list[str]) -> int:
    log_path, args = argv[0], argv[1:]
    log = open(log_path, "a", buffering=1)  # noqa: SIM115 - open for the whole run
    read = TrainDataset.__getitem__
    pause = float(os.environ.get("LUCID_TEST_SAMPLE_SECONDS", "0"))

    def recorded(self: TrainDataset, key: tuple[int, int]) -> Any:
        epoch, position = key
        log.write(f"{epoch} {position} {int(self.permutation(epoch)[position])}\n")
        if pause:
            time.sleep(pause)
        return read(self, key)

    TrainDataset.__getitem__ = recorded  # type: ignore[method-assign]
    return cli.main(args)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
