"""The Trainer's checkpoint files: written atomically off the training thread, read without
running code.

`AtomicCheckpointIO` is the `lightning.pytorch.plugins.io.CheckpointIO` of every lucid Trainer
(`lucid_train.run.trainer.build_trainer`). Lightning's own writer stages the file in the system's
temporary folder and moves it over, which is a copy (not atomic) when that folder is another
filesystem, and never flushes it to the disk; this one writes beside the target through
`lucid_train.atomic_files.atomic_path`, so ``last.ckpt`` is always a whole checkpoint.

Writing is in the background in a fit (``background=True``, `build_trainer`'s): the caller's thread
only queues the tensors' way to the host, and one writer thread does the rest. A 41 MB yolo26n
checkpoint took about 0.4 s on the training thread, an idle GPU at every epoch start (the peer-speed
GPU trace of 2026-12-02: 0.4 s between 0.95 s epochs at batch 64); its host copy alone, one blocking
transfer per tensor (2,517 of them), still held the GPU idle for about 0.1 s. Now the device tensors
of each (device, dtype) are packed by one ``torch.cat`` and copied by one transfer into pinned
memory, both queued on the device's current stream behind the training work already queued (so the
copy holds the values of the call, whatever runs after it), with an event after them (a host's
tensors are packed the same way, the pack being the copy). The writer thread waits for that event (a
host wait: it queues no device work, and recordings capture in ``thread_local`` mode) and hands the
packs to the writer process (`lucid_train.run.checkpoint_process`), which rebuilds each tensor with
its strides, pickles, writes and flushes: pickled on a thread, the checkpoint held the interpreter
lock for about as long as the pickling took, and the training thread stalled that long. Writes stay
in call order, at most `QUEUED` of them staged at once: a save queues behind the one being written
and waits only for writes beyond that, so an epoch's two saves (``best.ckpt`` at its end,
``last.ckpt`` at the next start) no longer make the second wait for the first on a short epoch;
a removal or a read waits for every write queued. A fork waits for the writes queued (the loader's
workers are forked); a failed write is raised on the training thread at the next `wait` or save
beyond the queue (`teardown` waits at the fit's end), naming the file.

Reading (resume with ``ckpt_path``) goes through
`lucid_train.weights.checkpoint_file.load_checkpoint_file`: ``weights_only=True`` whatever the
caller asks, and one-line errors naming the file.
"""

from __future__ import annotations

import os
import threading
import warnings
import weakref
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.utilities.types import _PATH
from lightning.pytorch.plugins.io import TorchCheckpointIO

from lucid_train.atomic_files import atomic_path
from lucid_train.errors import DiskFullError, LucidError
from lucid_train.run.checkpoint_process import (
    Slot,
    WriterProcess,
    WriterUnavailableError,
    map_leaves,
    rebuild,
)
from lucid_train.weights.checkpoint_file import check_finite_weights, load_checkpoint_file

__all__ = ["QUEUED", "AtomicCheckpointIO", "CheckpointWriteError", "host_snapshot"]

# Staged checkpoints at once: the one being written and the next. Each holds a pinned host copy
# of the checkpoint's tensors (51 MB for yolo26n), so the queue is bounded.
QUEUED = 2


class CheckpointWriteError(LucidError, RuntimeError):
    """A background checkpoint write failed; the file named keeps its previous version."""


def host_snapshot(obj: Any) -> Any:
    """``obj`` with every tensor replaced by a host copy of its values now (strides kept), and
    every dict, list and tuple (named ones too) rebuilt, so that training may go on changing
    the originals. Waits for the device's copies; `_Staged` alone does not."""
    return _Staged(obj).result()


def _copy_alone(t: torch.Tensor) -> torch.Tensor:
    """A host copy of ``t``'s values now (a blocking transfer for a device tensor)."""
    return t.clone() if t.device.type == "cpu" else t.to("cpu", copy=True)


def _memory_image(t: torch.Tensor) -> torch.Tensor | None:
    """A 1-D view of ``t``'s elements in the order they lie in memory, when ``t`` covers its
    span densely without overlap (any permutation of a contiguous tensor: channels_last too),
    else None."""
    if t.layout != torch.strided:
        return None
    if t.is_contiguous():
        return t.view(-1)
    strides = t.stride()
    order = sorted(range(t.dim()), key=lambda d: -strides[d])
    p = t.permute(order)
    return p.view(-1) if p.is_contiguous() else None


