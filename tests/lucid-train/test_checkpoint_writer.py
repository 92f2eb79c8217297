"""`AtomicCheckpointIO(background=True)`: the fit's checkpoints are written off the training
thread, from a snapshot taken at the call, in call order, and a failure is raised on the training
thread naming the file. The tests that slow or break the write in this process run the writer
thread's own pickling (``process=False``); the writer process has its tests at the end."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from lucid_train.run import checkpoint_io, checkpoint_process
from lucid_train.run.checkpoint_io import AtomicCheckpointIO, CheckpointWriteError, host_snapshot


def _slow_write(gate: threading.Event, seconds: float = 5.0) -> Any:
    real = checkpoint_io._write

    def write(checkpoint: dict[str, Any], path: Path) -> None:
        gate.wait(seconds)
        real(checkpoint, path)

    return write


def test_a_background_write_holds_the_values_of_the_call_not_later_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = threading.Event()
    monkeypatch.setattr(checkpoint_io, "_write", _slow_write(gate))
    io = AtomicCheckpointIO(background=True, process=False)
    w = torch.ones(4)
    state = {"epoch": 3, "state_dict": {"w": w}, "optimizer_states": [{"step": torch.tensor(7)}]}
    io.save_checkpoint(state, tmp_path / "last.ckpt")
    w.add_(1)  # training goes on while the file is still being written
    state["epoch"] = 4
    gate.set()
    io.wait()
    ckpt = io.load_checkpoint(tmp_path / "last.ckpt")
    assert ckpt["epoch"] == 3
    assert torch.equal(ckpt["state_dict"]["w"], torch.ones(4))
    assert int(ckpt["optimizer_states"][0]["step"]) == 7
    io.teardown()


def test_a_save_returns_before_the_file_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = threading.Event()
    monkeypatch.setattr(checkpoint_io, "_write", _slow_write(gate))
    io = AtomicCheckpointIO(background=True, process=False)
    start = time.perf_counter()
    io.save_checkpoint({"epoch": 1}, tmp_path / "last.ckpt")
    assert time.perf_counter() - start < 1.0
    assert not (tmp_path / "last.ckpt").exists()
    gate.set()
    io.teardown()  # the fit's end waits for it
    assert (tmp_path / "last.ckpt").exists()


def test_writes_land_in_call_order(tmp_path: Path) -> None:
    io = AtomicCheckpointIO(background=True)
    last = tmp_path / "last.ckpt"
    for epoch in range(5):
        io.save_checkpoint({"epoch": epoch, "w": torch.full((1000,), float(epoch))}, last)
    assert io.load_checkpoint(last)["epoch"] == 4  # a read waits for the write in flight
    io.teardown()


def test_a_save_queues_behind_the_write_in_progress_and_waits_only_beyond_the_queue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An epoch's best.ckpt and the next epoch's last.ckpt: the second does not wait for the
    first; a third save waits for the oldest (at most `QUEUED` staged copies)."""
    assert checkpoint_io.QUEUED == 2
    gate = threading.Event()
    monkeypatch.setattr(checkpoint_io, "_write", _slow_write(gate))
    io = AtomicCheckpointIO(background=True, process=False)
    start = time.perf_counter()
    io.save_checkpoint({"epoch": 1}, tmp_path / "best.ckpt")
    io.save_checkpoint({"epoch": 2}, tmp_path / "last.ckpt")
    assert time.perf_counter() - start < 1.0  # queued, not waited for
    third = threading.Thread(target=io.save_checkpoint, args=({"epoch": 3}, tmp_path / "c.ckpt"))
    third.start()
    third.join(0.5)
    assert third.is_alive()  # the queue is full until the first write lands
    gate.set()
    third.join(10)
    assert not third.is_alive()
    io.wait()
    assert [
        io.load_checkpoint(tmp_path / n)["epoch"] for n in ("best.ckpt", "last.ckpt", "c.ckpt")
    ] == [1, 2, 3]
    io.teardown()


def test_a_failed_background_write_is_raised_naming_the_file_and_keeps_the_previous_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    io = AtomicCheckpointIO(background=True, process=False)
    last = tmp_path / "last.ckpt"
    io.save_checkpoint({"epoch": 1}, last)
    io.wait()

    def full(obj: Any, f: Any, *a: Any, **k: Any) -> None:
        Path(f).write_bytes(b"half")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", full)
    io.save_checkpoint({"epoch": 2}, last)  # returns: the error comes at the next wait
    with pytest.raises(CheckpointWriteError, match=r"last\.ckpt: the disk is full \(No space"):
        io.wait()
    monkeypatch.undo()
    assert io.load_checkpoint(last)["epoch"] == 1
    assert not [p.name for p in tmp_path.iterdir() if ".tmp" in p.name]
    io.teardown()


