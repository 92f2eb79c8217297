"""The goldens checksum manifest: every file under goldens/ is frozen by its sha256.

A golden moves only in a commit that says why; this manifest makes any move visible. After
regenerating a golden with the command written beside it, re-seal with:

    PYTHONPATH=tests/support python -m lucid_testing.goldens --write
"""

from __future__ import annotations

import argparse
import hashlib
from pathlib import Path

GOLDENS = Path(__file__).resolve().parents[3] / "goldens"
MANIFEST_NAME = "MANIFEST.sha256"
UNSEALED = {MANIFEST_NAME, "README.md"}


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def golden_files(root: Path) -> list[Path]:
    """Every sealed file under ``root``, sorted, as paths relative to it."""
    return sorted(
        p.relative_to(root)
        for p in root.rglob("*")
        if p.is_file() and p.name not in UNSEALED and "__pycache__" not in p.parts
    )


def read_manifest(root: Path) -> dict[str, str]:
    entries: dict[str, str] = {}
    manifest = root / MANIFEST_NAME
    if not manifest.exists():
        return entries
    for lineno, line in enumerate(manifest.read_text().splitlines(), 1):
        if not line.strip():
            continue
        digest, sep, name = line.partition("  ")
        if not sep or len(digest) != 64:
            raise ValueError(f"{manifest}:{lineno}: expected '<sha256>  <path>', got {line!r}")
        entries[name] = digest
    return entries


def verify(root: Path) -> list[str]:
    """Problems with the manifest under ``root``: changed, missing or unlisted files."""
    listed = read_manifest(root)
    present = {str(p) for p in golden_files(root)}
    problems = [
        f"{n}: listed in {MANIFEST_NAME} but missing" for n in sorted(set(listed) - present)
    ]
    problems += [f"{n}: not sealed in {MANIFEST_NAME}" for n in sorted(present - set(listed))]
    problems += [
        f"{n}: sha256 changed (regenerate with its command, then re-seal and say why)"
        for n in sorted(present & set(listed))
        if _digest(root / n) != listed[n]
    ]
    return problems


def write(root: Path) -> None:
    lines = [f"{_digest(root / p)}  {p}" for p in golden_files(root)]
    (root / MANIFEST_NAME).write_text("".join(line + "\n" for line in lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="re-seal the manifest")
    args = parser.parse_args()
    if args.write:
        write(GOLDENS)
    problems = verify(GOLDENS)
    print("\n".join(problems) or f"{len(read_manifest(GOLDENS))} goldens sealed and intact")
    raise SystemExit(1 if problems else 0)


if __name__ == "__main__":
    main()