TensorKey = tuple[int, torch.device, torch.dtype, torch.Size, tuple[int, ...]]


def _key(t: torch.Tensor) -> TensorKey | None:
    """Where ``t``'s elements lie (address, device, dtype, shape, strides); None for a tensor
    that is never packed by plan (not strided, or on neither the host nor a CUDA device)."""
    if t.layout != torch.strided or t.device.type not in ("cpu", "cuda"):
        return None
    return (t.data_ptr(), t.device, t.dtype, t.shape, t.stride())


class _Plan:
    """How one save's tensors were packed, for the next save to reuse: a fit saves the same
    tensors every epoch (parameters, buffers, optimizer and EMA state, all updated in place),
    and finding each one's group and memory image again cost about 30 µs a tensor on the
    training thread, 75 ms for yolo26n's 2,514 with the GPU idle at every epoch start (GPU
    profile of 2026-12-02, `docs/benchmarks/peer-speed.md`). A save follows the plan when all
    but `PLAN_SLACK` of its tensors lie exactly where one of the plan's did (a new best score,
    the callbacks' few fresh tensors: those are copied alone); the plan's memory images hold
    those storages alive, so an equal address is the same memory, never a reuse of freed
    memory by another tensor."""

    __slots__ = ("at", "groups", "keys", "members", "slots")

    def __init__(
        self,
        keys: list[TensorKey],
        slots: list[Slot],
        groups: dict[tuple[torch.device, torch.dtype], int],
        members: list[list[torch.Tensor]],
    ) -> None:
        self.keys, self.slots, self.groups, self.members = keys, slots, groups, members
        self.at: dict[TensorKey, list[int]] = {}  # a tensor saved twice (tied) has two slots
        for n, key in enumerate(keys):
            self.at.setdefault(key, []).append(n)


# Tensors of a save that may differ from its plan's (copied alone, each a blocking copy) before
# the save is packed afresh: a checkpoint's scalars made anew each epoch (the best score).
PLAN_SLACK = 16


class _PlanMissedError(Exception):
    """A save's tensors differ from the plan's (raised inside the walk to stop it early)."""


_MISSED = object()  # `_Staged._follow`'s answer for a save whose tensors are not the plan's


class _Staged:
    """A checkpoint on its way to the host (see the module): every dense tensor's bytes packed
    by (device, dtype) into one flat host tensor, a device's copied behind an event. `host`
    gives the parts (for the writer process), `result` the checkpoint rebuilt here. Given the
    `plan` of an earlier save of the same tensors, only the packing is done again; ``self.plan``
    is the plan this save followed or made (None when a tensor had an odd layout)."""

    def __init__(self, obj: Any, plan: _Plan | None = None) -> None:
        self._groups: dict[tuple[torch.device, torch.dtype], int] = {}
        self._members: list[list[torch.Tensor]] = []
        self._keys: list[TensorKey] = []
        self._slots: list[Slot] = []
        self._odd = False
        self.plan: _Plan | None = None
        if plan is not None and (template := self._follow(obj, plan)) is not _MISSED:
            self._template, self.plan = template, plan
            self._groups, self._members = plan.groups, plan.members
        else:
            self._template = map_leaves(obj, self._take)
            if not self._odd:
                self.plan = _Plan(self._keys, self._slots, self._groups, self._members)
        self._buffers: list[tuple[torch.Tensor, Any]] = []
        for (device, dtype), g in self._groups.items():
            flat = torch.cat(self._members[g])  # on the host, this is the copy
            event = None
            if device.type == "cuda":
                with torch.cuda.device(device):
                    host = torch.empty(flat.numel(), dtype=dtype, pin_memory=True)
                    host.copy_(flat, non_blocking=True)
                    event = torch.cuda.Event()  # type: ignore[no-untyped-call]
                    event.record()
                flat = host
            self._buffers.append((flat, event))
        self._sizes = [[m.numel() for m in members] for members in self._members]
        self._members, self._keys, self._slots = [], [], []  # only the plan keeps device views

    def _follow(self, obj: Any, plan: _Plan) -> Any:
        """``obj``'s template with the plan's slots (tensors not in the plan copied alone), or
        `_MISSED` if more than `PLAN_SLACK` of its or the plan's tensors are not in the other."""
        used: set[int] = set()
        alone = 0

        def leaf(value: Any) -> Any:
            nonlocal alone
            if not isinstance(value, torch.Tensor):
                return value
            key = _key(value)
            n = next((n for n in plan.at.get(key, ()) if n not in used), None) if key else None
            if n is None:
                alone += 1
                if alone > PLAN_SLACK:
                    raise _PlanMissedError
                return _copy_alone(value.detach())
            used.add(n)
            return plan.slots[n]

        try:
            template = map_leaves(obj, leaf)
        except _PlanMissedError:
            return _MISSED
        return template if alone + len(plan.keys) - len(used) <= PLAN_SLACK else _MISSED

    def _take(self, obj: Any) -> Any:
        if not isinstance(obj, torch.Tensor):
            return obj
        t = obj.detach()
        key = _key(t)  # None off the host and CUDA devices, where no memory image is taken
        image = _memory_image(t) if key is not None else None
        if image is None or key is None:  # an odd layout (none in a lucid fit): copied alone
            self._odd = True
            return _copy_alone(t)
        g = self._groups.setdefault((t.device, t.dtype), len(self._groups))
        if g == len(self._members):
            self._members.append([])
        self._members[g].append(image)
        slot = Slot(g, len(self._members[g]) - 1, tuple(t.shape), t.stride())
        self._keys.append(key)
        self._slots.append(slot)
        return slot

    def host(self) -> tuple[Any, list[torch.Tensor], list[list[int]]]:
        """The template, each group's flat host tensor (waiting for the device's copies) and
        each group's member sizes; once (the pinned memory goes back to torch's cache when the
        caller drops them)."""
        buffers = []
        for flat, event in self._buffers:
            if event is not None:
                event.synchronize()
            buffers.append(flat)
        self._buffers = []
        return self._template, buffers, self._sizes

    def result(self) -> Any:
        return rebuild(*self.host())


