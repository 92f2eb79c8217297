"""The test matrix: CPU and GPU lanes by Python x torch, the standalone capture lane, and lint.

Session names are exact (`cpu-3.11-torch2.11`, `gpu-3.12-torch2.11`, ...) and tagged by torch
version (`nox -t torch2.11`). Packages are chosen by posargs:

    nox -s cpu-3.11-torch2.11 -- lucid-kernels lucid-capture

A GPU session installs nothing: it runs on the interpreter it is started with (the GPU machine has
torch preinstalled and no network) and skips, saying why, when that interpreter's Python/torch pair
is not the session's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import nox

nox.needs_version = ">=2026.8.17"
nox.options.default_venv_backend = "uv"
nox.options.error_on_missing_interpreters = True
nox.options.sessions = ["lint", "cpu-3.11-torch2.11", "capture-standalone"]

ROOT = Path(__file__).parent
PACKAGES = sorted(p.name for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").is_file())
# Test folders that are not a package's own: end-to-end and the workspace's contracts.
EXTRA_TEST_DIRS = ["e2e", "workspace"]
PYTHONS = ["3.11", "3.12", "3.13"]
TORCH_GROUPS = {"2.9": "torch29", "2.11": "torch211"}  # dependency groups in pyproject.toml
NO_TESTS_COLLECTED = 5  # pytest's exit code for an empty selection


def _test_dirs(session: nox.Session) -> list[str]:
    """tests/<name> for each posarg (a package or an extra folder); all of them by default."""
    every = [n for n in [*PACKAGES, *EXTRA_TEST_DIRS] if (ROOT / "tests" / n).is_dir()]
    names = [a for a in session.posargs if not a.startswith("-")] or every
    unknown = [n for n in names if n not in every]
    if unknown:
        session.error(f"no test folder for {unknown}; choose from {every}")
    return [f"tests/{n}" for n in names]


def _pytest_flags(session: nox.Session) -> list[str]:
    return [a for a in session.posargs if a.startswith("-")]


def _run_pytest(session: nox.Session, *args: str, python: str = "python", **kw: object) -> None:
    """Run pytest; an empty selection is a skip that says so, never a silent pass or a failure."""
    code = session.run(python, "-m", "pytest", *args, success_codes=[0, NO_TESTS_COLLECTED], **kw)
    if code == NO_TESTS_COLLECTED:
        session.skip(f"pytest selected no tests in {' '.join(args)}")


def _cpu_session(group: str) -> Callable[[nox.Session], None]:
    def run(session: nox.Session) -> None:
        # nox's uv backend exports UV_PROJECT_ENVIRONMENT=<session venv>, so `uv sync` fills it
        # from uv.lock, members editable.
        session.run_install(
            "uv", "sync", "--locked", "--no-default-groups", "--group", "dev", "--group", group
        )
        _run_pytest(session, "-m", "not gpu", *_pytest_flags(session), *_test_dirs(session))

    return run


for _torch, _group in TORCH_GROUPS.items():
    for _py in PYTHONS:
        nox.session(
            _cpu_session(_group),
            name=f"cpu-{_py}-torch{_torch}",
            python=_py,
            tags=["cpu", f"torch{_torch}", f"py{_py}"],
            default=False,
        )


def _interpreter_pair(python: str) -> tuple[str, str]:
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
    if out.returncode != 0:
        return (f"{sys.version_info[0]}.{sys.version_info[1]}", "none (torch not importable)")
    py, torch_version = out.stdout.split()
    return py, torch_version


def _gpu_session(py: str, torch_version: str) -> Callable[[nox.Session], None]:
    def run(session: nox.Session) -> None:
        python = os.environ.get("LUCID_GPU_PYTHON", "python3")
        have_py, have_torch = _interpreter_pair(python)
        if have_py != py or not have_torch.startswith(torch_version + "."):
            session.skip(
                f"this session needs python {py} with torch {torch_version}; "
                f"{python} has python {have_py}, torch {have_torch}"
            )
        src = [str(ROOT / "packages" / p / "src") for p in PACKAGES]
        env = {"PYTHONPATH": os.pathsep.join([*src, os.environ.get("PYTHONPATH", "")])}
        _run_pytest(
            session,
            "-m",
            "gpu",
            *_pytest_flags(session),
            *_test_dirs(session),
            python=python,
            env=env,
            external=True,
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
