"""Classes given by class path (``--trainer.logger WandbLogger``, ``--trainer.callbacks+=...``)
whose package is not installed: one line naming the flag, the class, the package and the fix.

jsonargparse builds them after parsing, and reports a failure as three chained tracebacks
(Lightning's ``ModuleNotFoundError``, "Problem with given class_path", "Does not validate
against any of the Union subtypes"); the fault is only a missing ``pip install``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from jsonargparse import Namespace
from lightning.pytorch.cli import LightningArgumentParser

from lucid_train.cli.command_errors import error_chain
from lucid_train.errors import LucidError

__all__ = ["MissingPackageError", "instantiate_given"]

# jsonargparse's report of a class it could not build, and the missing package in it: Lightning's
# RequirementCache ("Requirement 'wandb>=0.12.10' not met") or an import ("No module named 'x'")
_MISSING = re.compile(
    r"Problem with given class_path '(?P<path>[^']+)':\s*"
    r"(?:Requirement '(?P<need>[^']+)' not met|No module named '(?P<module>[^']+)')"
)
_NAME = re.compile(r"[A-Za-z0-9._-]+")


class MissingPackageError(LucidError, ModuleNotFoundError):
    """A class given by class path needs a package that is not installed."""


def instantiate_given(parser: LightningArgumentParser, config: Namespace) -> Namespace:
    """``parser.instantiate(config)``, a class whose package is missing refused in one line.

    Raises:
        MissingPackageError: a class given by class path cannot be built without a package.
    """
    try:
        built: Namespace = parser.instantiate(config)
    except ValueError as err:
        # one class of a list is reported inside the union's text, not as a chained error
        found = next((m for e in error_chain(err) if (m := _MISSING.search(str(e)))), None)
        if found is None:
            raise
        raise MissingPackageError(_line(config, found)) from None
    return built


def _line(config: Namespace, found: re.Match[str]) -> str:
    class_path = found["path"]
    flag = _flag_of(config, class_path) or "its flag"
    name = class_path.rsplit(".", 1)[-1]
    if found["need"]:  # a distribution's requirement: pip's name
        need = found["need"]
        package = (_NAME.match(need) or [need])[0]  # "wandb>=0.12.10" -> "wandb"
        what = f"the package {package}" + (f" ({need})" if need != package else "")
        fix = f"pip install {package}"
    else:  # an import: the module's name, which is most often its package's
        module = found["module"].split(".")[0]
        what, fix = f"the module {module}", f"pip install {module}"
    return (
        f"{flag} {name} ({class_path}) needs {what}, which is not installed; install it "
        f"({fix}) or leave out {flag}"
    )


def _flag_of(config: Namespace, class_path: str) -> str:
    """The flag (``--trainer.logger``) whose value names ``class_path``, or ""."""
    for key, value in config.items():
        if class_path and class_path in _class_paths(value):
            # "fit.trainer.logger.class_path" -> "--trainer.logger"
            parts = key.split(".")[1:]
            return "--" + ".".join(parts[:-1] if parts[-1] == "class_path" else parts)
    return ""


def _class_paths(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _class_paths(item)
    elif isinstance(value, Namespace) and "class_path" in value:
        yield str(value["class_path"])
