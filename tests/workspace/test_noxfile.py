"""The noxfile's own contracts, on the CPU: the README's GPU command lines parse (through nox's
argument parsing, then the noxfile's posargs split), GPU sessions run side by side by default,
and a GPU session's choice of environment (build from uv.lock, or the current interpreter)."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import socket
import stat
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import pytest

ROOT = Path(__file__).resolve().parents[2]
nox_options = pytest.importorskip("nox._options")


def _noxfile() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lucid_noxfile", ROOT / "noxfile.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


NOXFILE = _noxfile()


class _Session:
    """What `_test_dirs` / `_pytest_flags` read of a nox session."""

    def __init__(self, posargs: list[str]) -> None:
        self.posargs = posargs

    def error(self, msg: str) -> NoReturn:
        raise RuntimeError(msg)


def _readme_gpu_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    lines = [ln.split("#")[0].strip() for ln in text.splitlines() if "nox -s gpu-" in ln]
    return [ln[ln.index("nox -s") :] for ln in lines if ln.startswith(("PYTHONPATH", "nox"))]


def test_readme_gpu_command_lines_parse_into_folders_and_pytest_flags() -> None:
    """Each GPU line of the README, parsed by nox and split by the noxfile, gives known test
    folders and the flags as written: `-- -n 8` is a worker count, not a package."""
    commands = _readme_gpu_commands()
    assert any(re.search(r"-- -n \d+", c) for c in commands), commands
    for command in commands:
        args = nox_options.options.parse_args(shlex.split(command)[1:])
        session = _Session(list(args.posargs))
        dirs, flags = NOXFILE._test_dirs(session), NOXFILE._pytest_flags(session)
        assert all((ROOT / d).is_dir() for d in dirs), (command, dirs)
        assert " ".join(flags) in command, (command, flags)


@pytest.mark.parametrize(
    ("posargs", "folders", "flags"),
    [
        (["-n", "8"], [], ["-n", "8"]),
        (["-n8", "--dist=worksteal"], [], ["-n8", "--dist=worksteal"]),
        (["lucid-capture", "-k", "signature"], ["lucid-capture"], ["-k", "signature"]),
        (["-x", "lucid-train", "-k", "trainer"], ["lucid-train"], ["-x", "-k", "trainer"]),
        (["--dist=load", "lucid-train"], ["lucid-train"], ["--dist=load"]),
    ],
)
def test_posargs_split_keeps_a_flags_value_with_it(
    posargs: list[str], folders: list[str], flags: list[str]
) -> None:
    """A word after a flag is that flag's value unless it names a test folder."""
    assert NOXFILE.split_posargs(posargs, NOXFILE._test_folders()) == (folders, flags)


@pytest.mark.parametrize("posargs", [["8"], ["lucid-capture", "nosuch"], ["--dist=load", "8"]])
def test_posargs_word_that_is_neither_folder_nor_flag_value_is_refused(posargs: list[str]) -> None:
    with pytest.raises(ValueError, match="no test folder for"):
        NOXFILE.split_posargs(posargs, NOXFILE._test_folders())


@pytest.mark.parametrize(
    ("flags", "cores", "expected"),
    [
        ([], 16, ["-n14", "--dist=loadgroup"]),
        (["-k", "trainer"], 16, ["-n14", "--dist=loadgroup"]),
        ([], 4, ["-n2", "--dist=loadgroup"]),
        ([], 2, []),
        ([], None, []),
        (["-n", "8"], 16, []),
        (["-n8"], 16, []),
        (["--numprocesses=4"], 16, []),
        (["--dist=load"], 16, []),
        (["-p", "no:xdist"], 16, []),
        (["-pno:xdist"], 16, []),
        # Another plugin flag keeps the default (it once disabled it: a serial 10-minute run).
        (["-rfE", "-pno:cacheprovider"], 16, ["-n14", "--dist=loadgroup"]),
        (["-p", "no:cacheprovider"], 16, ["-n14", "--dist=loadgroup"]),
    ],
)
def test_gpu_session_runs_side_by_side_unless_the_flags_choose(
    flags: list[str], cores: int | None, expected: list[str]
) -> None:
    """Default xdist flags from the core count; any worker or distribution flag replaces them."""
    assert NOXFILE.parallel_flags(flags, cores) == expected


