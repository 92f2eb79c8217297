"""``--config`` files read before the parser does, so a broken one is named in its message.

jsonargparse reports a YAML syntax error with its line and column in ``"<unicode string>"``:
the text, not the file. `check_config_files` parses each file given to ``--config`` first and
refuses a broken one as ``path:line:column: ...``, and a top-level ``model: NAME`` (the command
line's shorthand, which the parser would read as the path of a config) with the form it takes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import yaml  # PyYAML: jsonargparse's own dependency, with which LightningCLI reads --config
from jsonargparse import get_loader

from lucid_train.errors import LucidError

__all__ = ["ConfigFileError", "check_config_files", "where_set"]


class ConfigFileError(LucidError, ValueError):
    """A ``--config`` file that is not readable YAML; the message names the file and line."""


def _config_paths(argv: Sequence[str]) -> list[Path]:
    paths = []
    for i, token in enumerate(argv):
        if token in ("--config", "-c") and i + 1 < len(argv):
            paths.append(argv[i + 1])
        elif token.startswith(("--config=", "-c=")):
            paths.append(token.partition("=")[2])
    # an inline document (``--config '{...}'``) is not a file: the parser reads it itself
    return [Path(p) for p in paths if "\n" not in p and not p.lstrip().startswith("{")]


def check_config_files(argv: Sequence[str]) -> None:
    """Refuse the first ``--config`` file that exists but is not valid YAML.

    Raises:
        ConfigFileError: naming the file, the line and column, and the problem.
    """
    for path in _config_paths(argv):
        if path.is_dir():
            raise ConfigFileError(
                f"--config {path}: a folder; pass a YAML file (--print_config writes one)"
            )
        if not path.is_file():
            if path.suffix.lower() in (".yaml", ".yml", ".json"):  # a file's name, not a document
                raise ConfigFileError(f"--config {path}: no such file")
            continue  # inline YAML: the parser reads it itself
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as err:
            raise ConfigFileError(f"--config {path}: not UTF-8 text ({err.reason})") from None
        try:
            config = get_loader("yaml")(text)  # the parser's own loader (PyYAML, through it)
        except Exception as err:  # a YAML error (the parser's message lacks the path)
            if type(err).__module__.split(".")[0] != "yaml":
                raise
            mark = getattr(err, "problem_mark", None)
            where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else f"{path}"
            problem = getattr(err, "problem", None) or str(err).splitlines()[0]
            raise ConfigFileError(f"--config {where}: not valid YAML ({problem})") from None
        if not isinstance(config, dict):  # empty, or a list or a string: no settings in it
            shown = "empty" if config is None else f"a YAML {type(config).__name__}"
            raise ConfigFileError(
                f"--config {path}: {shown}, not a mapping of settings (such as 'trainer:' with "
                "'max_epochs: 10' under it); `lucid fit --print_config` writes one to start from"
            )
        _check_duplicate_keys(path, text)
        _check_model_shorthand(path, config, text)


def _check_duplicate_keys(path: Path, text: str) -> None:
    """Refuse a key given twice in one mapping: YAML keeps the second without a word, so a
    second ``model:`` section dropped every setting of the first (as data.yaml refuses it)."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return  # the parser's loader read it: its own reading stands
    stack = [node]
    while stack:
        node = stack.pop()
        if isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            seen: set[str] = set()
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.value in seen:
                    raise ConfigFileError(
                        f"--config {path}:{key.start_mark.line + 1}: key '{key.value}' appears "
                        "twice in one mapping; YAML would keep only the second: merge the two"
                    )
                if isinstance(key, yaml.ScalarNode):
                    seen.add(key.value)
                stack.append(value)


def _check_model_shorthand(path: Path, config: object, text: str) -> None:
    """Refuse ``model: yolo26s`` at a config's top level, the command line's ``--model yolo26s``
    written as YAML: there ``model`` is the module's section, and the parser would try to read
    the name as a config file."""
    name = config.get("model") if isinstance(config, dict) else None
    if not isinstance(name, str) or not name:
        return
    if "/" in name or Path(name).suffix in (".yaml", ".yml", ".json") or Path(name).is_file():
        return  # the section in a file of its own, as jsonargparse reads one
    lines = text.splitlines()
    line = next((i + 1 for i, t in enumerate(lines) if re.match(r"model\s*:", t)), 1)
    raise ConfigFileError(
        f"--config {path}:{line}: 'model: {name}' names the model as the command line's "
        f"--model does; in a config it is the module's section: write 'model:' and under it "
        f"'  model: {name}'"
    )


def where_set(argv: Sequence[str], key: str) -> str | None:
    """``path:line`` of the last ``--config`` file in ``argv`` that sets the dotted ``key`` (the
    one the parser read it from: later files override earlier ones), or None. The line is that
    of the key's last part, found under its parent's line; a file that does not load is skipped
    (`check_config_files` has named it already)."""
    parts = key.split(".")
    found = None
    for path in _config_paths(argv):
        try:
            text = path.read_text(encoding="utf-8")
            config = get_loader("yaml")(text)
        except Exception:  # not a readable file: the parser's message stands
            continue
        node = config
        for part in parts:
            node = node.get(part, _MISSING) if isinstance(node, dict) else _MISSING
        if node is _MISSING:
            continue
        line, lines = 0, text.splitlines()
        for part in parts:  # each part's line after its parent's
            named = re.compile(rf"\s*{re.escape(part)}\s*:")
            line = next((i for i in range(line, len(lines)) if named.match(lines[i])), line)
        found = f"{path}:{line + 1}"
    return found


_MISSING = object()
