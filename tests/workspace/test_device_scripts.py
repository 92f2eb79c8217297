"""The GPU machine's call scripts (`benchmarks/device/`): each is valid bash, every benchmark it
runs exists, and every folder it installs or asks a call to carry is one `wheels.sh` fills."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEVICE = ROOT / "benchmarks" / "device"
SCRIPTS = sorted(DEVICE.glob("*.sh"))


def _filled() -> set[str]:
    text = (DEVICE / "wheels.sh").read_text()
    return set(re.findall(r"^get (\.whl[\w-]*) ", text, flags=re.M))


def test_there_are_call_scripts_and_wheels_fills_four_folders() -> None:
    assert {p.name for p in SCRIPTS} >= {"wheels.sh", "prologue.sh", "gpu_session.sh"}
    assert _filled() == {".whl", ".whl-peer", ".whl-zoo", ".whl-vs"}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_each_script_parses_and_names_what_exists(script: Path) -> None:
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    text = script.read_text()
    for name in re.findall(r"benchmarks/[\w/]+\.(?:py|sh)", text):
        assert (ROOT / name).is_file(), f"{script.name} runs {name}, which is not there"
    wheels = set(re.findall(r"(\.whl[\w-]*)\b", text))
    if script.name != "wheels.sh":
        assert wheels <= _filled(), f"{script.name} asks for {wheels - _filled()}"