def _plan(**kw: Any) -> Any:
    args: dict[str, Any] = {"forced": None, "reachable": lambda: True, "uv": "/usr/bin/uv"}
    return NOXFILE.gpu_env_plan("2.9", **(args | kw))


def test_gpu_env_is_built_from_the_lock_where_the_registry_answers() -> None:
    plan = _plan()
    assert plan.kind == "build"
    assert plan.sync == (
        "uv", "sync", "--locked", "--no-default-groups", "--group", "dev", "--group", "zoo",
        "--group", "torch29",
    )  # fmt: skip
    assert NOXFILE.gpu_env_plan("2.11", forced=None, reachable=lambda: True, uv="uv").sync[-1] == (
        "torch211"
    )


@pytest.mark.parametrize(
    ("kw", "kind", "reason"),
    [
        ({"reachable": lambda: False}, "current", "registry does not answer"),
        ({"uv": None}, "current", "uv is not on PATH"),
        ({"forced": "current"}, "current", "LUCID_GPU_ENV=current"),
        ({"forced": "build", "reachable": lambda: False}, "build", "LUCID_GPU_ENV=build"),
    ],
)
def test_gpu_env_falls_back_to_the_current_interpreter_or_is_forced(
    kw: dict[str, Any], kind: str, reason: str
) -> None:
    plan = _plan(**kw)
    assert (plan.kind, reason in plan.reason) == (kind, True)


def test_gpu_env_refuses_an_unknown_forced_value() -> None:
    with pytest.raises(ValueError, match="LUCID_GPU_ENV"):
        _plan(forced="yes")


def test_registry_probe_answers_for_a_listening_port_and_not_for_a_closed_one() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        assert NOXFILE.registry_reachable(f"http://127.0.0.1:{port}/simple/", timeout=1)
    assert not NOXFILE.registry_reachable(f"http://127.0.0.1:{port}/simple/", timeout=1)


def _nox(session: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-s", session],
        capture_output=True,
        text=True,
        env=os.environ | env,
        cwd=ROOT,
        timeout=120,
        check=False,
    )


