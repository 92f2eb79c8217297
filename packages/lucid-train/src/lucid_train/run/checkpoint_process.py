"""The checkpoint writer process: a fit's checkpoints pickled and written in another interpreter.

Pickling a checkpoint is interpreter work: ``torch.save`` of yolo26n's 2,517 tensors is about
75 ms of it (50,344 ``persistent_id`` calls, a reduction per tensor, the records' writes), and
on a thread of the training process it holds the interpreter lock whenever it can. The training
thread, whose every torch op releases that lock, kept 6 % of its progress while such a save ran
(`benchmarks/writer_contention.py`, 2-core machine); on the GPU its batches then wait while the
GPU runs dry.

So `AtomicCheckpointIO`'s writer thread hands each checkpoint to a child interpreter (``python -m
lucid_train.run.checkpoint_process``, started at the fit's start; it ignores SIGINT and SIGTERM, so
a stopping fit's signals do not cut a write short): the checkpoint's
structure with every tensor replaced by a `Slot` (a small pickle), then each (device, dtype) group's
bytes as they lie in memory, down a pipe. The thread blocks in the pipe's system calls without the
lock. The child rebuilds each tensor with its strides and its own storage, writes the file with
``torch.save`` through `lucid_train.atomic_files.atomic_path`, and answers ``ok`` or the error in
one line. The file is the one ``torch.save`` of the snapshot writes in the training process
(`tests/lucid-train/test_checkpoint_writer.py`). The fit's teardown ends the child with an empty
header; a training process that dies leaves it to finish the write in hand and end with its input.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from collections import OrderedDict
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import IO, Any

import torch

__all__ = ["Slot", "WriterProcess", "WriterUnavailableError", "map_leaves", "rebuild"]


class WriterUnavailableError(RuntimeError):
    """The writer process could not start, or ended before answering its first write."""


class Slot:
    """Where a tensor's bytes lie: element ``index`` of group ``group``, with its layout."""

    __slots__ = ("group", "index", "shape", "stride")

    def __init__(
        self, group: int, index: int, shape: tuple[int, ...], stride: tuple[int, ...]
    ) -> None:
        self.group, self.index, self.shape, self.stride = group, index, shape, stride

    def __reduce__(self) -> tuple[type[Slot], tuple[int, int, tuple[int, ...], tuple[int, ...]]]:
        return (Slot, (self.group, self.index, self.shape, self.stride))


def map_leaves(obj: Any, leaf: Callable[[Any], Any]) -> Any:
    """``obj`` with every dict, list and tuple (named ones too) rebuilt and every other value
    passed through ``leaf``."""
    if isinstance(obj, dict):
        items = [(k, map_leaves(v, leaf)) for k, v in obj.items()]
        return OrderedDict(items) if isinstance(obj, OrderedDict) else dict(items)
    if isinstance(obj, list):
        return [map_leaves(v, leaf) for v in obj]
    if isinstance(obj, tuple):
        items = [map_leaves(v, leaf) for v in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)  # namedtuple
    return leaf(obj)


def rebuild(template: Any, buffers: list[torch.Tensor], sizes: list[list[int]]) -> Any:
    """``template`` with each `Slot` replaced by its tensor, cut from ``buffers`` (one flat
    host tensor a group, ``sizes`` its members' element counts) with its strides, in a storage
    of its own (as ``torch.save`` of the original writes it)."""
    parts = [torch.split(buffer, counts) for buffer, counts in zip(buffers, sizes, strict=True)]

    def leaf(value: Any) -> Any:
        if not isinstance(value, Slot):
            return value
        part = parts[value.group][value.index]
        view = part.as_strided(value.shape, value.stride, part.storage_offset())
        return view.clone(memory_format=torch.preserve_format)

    return map_leaves(template, leaf)


def _send(fd: int, data: Any) -> None:
    view = memoryview(data).cast("B")
    while view:
        view = view[os.write(fd, view) :]