_WRITERS: weakref.WeakSet[AtomicCheckpointIO] = weakref.WeakSet()


def _before_fork() -> None:
    # A child forked while the writer thread holds a lock (the file writer's, the allocator's)
    # could inherit it held; let the write finish first. Errors stay for the owner's `wait`.
    for io in list(_WRITERS):
        io._settle()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork)


def _raise_write_error(error: BaseException, path: Path) -> None:
    full = str(error).partition("DiskFullError: ")[2]  # here, or the writer's answer
    if isinstance(error, DiskFullError) or full:
        raise CheckpointWriteError(full or str(error)) from error
    raise CheckpointWriteError(
        f"writing checkpoint {path} failed: {type(error).__name__}: {error}; the file keeps its "
        f"previous version ({_write_fix(error, path)})"
    ) from error


def _write_fix(error: BaseException, path: Path) -> str:
    """What to do about a failed checkpoint write, read from the error's kind (the writer
    process answers with its name in the text)."""
    said = f"{type(error).__name__}: {error}"
    if any(kind in said for kind in ("NotADirectoryError", "FileExistsError", "IsADirectoryError")):
        return f"{path.parent} must be a folder and {path.name} a file: move away what is there"
    if "PermissionError" in said:
        return f"no permission to write in {path.parent}: pick another --run.root"
    return "free disk space or pick another --run.root"


def _write(checkpoint: dict[str, Any], path: Path) -> None:
    with atomic_path(path) as tmp:
        torch.save(checkpoint, tmp)


