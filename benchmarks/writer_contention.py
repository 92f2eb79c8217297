"""How much a training thread gets done while a checkpoint is pickled on another thread.

    PYTHONPATH=$(ls -d packages/*/src | paste -sd:) python3 benchmarks/writer_contention.py

A checkpoint's shape is that of yolo26n's (2,517 tensors, one in six a 3x3 convolution's
weight); the "training thread" runs small torch ops (each releases the interpreter lock, as the
training step's host work does) in laps. The script prints, for each way of writing, how long
the write took, the laps' median before and during it, and the share of its solo progress the
training thread kept while the write ran: plain ``torch.save`` on this thread, the same with a
0.2 ms interpreter switch interval, and `AtomicCheckpointIO(background=True)`'s save and wait
with the pickling on its writer thread and in its writer process. CPU only: it measures the
interpreter lock, not a device.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import threading
import time
from collections.abc import Callable

import torch


def _state(tensors: int) -> dict[str, torch.Tensor]:
    return {
        f"p{i}": torch.randn(64, 32, 3, 3) if i % 6 == 0 else torch.randn(64)
        for i in range(tensors)
    }


def _lap(ops: int) -> None:
    x = torch.zeros(4)
    for _ in range(ops):
        x = x + 1


def measure(write: Callable[[], None], ops: int = 200) -> dict[str, float]:
    """Laps of ``ops`` small ops on a thread, before and while ``write`` runs on this one."""
    laps: list[tuple[float, float]] = []
    stop = threading.Event()

    def train() -> None:
        while not stop.is_set():
            start = time.perf_counter()
            _lap(ops)
            laps.append((start, time.perf_counter()))

    thread = threading.Thread(target=train)
    thread.start()
    time.sleep(0.3)
    begin = time.perf_counter()
    write()
    end = time.perf_counter()
    stop.set()
    thread.join()
    solo = statistics.median(b - a for a, b in laps if b < begin)
    during = [b - a for a, b in laps if a >= begin and b <= end]
    return {
        "write_ms": (end - begin) * 1e3,
        "lap_solo_ms": solo * 1e3,
        "lap_during_ms": statistics.median(during) * 1e3 if during else float("nan"),
        "kept": len(during) * solo / (end - begin),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensors", type=int, default=2517)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    state = _state(args.tensors)

    def save() -> None:
        torch.save(state, io.BytesIO())

    def save_short_interval() -> None:
        old = sys.getswitchinterval()
        sys.setswitchinterval(2e-4)
        try:
            save()
        finally:
            sys.setswitchinterval(old)

    import tempfile
    from pathlib import Path

    from lucid_train.run.checkpoint_io import AtomicCheckpointIO

    folder = Path(tempfile.mkdtemp())
    writers = {mode: AtomicCheckpointIO(background=True, process=mode) for mode in (False, True)}
    for io_ in writers.values():  # the writer process starts (imports torch) first
        io_.save_checkpoint(state, folder / "warm.ckpt")
        io_.wait()

    def background(process: bool) -> Callable[[], None]:
        def write() -> None:
            writers[process].save_checkpoint(state, folder / "last.ckpt")
            writers[process].wait()

        return write

    megabytes = sum(t.numel() * t.element_size() for t in state.values()) / 1e6
    print(f"{args.tensors} tensors, {megabytes:.1f} MB; python {sys.version.split()[0]}")
    ways = (
        ("torch.save", save),
        ("switch interval 0.2 ms", save_short_interval),
        ("AtomicCheckpointIO, writer thread", background(False)),
        ("AtomicCheckpointIO, writer process", background(True)),
    )
    for name, write in ways:
        for _ in range(args.repeats):
            r = measure(write)
            print(
                f"{name}: write {r['write_ms']:.0f} ms; lap {r['lap_solo_ms']:.2f} ms solo, "
                f"{r['lap_during_ms']:.2f} ms during; the training thread kept "
                f"{100 * r['kept']:.0f} % of its progress"
            )

    for io_ in writers.values():
        io_.teardown()


if __name__ == "__main__":
    main()