def _receive(stream: IO[bytes], size: int) -> bytearray | None:
    data = bytearray(size)
    view, got = memoryview(data), 0
    while got < size:
        n = stream.readinto(view[got:])  # type: ignore[attr-defined]
        if not n:
            return None
        got += n
    return data


class WriterProcess:
    """The training process's end of the writer process (one write at a time, from one thread).
    `write` raises `RuntimeError` with the child's error or when the child has ended (the next
    write starts a new one), and `WriterUnavailableError` when no child starts or answers."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._answered = False  # has any child answered a write

    def start(self) -> None:
        """Start the child unless it runs (`WriterUnavailableError` when it cannot)."""
        self._running()

    def _running(self) -> subprocess.Popen[bytes]:
        if self._proc is None or self._proc.poll() is not None:
            # the child imports what this process imports, from where it imports it
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
            try:
                self._proc = subprocess.Popen(
                    [sys.executable, "-m", "lucid_train.run.checkpoint_process"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    env=env,
                    start_new_session=True,
                )
            except OSError as error:
                message = f"the writer process did not start ({error})"
                raise WriterUnavailableError(message) from error
        return self._proc

    def write(
        self, path: Path, template: Any, buffers: list[torch.Tensor], sizes: list[list[int]]
    ) -> None:
        proc = self._running()
        assert proc.stdin is not None and proc.stdout is not None
        specs = [(str(b.dtype).removeprefix("torch."), b.numel()) for b in buffers]
        header = pickle.dumps((str(path), template, specs, sizes), protocol=pickle.HIGHEST_PROTOCOL)
        try:
            fd = proc.stdin.fileno()
            _send(fd, len(header).to_bytes(8, "little"))
            _send(fd, header)
            for buffer in buffers:
                if buffer.numel():
                    _send(fd, buffer.view(torch.uint8).numpy())
            reply = proc.stdout.readline()
        except OSError:  # the child has gone: a broken pipe
            reply = b""
        if not reply:
            code = proc.wait()
            self._proc = None
            message = f"the checkpoint writer process ended (exit code {code})"
            raise (RuntimeError if self._answered else WriterUnavailableError)(message)
        self._answered = True
        if reply != b"ok\n":
            raise RuntimeError(reply.decode(errors="replace").strip())

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            # An empty header ends the child: a loader worker forked from this process also
            # holds the pipe's end, so closing ours need not reach the child as the input's end.
            with suppress(OSError):
                _send(proc.stdin.fileno(), (0).to_bytes(8, "little"))
            proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def _serve(source: IO[bytes], answers: IO[bytes]) -> None:
    from lucid_train.atomic_files import atomic_path

    while (head := _receive(source, 8)) is not None and (size := int.from_bytes(head, "little")):
        header = _receive(source, size)
        if header is None:
            return
        path, template, specs, sizes = pickle.loads(header)
        buffers = []
        for name, numel in specs:
            dtype = getattr(torch, name)
            if not numel:
                buffers.append(torch.empty(0, dtype=dtype))
                continue
            raw = _receive(source, numel * dtype.itemsize)
            if raw is None:
                return
            buffers.append(torch.frombuffer(raw, dtype=torch.uint8).view(dtype))
        try:
            checkpoint = rebuild(template, buffers, sizes)
            with atomic_path(Path(path)) as tmp:
                torch.save(checkpoint, tmp)
        except Exception as error:  # every failure is answered, named
            message = f"{type(error).__name__}: {error}".replace("\n", " ")
            answers.write(f"error {message}\n".encode())
        else:
            answers.write(b"ok\n")
        answers.flush()


if __name__ == "__main__":
    import signal

    # The write in hand is finished whatever signal the fit's processes get; the child ends at
    # an empty header (the training process's close) or at its input's end (that process died).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # Answers go to a private copy of stdout; anything printed goes to stderr instead.
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    # the importable module's `Slot`, not this __main__ copy's, is the one the parent pickles
    from lucid_train.run.checkpoint_process import _serve as serve

    serve(sys.stdin.buffer, answers)
