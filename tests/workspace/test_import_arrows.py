"""The dependency arrows of DESIGN.md's package table: imports only point down.

lucid-kernels and lucid-capture import no other lucid package; lucid-models imports kernels only;
nothing imports lucid_train. `import lucid_capture` pulls in neither Lightning nor another lucid
package (Lightning lives behind the `[lightning]` extra).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LUCID = {"lucid_kernels", "lucid_capture", "lucid_models", "lucid_train"}
ALLOWED = {
    "lucid_kernels": set(),
    "lucid_capture": set(),
    "lucid_models": {"lucid_kernels"},
    "lucid_train": {"lucid_kernels", "lucid_capture", "lucid_models"},
}
# Third-party imports a package may make at module level.
THIRD_PARTY_FORBIDDEN = {
    "lucid_kernels": {"lightning", "numpy", "pycocotools", "faster_coco_eval"},
    "lucid_capture": {"numpy", "pycocotools", "faster_coco_eval"},
    "lucid_models": {"lightning", "pycocotools", "faster_coco_eval"},
}


def _imported_top_levels(source: Path) -> set[str]:
    tree = ast.parse(source.read_text(), filename=str(source))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def _sources(package: str) -> list[Path]:
    member = "lucid-" + package.removeprefix("lucid_")
    return sorted((ROOT / "packages" / member / "src" / package).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_members_import_only_packages_below_them(package: str) -> None:
    sources = _sources(package)
    assert sources, f"no sources found for {package}"
    offending = {
        f"{src.relative_to(ROOT)} imports {name}"
        for src in sources
        for name in _imported_top_levels(src)
        if (name in LUCID and name != package and name not in ALLOWED[package])
        or name in THIRD_PARTY_FORBIDDEN.get(package, set())
    }
    assert not offending, sorted(offending)


def test_import_lucid_capture_pulls_in_no_lightning_nor_other_lucid_package() -> None:
    code = (
        "import sys, lucid_capture\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'lightning', 'pytorch_lightning', 'lucid_kernels', 'lucid_models', 'lucid_train'})\n"
        "print(','.join(bad))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "", f"import lucid_capture also imported: {out}"


def test_arrow_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from lucid_train.cli import main\nimport lightning.pytorch as pl\n")
    assert _imported_top_levels(bad) == {"lucid_train", "lightning"}
