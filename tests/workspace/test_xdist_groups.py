"""Tests that share a module- or class-scoped fixture are one pytest-xdist group (the hook of
tests/conftest.py), so the side-by-side sessions (`--dist=loadgroup`, noxfile.py) build each such
fixture once, on one worker; an explicit group stays as written and tests of function fixtures
stay free to spread. Held on a small module under that hook, by collection and through xdist."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "tests" / "conftest.py"
HOOK = f"""
import importlib.util

_spec = importlib.util.spec_from_file_location("lucid_tests_policy", {str(POLICY)!r})
_policy = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_policy)
pytest_collection_modifyitems = _policy.pytest_collection_modifyitems
"""
MODULE = """
import pytest


@pytest.fixture(scope="module")
def built():
    return 1


@pytest.mark.parametrize("i", range(4))
def test_shared(built, i):
    pass


@pytest.mark.xdist_group("mine")
def test_shared_in_its_own_group(built):
    pass


@pytest.mark.parametrize("i", range(4))
def test_free(tmp_path, i):
    pass


class TestOfOneClass:
    @pytest.fixture(scope="class")
    def once(self):
        return 1

    def test_a(self, once):
        pass

    def test_b(self, once):
        pass
"""
GROUPS = (
    "import sys, pytest\n"
    "class Groups:\n"
    "    def pytest_collection_finish(self, session):\n"
    "        for item in session.items:\n"
    "            names = [m.args[0] for m in item.iter_markers('xdist_group')]\n"
    "            print('GROUP', item.nodeid, ','.join(names) or '-')\n"
    "sys.exit(pytest.main(sys.argv[1:], plugins=[Groups()]))\n"
)
RUN = "import sys, pytest; sys.exit(pytest.main(sys.argv[1:]))"


def _pytest(tmp_path: Path, *args: str, code: str = RUN) -> str:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(HOOK)
    (tmp_path / "test_shared.py").write_text(textwrap.dedent(MODULE))
    done = subprocess.run(
        [sys.executable, "-c", code, "-p", "no:cacheprovider", "-c", "pytest.ini", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_tests_of_one_module_or_class_fixture_share_their_files_group(tmp_path: Path) -> None:
    out = _pytest(tmp_path, "--collect-only", "-q", "-p", "no:xdist", code=GROUPS)
    groups = dict(line.split()[1:] for line in out.splitlines() if line.startswith("GROUP "))
    file = "test_shared.py"
    assert groups == {
        **{f"{file}::test_shared[{i}]": file for i in range(4)},
        f"{file}::test_shared_in_its_own_group": "mine",
        **{f"{file}::test_free[{i}]": "-" for i in range(4)},
        f"{file}::TestOfOneClass::test_a": file,
        f"{file}::TestOfOneClass::test_b": file,
    }, groups


@pytest.mark.slow
def test_side_by_side_a_module_fixtures_tests_run_on_one_worker(tmp_path: Path) -> None:
    """Through xdist itself: its worker names the groups in a hook that runs after ours (and on
    pytest 9.2 it names none, pytest-dev/pytest-xdist#1386, which this test would catch)."""
    out = _pytest(tmp_path, "-n", "2", "--dist=loadgroup", "-v")
    ran = re.findall(r"\[(gw\d+)\].* PASSED (\S+)", out)
    shared = [(w, node) for w, node in ran if "::test_shared[" in node]
    assert [node.endswith("@test_shared.py") for _, node in shared] == [True] * 4, out[-3000:]
    assert len({w for w, _ in shared}) == 1, ran
    assert len(ran) == 11, ran
