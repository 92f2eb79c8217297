"""The test matrix: CPU and GPU lanes by Python x torch, the standalone capture lane, and lint.

Session names are exact (`cpu-3.11-torch2.11`, `gpu-3.12-torch2.11`, ...) and tagged by torch
version (`nox -t torch2.11`). Packages are chosen by posargs:

    nox -s cpu-3.11-torch2.11 -- lucid-kernels lucid-capture

Pytest flags pass through, with their values as separate words or not (`-- -n 8`, `-- -n8`,
`-- lucid-capture -k signature`): a word that is not a test folder is the value of the flag
before it. A CPU lane runs `CPU_MARKS` of its torch version (torch 2.9: not the `slow` tests
but those also marked `any_torch`); `-- -m "not gpu"` runs every CPU test there too. Unless the
flags choose otherwise (`-n`, `--dist`, `-p no:xdist`) it runs them side by side with
pytest-xdist, a worker per core of one CPU thread each (`-n <cores> --dist=loadgroup`: the tests
that share a module's fixture on one worker, tests/conftest.py), which brought `.ci/run` on the
2-core CI machine under 20 minutes (README).

A GPU session chooses its environment (`gpu_env_plan`): where the package registry answers and
uv is at hand, it builds its own from `uv.lock` for its Python/torch pair, as the CPU sessions
do; elsewhere (the GPU machine has torch preinstalled and no network) it installs nothing, runs on
the interpreter it is started with and skips, saying why, when that interpreter's Python/torch
pair is not the session's. `LUCID_GPU_ENV=build|current` forces the choice; the session prints
which it took. Unless the flags choose otherwise it runs the tests side by side with
pytest-xdist (`-n <cores - 2> --dist=loadgroup`: the `heavy` tests first, one fixture's
tests on one worker), so the whole session fits one 10-minute call.
"""

from __future__ import annotations

import itertools
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import nox

nox.needs_version = ">=2026.8.17"
nox.options.default_venv_backend = "uv"
nox.options.error_on_missing_interpreters = True
# The default lane and the matrix's far corner (newest Python, oldest torch), so neither rots.
nox.options.sessions = ["lint", "cpu-3.11-torch2.11", "cpu-3.13-torch2.9", "capture-standalone"]

