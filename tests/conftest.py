"""Repo-wide test policy: `gpu` tests skip without CUDA, and say so; with CUDA the `heavy` ones
run first, heaviest first. Every test starts with `PIL.Image.open` and `torch.save` as they were
before any test module was imported. Tests that share a module- or class-scoped fixture carry one
`xdist_group` (their file), so pytest-xdist's ``--dist=loadgroup`` (the nox sessions' default)
runs them on one worker and builds the fixture once, as a run in one process does.

`LUCID_TEST_TIMES=<file>` appends one line per finished test (outcome, seconds, node id) as it
finishes, so a session cut short by a time limit still says where its time went.
"""

from __future__ import annotations

import os

import pytest
import torch

try:
    from PIL import Image as PilImage
except ImportError:  # the capture-standalone lane has torch and pytest only
    PilImage = None

# Importing Ultralytics (the dev-only peer of tests/peer and the facts tests) replaces these for
# the whole process: its `Image.open` retries through an optional HEIF plugin and raises
# ModuleNotFoundError without it, its `torch.save` retries. Later tests of our readers and
# checkpoint writer must see what a user's process sees.
_ORIGINALS = [(torch, "save", torch.save)]
if PilImage is not None:
    _ORIGINALS.append((PilImage, "open", PilImage.open))


@pytest.fixture(autouse=True)
def _unpatched_library_functions() -> None:
    for owner, name, original in _ORIGINALS:
        if getattr(owner, name) is not original:
            setattr(owner, name, original)


def _weight(item: pytest.Item) -> float:
    mark = item.get_closest_marker("heavy")
    return float(mark.args[0]) if mark and mark.args else 0.0


def _shared_fixture_group(item: pytest.Item) -> str | None:
    """The file of ``item`` when it uses a fixture built once for its module or class, else
    None. The group is the file for either scope: a class's tests stay in their file's group."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:  # not a Python test function
        return None
    for defs in info.name2fixturedefs.values():
        if defs and defs[-1].scope in ("module", "class"):
            return item.nodeid.split("::")[0]
    return None


# tryfirst: xdist's worker reads the groups in its own hook of this name.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        group = _shared_fixture_group(item)
        if group is not None and item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(group))
    if torch.cuda.is_available():
        # Heaviest first: with xdist's load distribution (round robin, then one at a time) the
        # long fits start on separate workers at once instead of ending the session one by one.
        items.sort(key=_weight, reverse=True)
        return
    skip = pytest.mark.skip(reason="needs CUDA: run the GPU nox session on a GPU machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = os.environ.get("LUCID_TEST_TIMES")
    # Under xdist the controller sees every worker's reports; a worker writes nothing itself.
    if not path or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if report.when == "call" or report.outcome != "passed":
        with open(path, "a", encoding="utf-8") as log:
            log.write(f"{report.outcome}\t{report.when}\t{report.duration:.1f}\t{report.nodeid}\n")