class AtomicCheckpointIO(TorchCheckpointIO):
    """`TorchCheckpointIO` with atomic local writes, in the background when asked (the
    Trainer's), and safe reads (see the module).

    Args:
        background: write on a writer thread after a host snapshot; False writes on the caller's
            thread before returning.
        process: in the background, pickle in the writer process
        (`lucid_train.run.checkpoint_process`)
            rather than on the writer thread; a process that cannot start is said once, and
            the thread writes instead.
    """

    def __init__(self, background: bool = False, process: bool = True) -> None:
        super().__init__()
        self.background = background
        self.process = process
        self._writer: WriterProcess | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._pending: deque[tuple[Future[None], Path, threading.Event]] = deque()
        self._hold = False
        self._lock = threading.Lock()
        self._plan: _Plan | None = None  # how the last save packed its tensors (`_Plan`)
        _WRITERS.add(self)

    def __getstate__(self) -> dict[str, Any]:
        # A spawned process (ddp_spawn) gets the settings, not this process's writer thread.
        self.wait()
        return {"background": self.background, "process": self.process}

    def __setstate__(self, state: dict[str, Any]) -> None:
        AtomicCheckpointIO.__init__(
            self, background=bool(state["background"]), process=bool(state["process"])
        )

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: _PATH, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO.save_checkpoint takes no storage_options")
        with self._lock:
            hold, self._hold = self._hold, False
        self.release()  # a held write goes ahead of this one
        self._wait(keep=QUEUED - 1)
        target = Path(path)
        if not self.background:
            _write(checkpoint, target)
            return
        self.start_writer()
        staged = _Staged(checkpoint, self._plan)
        self._plan = staged.plan
        go = threading.Event()
        if not hold:
            go.set()
        with self._lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="lucid-checkpoint")
            future = self._executor.submit(self._write_staged, staged, target, go)
            self._pending.append((future, target, go))

    def start_writer(self) -> None:
        """Start the writer process now if background writes use one (`LastCheckpoint` does at
        the fit's start: the child takes seconds to import torch); a save starts it otherwise."""
        if not (self.background and self.process):
            return
        try:
            if self._writer is None:
                self._writer = WriterProcess()
            self._writer.start()
        except WriterUnavailableError as error:
            self._no_process(error)

    def _no_process(self, error: Exception) -> None:
        self.process = False
        warnings.warn(
            f"lucid: checkpoints are pickled on the training process's writer thread: {error}",
            stacklevel=1,
        )

    def _write_staged(self, staged: _Staged, path: Path, go: threading.Event) -> None:
        go.wait()
        template, buffers, sizes = staged.host()
        if self.process and self._writer is not None:
            try:
                self._writer.write(path, template, buffers, sizes)
                return
            except WriterUnavailableError as error:
                self._no_process(error)
        _write(rebuild(template, buffers, sizes), path)

    def hold_next(self) -> None:
        """Start the next background write only at `release` (or at any wait). `LastCheckpoint`
        holds the epoch-start write until the epoch's first batches are queued: what the write
        still does on this process (the structure's pickle, the hand-over to the writer process,
        or all of the pickling without one) shares the interpreter lock with the training
        thread, which would slow the first batches while the GPU has nothing queued."""
        with self._lock:
            self._hold = True

    def release(self) -> None:
        """Let a held write start (and forget a hold that no save took)."""
        with self._lock:
            self._hold = False
            for _, _, go in self._pending:
                go.set()

    def wait(self) -> None:
        """Block until every write queued is on the disk; raise the first error, naming its
        file, if one failed."""
        self.release()
        self._wait(keep=0)

    def _wait(self, keep: int) -> None:
        """Wait for the oldest writes until at most ``keep`` are queued; the first of them that
        failed is raised (after the others waited for have finished)."""
        first: tuple[BaseException, Path] | None = None
        while True:
            with self._lock:
                if len(self._pending) <= keep:
                    break
                future, path, _ = self._pending.popleft()
            error = future.exception()
            if error is not None and first is None:
                first = (error, path)
        if first is not None:
            _raise_write_error(*first)

    def _settle(self) -> None:
        with self._lock:
            pending = list(self._pending)
        for future, _, go in pending:
            go.set()
            future.exception()  # waits; the error stays for `wait`

    def remove_checkpoint(self, path: _PATH) -> None:
        self.wait()
        super().remove_checkpoint(path)

    def load_checkpoint(
        self,
        path: _PATH,
        map_location: Any | None = lambda storage, loc: storage,
        weights_only: bool | None = None,
    ) -> dict[str, Any]:
        # weights_only is ignored on purpose: nothing in a lucid checkpoint needs more.
        del weights_only
        self.wait()
        ckpt: dict[str, Any] = load_checkpoint_file(Path(path), map_location)
        check_finite_weights(Path(path), ckpt.get("state_dict") or {})  # a resume goes on from it
        return ckpt

    def teardown(self) -> None:
        try:
            self.wait()
        finally:
            with self._lock:
                executor, self._executor = self._executor, None
                writer, self._writer = self._writer, None
                self._plan = None  # its memory images hold the fit's tensors alive
            if executor is not None:
                executor.shutdown(wait=True)
            if writer is not None:
                writer.close()