ROOT = Path(__file__).parent
PACKAGES = sorted(p.name for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").is_file())
# Test folders that are not a package's own: end-to-end and the workspace's contracts.
EXTRA_TEST_DIRS = ["e2e", "workspace", "peer"]
# The lane that also installs the authors' trainer, so the equivalence ladder (tests/peer) runs.
PEER_LANE = "cpu-3.11-torch2.11"
PYTHONS = ["3.11", "3.12", "3.13"]
TORCH_GROUPS = {"2.9": "torch29", "2.11": "torch211"}  # dependency groups in pyproject.toml
# What a CPU lane runs unless its flags choose (a later ``-m`` wins). The torch 2.11 lanes run
# every CPU test; the torch 2.9 lanes leave out the ``slow`` ones (whole Lightning fits, the
# killed-fit chain): those hold the trainer's contracts, which the default lane checks, while
# what torch's version can change (kernels, autocast islands, recorders, models, export, losses,
# optimizers, checkpoint files) is held by the fast tests both lanes run and by the slow ones
# marked ``any_torch`` (torch.compile, the large scales' counts, a resume's bits).
CPU_MARKS = {"2.9": "not gpu and (not slow or any_torch)", "2.11": "not gpu"}
PREBUILD_FONTS = (
    "import importlib.util as u\nif u.find_spec('matplotlib'): import matplotlib.font_manager"
)
NO_TESTS_COLLECTED = 5  # pytest's exit code for an empty selection


def _test_folders() -> list[str]:
    return [n for n in [*PACKAGES, *EXTRA_TEST_DIRS] if (ROOT / "tests" / n).is_dir()]


def split_posargs(posargs: Sequence[str], folders: Sequence[str]) -> tuple[list[str], list[str]]:
    """Posargs -> (test folder names, pytest flags). A word that does not start with ``-`` is a
    folder when it names one, else the value of the flag just before it (``-n 8``, ``-k name``);
    anything else raises ValueError naming it."""
    names: list[str] = []
    flags: list[str] = []
    for i, arg in enumerate(posargs):
        if arg.startswith("-"):
            flags.append(arg)
        elif arg in folders:
            names.append(arg)
        elif i > 0 and flags and posargs[i - 1] == flags[-1] and "=" not in flags[-1]:
            flags.append(arg)
        else:
            raise ValueError(
                f"no test folder for {arg!r}; choose from {list(folders)}, or give it after the "
                "pytest flag it belongs to"
            )
    return names, flags


def _test_dirs(session: nox.Session) -> list[str]:
    """tests/<name> for each posarg (a package or an extra folder); all of them by default."""
    every = _test_folders()
    try:
        names, _ = split_posargs(session.posargs, every)
    except ValueError as err:
        session.error(str(err))
    return [f"tests/{n}" for n in names or every]


def _pytest_flags(session: nox.Session) -> list[str]:
    try:
        return split_posargs(session.posargs, _test_folders())[1]
    except ValueError as err:
        session.error(str(err))


def _run_pytest(session: nox.Session, *args: str, python: str = "python", **kw: object) -> None:
    """Run pytest; an empty selection is a skip that says so, never a silent pass or a failure."""
    code = session.run(python, "-m", "pytest", *args, success_codes=[0, NO_TESTS_COLLECTED], **kw)
    if code == NO_TESTS_COLLECTED:
        session.skip(f"pytest selected no tests in {' '.join(args)}")


def _cpu_session(group: str, marks: str) -> Callable[[nox.Session], None]:
    def run(session: nox.Session) -> None:
        # nox's uv backend exports UV_PROJECT_ENVIRONMENT=<session venv>, so `uv sync` fills it
        # from uv.lock, members editable.
        peer = ["--group", "peer"] if session.name == PEER_LANE else []
        session.run_install(
            "uv",
            "sync",
            "--locked",
            "--no-default-groups",
            "--group",
            "dev",
            "--group",
            group,
            *peer,
        )
        flags = _pytest_flags(session)
        extra, threads = cpu_parallel(flags, os.cpu_count())
        if extra:
            session.log(f"running side by side: {' '.join(extra)}")
        if threads:
            session.log(f"CPU threads per worker: {threads['OMP_NUM_THREADS']}")
        _run_pytest(session, "-m", marks, *extra, *flags, *_test_dirs(session), env=threads)

    return run


for _torch, _group in TORCH_GROUPS.items():
    for _py in PYTHONS:
        nox.session(
            _cpu_session(_group, CPU_MARKS[_torch]),
            name=f"cpu-{_py}-torch{_torch}",
            python=_py,
            tags=["cpu", f"torch{_torch}", f"py{_py}"],
            default=False,
        )


def _interpreter_pair(python: str) -> tuple[str, str]:
    try:
        out = subprocess.run(
            [
                python,
                "-c",
                "import sys, torch; print(f'{sys.version_info[0]}.{sys.version_info[1]}',"
                " torch.__version__)",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError:  # no such interpreter
        return ("none", "none (no interpreter)")
    if out.returncode != 0:
        return (f"{sys.version_info[0]}.{sys.version_info[1]}", "none (torch not importable)")
    py, torch_version = out.stdout.split()
    return py, torch_version


def parallel_flags(flags: Sequence[str], cores: int | None, *, reserve: int = 2) -> list[str]:
    """The default xdist flags, ``cores - reserve`` workers, unless ``flags`` already choose the
    workers, the distribution or turn xdist off. The GPU session keeps two cores back (the main
    process and the device's feeder): its tests are long fits that share the one device well,
    and one at a time they take longer than a 10-minute call (README). The CPU lanes use every
    core (``reserve=0``): in one process (one thread) the default lane's tests kept 0.87 of
    the 2-core machine's two cores busy: most are Python-bound fits and interpreter start-ups."""
    chosen = ("-n", "--numprocesses", "--dist")
    if any(f == c or f.startswith(c) for f in flags for c in chosen):
        return []
    # Only "-p no:xdist" turns xdist off; other plugins ("-pno:cacheprovider") leave it on.
    plugins = [b for a, b in itertools.pairwise(flags) if a == "-p"]
    plugins += [f.removeprefix("-p") for f in flags if f.startswith("-p") and f != "-p"]
    if "no:xdist" in plugins:
        return []
    workers = (cores or 1) - reserve
    return [f"-n{workers}", "--dist=loadgroup"] if workers >= 2 else []


def worker_threads(flags: Sequence[str], cores: int | None) -> dict[str, str]:
    """CPU threads per xdist worker (``OMP_NUM_THREADS``/``MKL_NUM_THREADS``): the cores shared
    out, at least one. Left alone when the caller set them or the tests run in one process: torch
    otherwise starts a thread per core in every worker, and fourteen workers' CPU ops then fight
    over sixteen cores: that alone kept the GPU session past 9 minutes (docs/gpu-results.md)."""
    workers = 0
    for prev, flag in itertools.pairwise(["", *flags]):
        if prev in ("-n", "--numprocesses"):
            value = flag
        elif flag.startswith(("-n", "--numprocesses=")):
            value = flag.removeprefix("--numprocesses=").removeprefix("-n")
        else:
            continue
        if value.isdigit():
            workers = int(value)
    if workers < 2 or any(k in os.environ for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")):
        return {}
    n = str(max(1, (cores or 1) // workers))
    return {"OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n}


def cpu_parallel(flags: Sequence[str], cores: int | None) -> tuple[list[str], dict[str, str]]:
    """A CPU lane's default xdist flags (a worker per core, `parallel_flags`) and its workers'
    thread counts (`worker_threads`), each left out where ``flags`` or the environment chose."""
    extra = parallel_flags(flags, cores, reserve=0)
    return extra, worker_threads([*extra, *flags], cores)


def registry_reachable(url: str | None = None, timeout: float = 3.0) -> bool:
    """Whether the package index (``UV_INDEX_URL`` / ``PIP_INDEX_URL``, else PyPI) accepts a TCP
    connection: a cheap stand-in for "uv can sync here"."""
    url = url or os.environ.get("UV_INDEX_URL") or os.environ.get("PIP_INDEX_URL")
    parts = urlsplit(url or "https://pypi.org/simple/")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "", port), timeout=timeout):
            return True
    except OSError:
        return False


@dataclass(frozen=True)
class GpuEnvPlan:
    """Where a GPU session runs: ``build`` (a venv synced from uv.lock) or ``current`` (the
    interpreter it was started with), why, and the sync command for ``build``."""

    kind: str
    reason: str
    sync: tuple[str, ...] = ()


def gpu_env_plan(
    torch_version: str, *, forced: str | None, reachable: Callable[[], bool], uv: str | None
) -> GpuEnvPlan:
    """Choose the GPU session's environment (see the module docstring)."""
    # `zoo` brings timm for the capture zoo's GPU tests (tests/lucid-capture/test_zoo_*).
    sync = ("uv", "sync", "--locked", "--no-default-groups", "--group", "dev", "--group", "zoo")
    sync = (*sync, "--group", TORCH_GROUPS[torch_version])
    if forced not in (None, "", "build", "current"):
        raise ValueError(f"LUCID_GPU_ENV must be 'build' or 'current', got {forced!r}")
    if forced == "current":
        return GpuEnvPlan("current", "LUCID_GPU_ENV=current")
    if forced == "build":
        return GpuEnvPlan("build", "LUCID_GPU_ENV=build", sync)
    if uv is None:
        return GpuEnvPlan("current", "uv is not on PATH")
    if not reachable():
        return GpuEnvPlan("current", "the package registry does not answer")
    return GpuEnvPlan("build", "the package registry answers", sync)


def _gpu_session(py: str, torch_version: str) -> Callable[[nox.Session], None]:
    def run(session: nox.Session) -> None:
        names, flags = _test_dirs(session), _pytest_flags(session)
        plan = gpu_env_plan(
            torch_version,
            forced=os.environ.get("LUCID_GPU_ENV"),
            reachable=registry_reachable,
            uv=shutil.which("uv"),
        )
        env: dict[str, str] = {}
        if plan.kind == "build":
            venv = ROOT / ".nox" / f"{session.name}-uv"
            session.log(f"GPU environment: building {venv} from uv.lock ({plan.reason})")
            env["UV_PROJECT_ENVIRONMENT"] = str(venv)
            session.run(*plan.sync, "--python", py, env=env, external=True)
            python = str(venv / "bin" / "python")
        else:
            python = os.environ.get("LUCID_GPU_PYTHON", "python3")
            session.log(f"GPU environment: the current interpreter {python} ({plan.reason})")
            src = [str(ROOT / "packages" / p / "src") for p in PACKAGES]
            env["PYTHONPATH"] = os.pathsep.join([*src, os.environ.get("PYTHONPATH", "")])
        have_py, have_torch = _interpreter_pair(python)
        if have_py != py or not have_torch.startswith(torch_version + "."):
            session.skip(
                f"this session needs python {py} with torch {torch_version}; "
                f"{python} has python {have_py}, torch {have_torch}"
            )
        # Without pytest-xdist in that interpreter the tests run one at a time, as before.
        xdist = subprocess.run([python, "-c", "import xdist"], capture_output=True, check=False)
        extra = parallel_flags(flags, os.cpu_count()) if xdist.returncode == 0 else []
        if extra:
            session.log(f"running side by side: {' '.join(extra)}")
        threads = worker_threads([*extra, *flags], os.cpu_count())
        if threads:
            session.log(f"CPU threads per worker: {threads['OMP_NUM_THREADS']}")
        env.update(threads)
        # matplotlib builds its font list on first import where none is cached (a fresh GPU
        # machine): build it once here, not once in every worker at the same moment.
        session.run(python, "-c", PREBUILD_FONTS, env=env, external=True, silent=True)
        _run_pytest(
            session, "-m", "gpu", *extra, *flags, *names, python=python, env=env, external=True
        )

    return run


for _torch in TORCH_GROUPS:
    for _py in PYTHONS:
        nox.session(
            _gpu_session(_py, _torch),
            name=f"gpu-{_py}-torch{_torch}",
            python=False,
            tags=["gpu", f"torch{_torch}", f"py{_py}"],
            default=False,
        )


@nox.session(name="capture-standalone", python="3.11", tags=["cpu", "torch2.11"])
def capture_standalone(session: nox.Session) -> None:
    """lucid-capture's wheel installed alone (torch + pytest), with its own tests."""
    dist = session.create_tmp()
    session.run_install("uv", "build", "--package", "lucid-capture", "--wheel", "-o", dist)
    wheel = next(Path(dist).glob("lucid_capture-*.whl"))
    session.install(str(wheel), "torch==2.11.0", "pytest", "pytest-timeout")
    session.run(
        "python",
        "-c",
        "import importlib.util as u\n"
        "others = [m for m in ('lucid_kernels', 'lucid_models', 'lucid_train', 'lightning')"
        " if u.find_spec(m) is not None]\n"
        "assert not others, f'standalone lucid-capture can import {others}'\n"
        "import lucid_capture; print('lucid_capture', lucid_capture.__version__, 'alone')",
    )
    _run_pytest(session, "-m", "not gpu", *_pytest_flags(session), "tests/lucid-capture")


@nox.session(python="3.11", tags=["lint"])
def lint(session: nox.Session) -> None:
    """ruff (lint + format check) and mypy --strict on every package."""
    session.run_install(
        "uv", "sync", "--locked", "--no-default-groups", "--group", "lint", "--group", "torch211"
    )
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")