def test_a_fork_waits_for_the_write_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loader's workers are forked; a child must not inherit a half-done write's locks."""
    gate = threading.Event()
    monkeypatch.setattr(checkpoint_io, "_write", _slow_write(gate, seconds=0.5))
    io = AtomicCheckpointIO(background=True, process=False)
    io.save_checkpoint({"epoch": 1}, tmp_path / "last.ckpt")
    assert not (tmp_path / "last.ckpt").exists()
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    assert (tmp_path / "last.ckpt").exists()  # written before the fork went ahead
    io.teardown()


def test_the_host_snapshot_copies_tensors_and_rebuilds_containers() -> None:
    from collections import namedtuple

    pair = namedtuple("pair", "x y")
    w = torch.arange(6.0).reshape(2, 3).t()  # not contiguous: the copy keeps its strides
    state = {"a": [w, (w, 1)], "b": {"c": w}, "n": "name", "p": pair(w, 2)}
    snap = host_snapshot(state)
    w.mul_(0)
    assert torch.equal(snap["a"][0], torch.arange(6.0).reshape(2, 3).t())
    assert type(snap["p"]) is pair and torch.equal(snap["p"].x, snap["a"][0])
    assert snap["a"][0].stride() == w.stride()
    assert snap["b"] is not state["b"] and snap["a"] is not state["a"]
    assert snap["n"] == "name" and snap["a"][1][1] == 1


def test_a_save_of_the_same_tensors_follows_the_last_plan_and_holds_their_values_now(
    tmp_path: Path,
) -> None:
    """Each epoch saves the same tensors, changed in place: the second save reuses the first
    one's packing (`_Plan`) and still writes the values of its own call."""
    io = AtomicCheckpointIO(background=True, process=False)
    w = torch.arange(6.0).reshape(2, 3).t()  # strided: the plan keeps its layout
    step = torch.tensor(1)

    def state(epoch: int) -> dict[str, Any]:  # fresh containers and views, as Lightning's dump
        return {"epoch": epoch, "state_dict": {"w": w.detach()}, "step": step[()]}

    io.save_checkpoint(state(1), tmp_path / "a.ckpt")
    plan = io._plan
    assert plan is not None
    w.mul_(10)
    step.add_(1)
    io.save_checkpoint(state(2), tmp_path / "b.ckpt")
    assert io._plan is plan  # followed, not made again
    w.mul_(10)  # after the call: not in the file
    io.wait()
    first, second = (io.load_checkpoint(tmp_path / n) for n in ("a.ckpt", "b.ckpt"))
    assert torch.equal(first["state_dict"]["w"], torch.arange(6.0).reshape(2, 3).t())
    assert torch.equal(second["state_dict"]["w"], torch.arange(6.0).reshape(2, 3).t() * 10)
    assert second["state_dict"]["w"].stride() == w.stride()
    assert (second["epoch"], int(second["step"]), int(first["step"])) == (2, 2, 1)
    io.teardown()
    assert io._plan is None  # its views no longer hold the tensors alive


@pytest.mark.parametrize("change", ["replaced", "reshaped", "added", "dropped"])
def test_a_save_with_a_few_tensors_not_in_the_plan_follows_it_and_copies_those_alone(
    tmp_path: Path, change: str
) -> None:
    """A new best score, a fresh scalar of a callback: the rest of the save is still packed by
    the plan, and every tensor holds its own values."""
    io = AtomicCheckpointIO(background=True, process=False)
    tensors = {"a": torch.ones(3), "b": torch.full((2, 2), 2.0), "c": torch.arange(4.0)}
    io.save_checkpoint({"s": dict(tensors)}, tmp_path / "a.ckpt")
    plan = io._plan
    if change == "replaced":  # same shape, new storage (an assigned parameter)
        tensors["a"] = torch.full((3,), 5.0)
    elif change == "reshaped":  # same storage, another view
        tensors["b"] = tensors["b"].view(4)
    elif change == "added":
        tensors["d"] = torch.zeros(1)
    else:
        del tensors["b"]
    io.save_checkpoint({"s": dict(tensors)}, tmp_path / "b.ckpt")
    assert io._plan is plan
    io.wait()
    saved = io.load_checkpoint(tmp_path / "b.ckpt")["s"]
    assert saved.keys() == tensors.keys()
    for name, t in tensors.items():
        assert torch.equal(saved[name], t) and saved[name].shape == t.shape
    io.teardown()


