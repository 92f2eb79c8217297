"""One shared version across members, exact `==` pins between them, and `__version__` agreeing."""

from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MEMBERS = sorted(p for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").is_file())


def _project(member: Path) -> dict[str, object]:
    data = tomllib.loads((member / "pyproject.toml").read_text())
    project = data["project"]
    assert isinstance(project, dict)
    return project


def test_the_four_members_exist() -> None:
    assert [m.name for m in MEMBERS] == [
        "lucid-capture",
        "lucid-kernels",
        "lucid-models",
        "lucid-train",
    ]


def test_members_share_one_version_and_pin_each_other_exactly() -> None:
    versions = {m.name: _project(m)["version"] for m in MEMBERS}
    assert len(set(versions.values())) == 1, versions
    (version,) = set(versions.values())
    for member in MEMBERS:
        deps = _project(member)["dependencies"]
        assert isinstance(deps, list)
        for dep in deps:
            match = re.match(r"(lucid-[a-z]+)(\[[a-z,]+\])?(.*)", dep)
            if match:
                assert match.group(3) == f"=={version}", f"{member.name}: {dep}"


def test_dunder_version_matches_pyproject() -> None:
    for member in MEMBERS:
        module = importlib.import_module(member.name.replace("-", "_"))
        assert module.__version__ == _project(member)["version"], member.name


def test_lucid_capture_needs_torch_alone_with_lightning_as_an_extra() -> None:
    project = _project(ROOT / "packages" / "lucid-capture")
    assert project["dependencies"] == ["torch>=2.9"]
    extras = project["optional-dependencies"]
    assert isinstance(extras, dict)
    assert [d.split(">")[0] for d in extras["lightning"]] == ["lightning"]
