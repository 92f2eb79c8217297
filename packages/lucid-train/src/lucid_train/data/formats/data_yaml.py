"""A small, strict reader for the subset of YAML that YOLO ``data.yaml`` files use.

PyYAML is not a dependency of lucid, so this reads only what those files hold (assumptions.md
D10): top-level ``key: scalar``, ``key: [inline, list]``, a ``key:`` followed by an indented block
list (``- item``; also at the key's own column, as PyYAML writes it) or block mapping
(``0: name``), and block scalars (``key: |``, kept as text).
Scalars are ints, floats, ``true``/``false``/``null`` and plain or quoted strings, read as
PyYAML reads them (the authors' loader): a float needs its dot (``1e3`` and ``nan`` are text,
``1.5e+3`` and ``.inf`` numbers), and a double-quoted string takes YAML's backslash escapes;
``#`` starts a comment outside quotes. Anything else is refused with the file, the line and
what to change, rather than guessed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from lucid_train.data.formats.input_checks import read_text
from lucid_train.data.records import DataFormatError

_KEY = re.compile(r"^([A-Za-z0-9_\-]+)\s*:(.*)$")
# PyYAML's (YAML 1.1) implicit ints and floats, less its binary, hex and base-60 forms, which a
# data.yaml does not hold and which stay text here; leading zeros read as decimal (``08: cat``
# as a names key), where PyYAML reads octal.
_INT = re.compile(r"^[-+]?[0-9][0-9_]*$")
_FLOAT = re.compile(r"^(?:[-+]?[0-9][0-9_]*\.[0-9_]*|\.[0-9][0-9_]*)(?:[eE][-+][0-9]+)?$")
_INF, _NAN = (".inf", ".Inf", ".INF"), (".nan", ".NaN", ".NAN")
_ESCAPES = {
    "0": "\0", "a": "\a", "b": "\b", "t": "\t", "\t": "\t", "n": "\n", "v": "\v",
    "f": "\f", "r": "\r", "e": "\x1b", " ": " ", '"': '"', "/": "/", "\\": "\\",
    "N": "\x85", "_": "\xa0", "L": "\u2028", "P": "\u2029",
}  # fmt: skip
_HEX_DIGITS = {"x": 2, "u": 4, "U": 8}


def _closes(line: str, i: int, quote: str) -> bool:
    """Whether ``line[i]`` ends a string opened by ``quote``: a double quote escaped by an odd
    run of backslashes does not."""
    if line[i] != quote:
        return False
    run = len(line[:i]) - len(line[:i].rstrip("\\"))
    return quote == "'" or run % 2 == 0


def _opens(line: str, i: int) -> bool:
    """Whether the quote at ``line[i]`` opens a string: only where a value starts (the line's
    start, after ``:``, ``[``, ``{``, ``,``, or a list's ``- ``); inside a plain scalar, as in
    ``[it's, b]``, it is a character of the text, as YAML reads it."""
    before = line[:i].rstrip()
    if not before or before[-1] in ":[{,":
        return True
    return before[-1] == "-" and len(before) < i and before[:-1].strip() == ""


def _unescape(body: str, where: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            out.append(ch)
            i += 1
            continue
        code = body[i + 1 : i + 2]
        if code in _HEX_DIGITS:
            digits = body[i + 2 : i + 2 + _HEX_DIGITS[code]]
            if len(digits) != _HEX_DIGITS[code] or not all(
                c in "0123456789abcdefABCDEF" for c in digits
            ):
                raise DataFormatError(
                    f"{where}: '\\{code}' needs {_HEX_DIGITS[code]} hex digits in \"{body}\"; "
                    "write the character itself, or single-quote the string"
                )
            out.append(chr(int(digits, 16)))
            i += 2 + len(digits)
        elif code in _ESCAPES:
            out.append(_ESCAPES[code])
            i += 2
        else:
            raise DataFormatError(
                f"{where}: unknown escape '\\{code}' in \"{body}\"; write '\\\\' for a "
                "backslash (a Windows path), or single-quote the string"
            )
    return "".join(out)


def _strip_comment(line: str) -> str:
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            if _closes(line, i, quote):
                quote = ""
        elif ch in "'\"" and _opens(line, i):
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def _scalar(text: str, where: str) -> Any:
    s = text.strip()
    if not s or s in ("~", "null", "Null", "NULL"):
        return None
    if s[0] in "'\"":
        if len(s) < 2 or not _closes(s, len(s) - 1, s[0]):
            raise DataFormatError(f"{where}: unterminated quoted string {s!r}")
        if s[0] == "'":
            return s[1:-1].replace("''", "'")  # 'it''s' is it's
        return _unescape(s[1:-1], where)
    if s in ("true", "True", "TRUE"):
        return True
    if s in ("false", "False", "FALSE"):
        return False
    if s[0] in "[{":
        return _inline(s, where)
    if s[0] in "&*!|>%@`":
        raise DataFormatError(
            f"{where}: YAML feature {s[0]!r} is not supported in data.yaml; write a plain value"
        )
    if _INT.match(s):
        return int(s)
    if s.lstrip("+-") in _INF and len(s) - len(s.lstrip("+-")) <= 1:
        return float(s[0] + "inf") if s[0] in "+-" else float("inf")
    if s in _NAN:
        return float("nan")
    if _FLOAT.match(s):
        return float(s)
    return s


def _split_top(body: str, where: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth, quote = 0, ""
    for i, ch in enumerate(body):
        if quote:
            quote = "" if _closes(body, i, quote) else quote
        elif ch in "'\"" and _opens(body, i):
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    if depth or quote:
        raise DataFormatError(f"{where}: unbalanced brackets or quotes in {body!r}")
    parts.append("".join(cur))
    return [p for p in parts if p.strip()]


def _inline(s: str, where: str) -> Any:
    if s[0] == "[":
        if s[-1] != "]":
            raise DataFormatError(
                f"{where}: inline list must end with ']' on the same line, got {s!r}"
            )
        return [_scalar(p, where) for p in _split_top(s[1:-1], where)]
    if s[-1] != "}":
        raise DataFormatError(
            f"{where}: inline mapping must end with '}}' on the same line, got {s!r}"
        )
    out: dict[Any, Any] = {}
    for part in _split_top(s[1:-1], where):
        key, sep, value = part.partition(":")
        if not sep:
            raise DataFormatError(
                f"{where}: expected 'key: value' inside {{...}}, got {part.strip()!r}"
            )
        name = _scalar(key, where)
        if name in out:
            raise DataFormatError(f"{where}: key {name!r} appears twice inside {{...}}")
        out[name] = _scalar(value, where)
    return out


def parse_data_yaml(text: str, source: str = "data.yaml") -> dict[str, Any]:
    """Parse the data.yaml subset described in the module docstring into a dict."""
    lines = text.splitlines()
    out: dict[str, Any] = {}
    i = 0
    while i < len(lines):
        where = f"{source}:{i + 1}"
        raw = lines[i]
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise DataFormatError(f"{where}: tab indentation; indent with spaces")
        line = _strip_comment(raw)
        i += 1
        if not line.strip() or line.strip() == "---":
            continue
        if line[0].isspace():
            raise DataFormatError(
                f"{where}: unexpected indentation in {raw.strip()!r}; "
                "top-level keys start at column 1"
            )
        m = _KEY.match(line)
        if not m:
            raise DataFormatError(f"{where}: expected 'key: value', got {raw.strip()!r}")
        key, rest = m.group(1), m.group(2).strip()
        if key in out:
            raise DataFormatError(
                f"{where}: key {key!r} appears twice; the second would replace the first"
            )
        if rest in ("|", ">", "|-", ">-"):
            block = []
            while i < len(lines) and (not lines[i].strip() or lines[i][0].isspace()):
                block.append(lines[i].strip())
                i += 1
            out[key] = "\n".join(block).strip()
            continue
        if rest:
            out[key] = _scalar(rest, where)
            continue
        items: list[Any] = []
        mapping: dict[Any, Any] = {}
        first_line: dict[Any, int] = {}
        while i < len(lines):
            sub = _strip_comment(lines[i])
            if not sub.strip():
                i += 1
                continue
            if not sub[0].isspace() and not (sub.startswith("- ") or sub.rstrip() == "-"):
                break  # the next top-level key; a list may sit at the key's column (PyYAML's)
            sub_where = f"{source}:{i + 1}"
            body = sub.strip()
            if body.startswith("- ") or body == "-":
                if mapping:
                    raise DataFormatError(
                        f"{sub_where}: mixes list items and mapping entries under {key!r}"
                    )
                items.append(_scalar(body[1:], sub_where))
            else:
                k, sep, v = body.partition(":")
                if not sep or not k.strip():
                    raise DataFormatError(
                        f"{sub_where}: expected '- item' or 'key: value' under {key!r}, "
                        f"got {body!r}"
                    )
                if items:
                    raise DataFormatError(
                        f"{sub_where}: mixes list items and mapping entries under {key!r}"
                    )
                if not v.strip():
                    raise DataFormatError(
                        f"{sub_where}: nested blocks are not supported under {key!r}; "
                        "write the value inline"
                    )
                name = _scalar(k, sub_where)
                if name in mapping:
                    raise DataFormatError(
                        f"{sub_where}: key {name!r} appears twice under {key!r} (first on line "
                        f"{first_line[name]}); the second would replace the first"
                    )
                first_line[name] = i + 1
                mapping[name] = _scalar(v, sub_where)
            i += 1
        out[key] = mapping if mapping else (items if items else None)
    return out


def read_data_yaml(path: Path) -> dict[str, Any]:
    """Read and parse ``path`` (see `parse_data_yaml`)."""
    return parse_data_yaml(read_text(path), str(path))


def dump_data_yaml(values: dict[str, Any]) -> str:
    """Write a flat dict of scalars, lists and int-keyed ``names`` back in the same subset."""

    def fmt(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, list):
            return "[" + ", ".join(fmt(x) for x in v) + "]"
        if v is None:
            return "null"
        return "'" + str(v).replace("'", "''") + "'"  # read back by _scalar

    lines = []
    for key, v in values.items():
        if isinstance(v, str) and "\n" in v:
            lines.append(f"{key}: |")
            lines.extend(f"  {line}" for line in v.splitlines())
        elif isinstance(v, dict):
            lines.append(f"{key}:")
            lines.extend(f"  {k}: {fmt(x)}" for k, x in v.items())
        else:
            lines.append(f"{key}: {fmt(v)}")
    return "\n".join(lines) + "\n"