def test_gpu_session_says_it_builds_and_syncs_its_pair_from_the_lock(tmp_path: Path) -> None:
    """With the build forced and a stand-in ``uv`` on PATH: the session syncs the venv of its
    own Python/torch pair from uv.lock and says so (the stand-in installs nothing, so it then
    skips for want of an interpreter; no GPU test runs)."""
    bin_dir, log = tmp_path / "bin", tmp_path / "uv.log"
    bin_dir.mkdir()
    uv = bin_dir / "uv"
    uv.write_text(  # answers nox's version probe, logs every other call
        '#!/bin/sh\nif [ "$1" = self ]; then echo \'{"version": "0.13.9"}\'; exit 0; fi\n'
        f'echo "$UV_PROJECT_ENVIRONMENT $*" >> {log}\n'
    )
    uv.chmod(uv.stat().st_mode | stat.S_IEXEC)
    env = {"LUCID_GPU_ENV": "build", "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    out = _nox("gpu-3.13-torch2.9", env)
    text = out.stdout + out.stderr
    assert "GPU environment: building" in text, text
    venv = ROOT / ".nox" / "gpu-3.13-torch2.9-uv"
    assert log.read_text().split() == [
        str(venv), "sync", "--locked", "--no-default-groups", "--group", "dev", "--group", "zoo",
        "--group", "torch29", "--python", "3.13",
    ]  # fmt: skip
    assert "Skipped" in text or "skipped" in text, text


def test_gpu_session_on_the_current_interpreter_says_so_and_skips_a_pair_not_its_own() -> None:
    """Without the registry (forced here): the current interpreter, named, and a skip naming the
    pair it found when that is not the session's."""
    import torch

    here = (f"{sys.version_info.major}.{sys.version_info.minor}", torch.__version__)
    py, tv = next(
        (p, t)
        for p in NOXFILE.PYTHONS
        for t in NOXFILE.TORCH_GROUPS
        if not (p == here[0] and here[1].startswith(t + "."))
    )  # fmt: skip  (a pair this interpreter is not: on CI's 3.13/2.9 lane, not that one)
    env = {"LUCID_GPU_ENV": "current", "LUCID_GPU_PYTHON": sys.executable}
    out = _nox(f"gpu-{py}-torch{tv}", env)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert (
        f"GPU environment: the current interpreter {sys.executable} (LUCID_GPU_ENV=current)" in text
    )
    assert f"this session needs python {py} with torch {tv}" in text


def test_ci_runs_the_default_lane_and_the_matrixs_far_corner() -> None:
    """`.ci/run` (and so the README's test command) runs the newest Python with the oldest torch
    beside the default lane, and every session it names exists."""
    ci = (ROOT / ".ci" / "run").read_text()
    match = re.search(r"^TEST_COMMAND=\((.*)\)$", ci, re.M)
    assert match is not None
    words = shlex.split(match.group(1))
    assert words[:2] == ["nox", "-s"]
    sessions = words[2:]
    oldest_torch = min(NOXFILE.TORCH_GROUPS, key=lambda v: tuple(map(int, v.split("."))))
    newest_python = max(NOXFILE.PYTHONS, key=lambda v: tuple(map(int, v.split("."))))
    assert {"lint", "cpu-3.11-torch2.11", f"cpu-{newest_python}-torch{oldest_torch}"} <= set(
        sessions
    ), sessions
    known = {"lint", "capture-standalone"} | {
        f"{kind}-{py}-torch{t}" for kind in ("cpu", "gpu") for py in NOXFILE.PYTHONS
        for t in NOXFILE.TORCH_GROUPS
    }  # fmt: skip
    assert set(sessions) <= known
    assert " ".join(words) in (ROOT / "README.md").read_text()


@pytest.mark.parametrize(
    ("flags", "cores", "expected"),
    [
        (["-n14", "--dist=worksteal"], 16, "1"),
        (["-n", "4"], 16, "4"),
        (["--numprocesses=2"], 16, "8"),
        (["-rfE"], 16, None),  # one process: torch keeps its own thread count
        (["-n1"], 16, None),
    ],
)
def test_gpu_session_shares_the_cores_out_among_its_workers(
    flags: list[str], cores: int, expected: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    threads = NOXFILE.worker_threads(flags, cores)
    assert threads.get("OMP_NUM_THREADS") == expected
    assert threads.get("MKL_NUM_THREADS") == expected


def test_gpu_session_keeps_a_thread_count_the_caller_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert NOXFILE.worker_threads(["-n14"], 16) == {}


@pytest.mark.parametrize(
    ("flags", "cores", "expected", "threads"),
    [
        ([], 2, ["-n2", "--dist=loadgroup"], "1"),  # the CI machine
        ([], 16, ["-n16", "--dist=loadgroup"], "1"),
        (["-k", "signature"], 4, ["-n4", "--dist=loadgroup"], "1"),
        ([], 1, [], None),  # one core: one process, torch's own thread count
        (["-n", "0"], 16, [], None),
        (["-n", "3"], 12, [], "4"),
        (["--dist=loadfile"], 2, [], None),
        (["-p", "no:xdist"], 2, [], None),
        (["-pno:xdist"], 2, [], None),
    ],
)
def test_cpu_lanes_run_a_worker_per_core_of_one_thread_unless_the_flags_choose(
    flags: list[str],
    cores: int,
    expected: list[str],
    threads: str | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("MKL_NUM_THREADS", raising=False)
    extra, env = NOXFILE.cpu_parallel(flags, cores)
    assert extra == expected
    assert env.get("OMP_NUM_THREADS") == env.get("MKL_NUM_THREADS") == threads


def test_cpu_lanes_keep_a_thread_count_the_caller_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert NOXFILE.cpu_parallel([], 2) == (["-n2", "--dist=loadgroup"], {})