def test_a_tensor_saved_under_many_names_keeps_following_the_plan(tmp_path: Path) -> None:
    """Tied weights: one tensor under several keys holds one slot a name, save after save."""
    io = AtomicCheckpointIO(background=True, process=False)
    tied = torch.arange(5.0)
    names = [f"w{i}" for i in range(checkpoint_io.PLAN_SLACK + 2)]
    io.save_checkpoint({"s": dict.fromkeys(names, tied)}, tmp_path / "a.ckpt")
    plan = io._plan
    tied.mul_(2)
    io.save_checkpoint({"s": dict.fromkeys(names, tied)}, tmp_path / "b.ckpt")
    assert io._plan is plan
    io.wait()
    saved = io.load_checkpoint(tmp_path / "b.ckpt")["s"]
    assert saved.keys() == set(names) and all(torch.equal(t, tied) for t in saved.values())
    io.teardown()


@pytest.mark.parametrize("change", ["replaced", "dropped"])
def test_a_save_whose_tensors_are_mostly_not_the_plans_is_packed_afresh(
    tmp_path: Path, change: str
) -> None:
    io = AtomicCheckpointIO(background=True, process=False)
    n = checkpoint_io.PLAN_SLACK + 2
    tensors = {f"t{i}": torch.full((3,), float(i)) for i in range(n)}
    io.save_checkpoint({"s": dict(tensors)}, tmp_path / "a.ckpt")
    plan = io._plan
    if change == "replaced":
        tensors = {name: t + 1 for name, t in tensors.items()}
    else:
        tensors = {"t0": tensors["t0"]}
    io.save_checkpoint({"s": dict(tensors)}, tmp_path / "b.ckpt")
    assert io._plan is not plan
    io.wait()
    saved = io.load_checkpoint(tmp_path / "b.ckpt")["s"]
    assert saved.keys() == tensors.keys()
    for name, t in tensors.items():
        assert torch.equal(saved[name], t)
    io.teardown()


def test_the_writer_pickles_as_its_settings_for_a_spawned_process(tmp_path: Path) -> None:
    import pickle

    io = AtomicCheckpointIO(background=True)
    io.save_checkpoint({"epoch": 1}, tmp_path / "last.ckpt")
    copy = pickle.loads(pickle.dumps(io))  # waits for the write in flight first
    assert copy.background and (tmp_path / "last.ckpt").exists()
    copy.save_checkpoint({"epoch": 2}, tmp_path / "last.ckpt")
    assert copy.load_checkpoint(tmp_path / "last.ckpt")["epoch"] == 2
    io.teardown()
    copy.teardown()


def test_a_held_write_starts_only_at_release_and_any_wait_releases_it(tmp_path: Path) -> None:
    io = AtomicCheckpointIO(background=True)
    io.hold_next()
    io.save_checkpoint({"epoch": 1}, tmp_path / "a.ckpt")
    time.sleep(0.3)
    assert not (tmp_path / "a.ckpt").exists()  # held
    io.release()
    io._settle()
    assert (tmp_path / "a.ckpt").exists()
    io.hold_next()
    io.save_checkpoint({"epoch": 2}, tmp_path / "b.ckpt")
    io.save_checkpoint({"epoch": 3}, tmp_path / "c.ckpt")  # this save releases b; c is not held
    io._settle()
    assert (tmp_path / "b.ckpt").exists() and (tmp_path / "c.ckpt").exists()
    io.teardown()


