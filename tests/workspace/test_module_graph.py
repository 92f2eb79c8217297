"""The module graph of the four packages: no import circle, and inside lucid_train no import
that runs back up its floors.

Every import counts, a lazy one inside a function too: a circle broken only by importing late
is still a circle to a reader. `FLOORS` orders lucid_train's top-level modules and folders from
the bottom; a module may import its own unit and the units below it. ``__main__`` modules are
entry points (nothing imports them) and may reach any floor.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ROOT / "packages"
# lucid_train's units, bottom first: a top-level module or a folder each.
FLOORS = (
    "errors",  # the user-facing error types (every floor may raise them)
    "arg_types",  # range-checked argument types (the data and the CLI flags read them)
    "atomic_files",
    "distributed",
    "data",
    "model_spec",
    "evaluation",
    "assign",
    "losses",
    "optim",
    "weights",
    "report",
    "tasks",
    "run",
    "overfit",
    "cli",
)
MAX_LINES = 500
# Files allowed past MAX_LINES while their split is under way; the test says when to drop one.
NOT_YET_SPLIT: frozenset[str] = frozenset()
MAX_TOP_LEVEL_MODULES = 8


def _modules(root: Path = SOURCES) -> dict[str, Path]:
    """Dotted module name -> file, for every source file of every package."""
    found: dict[str, Path] = {}
    for package in sorted(root.glob("*/src/*")):
        if not package.is_dir():
            continue
        for path in package.rglob("*.py"):
            parts = list(path.relative_to(package.parent).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The known modules ``name`` imports (module level or not), each resolved to the longest
    known prefix (``from a.b import c`` is ``a.b.c`` when that is a module, else ``a.b``)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    wanted: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            wanted.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            wanted.add(module)
            wanted.update(f"{module}.{alias.name}" for alias in node.names)
    resolved: set[str] = set()
    for target in wanted:
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name:
            resolved.add(target)
    return resolved


def _graph(root: Path = SOURCES) -> dict[str, set[str]]:
    known = _modules(root)
    return {name: _imports(name, path, known) for name, path in known.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def _unit(module: str) -> str | None:
    """The `FLOORS` unit of a lucid_train module (None: the package itself)."""
    parts = module.split(".")
    return parts[1] if parts[0] == "lucid_train" and len(parts) > 1 else None


def _upward(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for module, targets in sorted(graph.items()):
        unit = _unit(module)
        if unit is None or module.endswith("__main__"):
            continue
        for target in sorted(targets):
            other = _unit(target)
            if other is None or other == unit:
                continue
            if FLOORS.index(other) > FLOORS.index(unit):
                found.append(f"{module} imports {target} ({other} is above {unit})")
    return found


def test_no_module_imports_itself_round_a_circle() -> None:
    circles = _circles(_graph())
    assert not circles, circles


def test_every_lucid_train_unit_has_a_floor() -> None:
    package = SOURCES / "lucid-train" / "src" / "lucid_train"
    units = {p.stem for p in package.glob("*.py")} | {
        p.name for p in package.iterdir() if p.is_dir()
    }
    units -= {"__init__", "__main__", "__pycache__"}
    assert units <= set(FLOORS), f"give these a floor in FLOORS: {sorted(units - set(FLOORS))}"


def test_the_package_docstring_maps_every_floor_in_order() -> None:
    """A newcomer reads lucid_train's floors in its ``__init__``: one bullet per unit, bottom
    first, the same order as `FLOORS`."""
    init = SOURCES / "lucid-train" / "src" / "lucid_train" / "__init__.py"
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    bullets = [line.split("``")[1] for line in doc.splitlines() if line.startswith("* ``")]
    assert bullets == list(FLOORS), bullets


def test_lucid_train_imports_only_its_own_floor_and_those_below() -> None:
    upward = _upward(_graph())
    assert not upward, upward


# What a format's reader may build on: the records it fills and the geometry and image checks
# below them. The loaders, augmentation and built-in sets sit above the readers.
FORMATS = "lucid_train.data.formats"
BELOW_FORMATS = frozenset(
    f"lucid_train.data.{m}"
    for m in ("records", "targets", "image_io", "polygons", "mask_rings", "masks", "rotated")
)


def test_the_format_readers_build_only_on_the_records_below_them() -> None:
    """``data/formats`` reads files into records; nothing in it reaches the loaders,
    augmentation or built-in sets of the floor above (``data/__init__`` re-exports both)."""
    upward = [
        f"{module} imports {target}"
        for module, targets in sorted(_graph().items())
        if module.startswith(FORMATS)
        for target in sorted(targets)
        if target.startswith("lucid_train.data")
        and not target.startswith(FORMATS)
        and target not in BELOW_FORMATS
    ]
    assert not upward, upward


def test_no_source_file_is_longer_than_the_limit() -> None:
    files = sorted(SOURCES.glob("*/src/**/*.py")) + sorted((ROOT / "benchmarks").glob("*.py"))
    lengths = {str(f.relative_to(ROOT)): len(f.read_text().splitlines()) for f in files}
    long = {f: n for f, n in lengths.items() if n > MAX_LINES and f not in NOT_YET_SPLIT}
    assert not long, long
    split = sorted(f for f in NOT_YET_SPLIT if lengths.get(f, 0) <= MAX_LINES)
    assert not split, f"split now: take {split} out of NOT_YET_SPLIT"


def test_lucid_train_top_level_holds_few_modules() -> None:
    package = SOURCES / "lucid-train" / "src" / "lucid_train"
    modules = sorted(p.name for p in package.glob("*.py"))
    assert len(modules) <= MAX_TOP_LEVEL_MODULES, modules


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / "packages" / "lucid-train" / "src" / "lucid_train" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "packages"


def test_the_checks_see_a_circle_and_an_upward_import(tmp_path: Path) -> None:
    packages = _write(
        tmp_path,
        {
            "__init__.py": "",
            "data/__init__.py": "",
            "data/a.py": "def f():\n    from lucid_train.data.b import g\n",
            "data/b.py": "from lucid_train.data import a\n",
            "losses/__init__.py": "",
            "losses/x.py": "",
            "assign/__init__.py": "",
            "assign/y.py": "from lucid_train.losses.x import *\n",
            "cli/__init__.py": "",
            "cli/__main__.py": "from ..cli import z\n",
            "cli/z.py": "",
            "data/__main__.py": "from lucid_train.cli import z\n",
        },
    )
    graph = _graph(packages)
    assert _circles(graph) == [["lucid_train.data.a", "lucid_train.data.b"]]
    assert graph["lucid_train.cli.__main__"] == {"lucid_train.cli", "lucid_train.cli.z"}
    assert _upward(graph) == [
        "lucid_train.assign.y imports lucid_train.losses.x (losses is above assign)"
    ]


@pytest.mark.parametrize("rel", ["a.py", "pkg/__init__.py"])
def test_relative_imports_resolve_from_the_module_package(tmp_path: Path, rel: str) -> None:
    packages = _write(tmp_path, {"__init__.py": "", "pkg/__init__.py": "", "pkg/c.py": "", rel: ""})
    target = packages / "lucid-train" / "src" / "lucid_train" / rel
    target.write_text("from .pkg import c\n" if rel == "a.py" else "from . import c\n")
    graph = _graph(packages)
    name = "lucid_train.a" if rel == "a.py" else "lucid_train.pkg"
    assert graph[name] == {"lucid_train.pkg.c"} | ({"lucid_train.pkg"} if rel == "a.py" else set())
