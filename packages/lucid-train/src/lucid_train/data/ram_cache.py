"""Decoded images of a split held in RAM (``LucidDataModule(cache="ram")``, ``--data.cache ram``).

Every image is decoded once, at its stored size, in the main process when the split is set up,
before any loader worker starts; forked workers then read the same pixel buffers (numpy arrays,
which reference counting does not write to) instead of decoding the file again each epoch. What
it will take is printed before it fills, and a cache larger than the memory the system reports
available is refused with the fix named. Samples are the same as without it: the cached array
is exactly what `open_rgb` returns.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt
from PIL import Image

from lucid_train.data.image_io import open_rgb
from lucid_train.data.records import ImageRecord

__all__ = ["RamImages", "available_memory"]

HEADROOM = 0.8  # of the available memory a cache may take


def available_memory() -> int | None:
    """Bytes the system reports available (Linux ``MemAvailable``), or None when unknown."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


class RamImages:
    """The decoded RGB images of ``records``, index-aligned with them.

    Args:
        records: the split's images (their ``width`` and ``height`` size the estimate).
        name: the split's name, for the messages.
    """

    def __init__(self, records: Sequence[ImageRecord], name: str) -> None:
        self.records = list(records)
        self.name = name
        self.arrays: list[npt.NDArray[np.uint8]] = []

    @property
    def nbytes(self) -> int:
        """What the filled cache holds: 3 bytes a pixel at the stored size."""
        return sum(3 * int(r.width) * int(r.height) for r in self.records)

    @property
    def filled(self) -> bool:
        return len(self.arrays) == len(self.records)

    def fill(self, log: Callable[[str], None] = print) -> None:
        """Decode every image (once; later calls return at once), reporting the size first and
        progress on the way."""
        if self.filled:
            return
        need, have = self.nbytes, available_memory()
        gib = 1 << 30
        room = f", {have / gib:.1f} GiB available" if have is not None else ""
        log(
            f"lucid data: caching {len(self.records)} {self.name} images in RAM: "
            f"{need / gib:.2f} GiB decoded{room}"
        )
        if have is not None and need > HEADROOM * have:
            raise MemoryError(
                f"--data.cache ram: the {self.name} split needs {need / gib:.1f} GiB decoded but "
                f"only {have / gib:.1f} GiB is available; use --data.cache none (decode per "
                "sample) or free memory"
            )
        start, step = time.perf_counter(), max(len(self.records) // 10, 1)
        arrays: list[npt.NDArray[np.uint8]] = []
        for i, rec in enumerate(self.records):
            arrays.append(np.asarray(open_rgb(rec.path), np.uint8).copy())
            if (i + 1) % step == 0 or i + 1 == len(self.records):
                log(f"lucid data: cached {i + 1}/{len(self.records)} {self.name} images")
        self.arrays = arrays
        log(f"lucid data: {self.name} cache filled in {time.perf_counter() - start:.1f} s")

    def image(self, index: int) -> Image.Image:
        """The decoded image of record ``index`` (a fresh PIL image over a copy of the pixels)."""
        return Image.fromarray(self.arrays[index])