def test_last_checkpoint_holds_the_epoch_start_write_until_its_third_batch(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from lucid_train.run.last_checkpoint import RELEASE_AFTER, LastCheckpoint

    io = AtomicCheckpointIO(background=True)
    callback = LastCheckpoint(tmp_path)
    trainer = SimpleNamespace(strategy=SimpleNamespace(checkpoint_io=io))
    io.hold_next()  # as `on_train_epoch_start` does before its save
    io.save_checkpoint({"epoch": 1}, tmp_path / "last.ckpt")
    for batch_idx in range(RELEASE_AFTER - 1):
        callback.on_train_batch_end(trainer, None, None, None, batch_idx)  # type: ignore[arg-type]
    time.sleep(0.2)
    assert not (tmp_path / "last.ckpt").exists()
    callback.on_train_batch_end(trainer, None, None, None, RELEASE_AFTER - 1)  # type: ignore[arg-type]
    io._settle()
    assert (tmp_path / "last.ckpt").exists()
    io.teardown()


def _varied_state() -> dict[str, Any]:
    from collections import OrderedDict

    return {
        "epoch": 3,
        "state_dict": OrderedDict(
            conv=torch.randn(8, 4, 3, 3).to(memory_format=torch.channels_last),
            t=torch.randn(5, 7).t(),
            half=torch.randn(9).to(torch.bfloat16),
            mask=torch.rand(6) > 0.5,
            count=torch.tensor(7),
            empty=torch.empty(0, 3),
        ),
        "optimizer_states": [{"state": {0: {"exp_avg": torch.randn(4, 4)}}, "lr": 0.01}],
        "names": ("a", "b"),
    }


def _records(path: Path) -> dict[str, bytes]:
    """A torch zip checkpoint's records by their name below the archive's root folder (which
    ``torch.save`` names after the file it writes), without the per-save random id."""
    import zipfile

    with zipfile.ZipFile(path) as z:
        records = {n.split("/", 1)[1]: z.read(n) for n in z.namelist()}
    records.pop(".data/serialization_id", None)
    return records


def test_the_writer_process_writes_the_records_torch_save_writes_here(tmp_path: Path) -> None:
    state = _varied_state()
    here = tmp_path / "here.ckpt"
    torch.save(state, here)  # the checkpoint itself, pickled in this process
    io = AtomicCheckpointIO(background=True)
    io.save_checkpoint(state, tmp_path / "last.ckpt")
    io.teardown()
    written, expected = _records(tmp_path / "last.ckpt"), _records(here)
    assert written.keys() == expected.keys() and "data.pkl" in written
    assert written == expected  # the pickle (structure, dtypes, strides) and every storage


def test_the_training_process_never_pickles_a_background_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("torch.save ran in the training process")

    monkeypatch.setattr(torch, "save", refuse)
    io = AtomicCheckpointIO(background=True)
    state = _varied_state()
    io.save_checkpoint(state, tmp_path / "last.ckpt")
    io.wait()
    monkeypatch.undo()
    ckpt = io.load_checkpoint(tmp_path / "last.ckpt")
    io.teardown()
    assert torch.equal(ckpt["state_dict"]["conv"], state["state_dict"]["conv"])
    assert ckpt["state_dict"]["conv"].stride() == state["state_dict"]["conv"].stride()


def test_a_writer_process_that_dies_is_named_and_the_next_save_starts_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    io = AtomicCheckpointIO(background=True)
    last = tmp_path / "last.ckpt"
    io.save_checkpoint({"epoch": 1, "w": torch.ones(3)}, last)
    io.wait()
    real_send = checkpoint_process._send

    def send_then_die(fd: int, data: Any) -> None:  # the child is killed in mid-write
        assert io._writer is not None and io._writer._proc is not None
        io._writer._proc.kill()
        io._writer._proc.wait()
        real_send(fd, data)

    monkeypatch.setattr(checkpoint_process, "_send", send_then_die)
    io.save_checkpoint({"epoch": 2, "w": torch.ones(3)}, last)
    with pytest.raises(CheckpointWriteError, match=r"last\.ckpt failed.*writer process ended"):
        io.wait()
    monkeypatch.undo()
    assert io.load_checkpoint(last)["epoch"] == 1
    io.save_checkpoint({"epoch": 3, "w": torch.ones(3)}, last)
    assert io.load_checkpoint(last)["epoch"] == 3
    io.teardown()


@pytest.mark.parametrize("process", [True, False], ids=["writer-process", "writer-thread"])
def test_a_write_that_fails_in_the_writer_is_raised_naming_the_file_and_what_is_in_the_way(
    tmp_path: Path, process: bool
) -> None:
    """Was: a file where the checkpoint folder should be was blamed on disk space."""
    io = AtomicCheckpointIO(background=True, process=process)
    (tmp_path / "runs").write_text("a file where the run folder should be")
    target = tmp_path / "runs" / "last.ckpt"
    io.save_checkpoint({"epoch": 1, "w": torch.ones(3)}, target)
    in_the_way = r"runs/last\.ckpt failed.*FileExistsError.*runs must be a folder and last\.ckpt a"
    with pytest.raises(CheckpointWriteError, match=in_the_way) as caught:
        io.wait()
    assert "disk space" not in str(caught.value)
    io.teardown()


def test_a_writer_process_that_cannot_start_leaves_the_writing_to_the_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python"))
    io = AtomicCheckpointIO(background=True)

    def save() -> None:
        io.save_checkpoint({"epoch": 1, "w": torch.ones(3)}, tmp_path / "last.ckpt")
        io.wait()

    with pytest.warns(UserWarning, match="writer thread.*did not start"):
        save()
    assert not io.process
    assert io.load_checkpoint(tmp_path / "last.ckpt")["epoch"] == 1
    io.teardown()


def test_the_writer_process_ends_at_teardown_while_a_forked_worker_holds_its_pipe(
    tmp_path: Path,
) -> None:
    import signal

    io = AtomicCheckpointIO(background=True)
    io.save_checkpoint({"epoch": 1, "w": torch.ones(3)}, tmp_path / "last.ckpt")
    io.wait()
    assert io._writer is not None and io._writer._proc is not None
    child = io._writer._proc
    pid = os.fork()
    if pid == 0:  # as a loader worker: it holds every descriptor it inherited
        time.sleep(30)
        os._exit(0)
    try:
        start = time.perf_counter()
        io.teardown()
        assert time.perf_counter() - start < 10
        assert child.poll() is not None
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
