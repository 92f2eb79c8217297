"""The private Lightning attributes lucid relies on (`lucid_train.tasks.lightning_privates`)
exist in the installed versions, and no lucid class overrides or reads an unlisted one."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import inspect
import re
import textwrap
from pathlib import Path

import lightning as L
import pytest
from lightning.pytorch.cli import LightningCLI

import lucid_train
from lucid_train.cli.app import LucidCLI
from lucid_train.tasks.lightning_privates import CHECKED_ON, PRIVATES, Private
from lucid_train.tasks.module import YOLOModule
from lucid_train.tasks.stepping import SteppingModule

PACKAGE = Path(lucid_train.__file__).parent
# lucid's subclasses of Lightning classes, and the Lightning class each extends.
SUBCLASSES: tuple[tuple[type, type], ...] = (
    (LucidCLI, LightningCLI),
    (YOLOModule, L.LightningModule),
    (SteppingModule, L.LightningModule),
)


def _owner(private: Private) -> type:
    module, _, name = private.owner.partition(":")
    owner = getattr(importlib.import_module(module), name)
    assert isinstance(owner, type)
    return owner


def _sets_on_self(cls: type, name: str) -> bool:
    """Whether ``cls`` or a class it derives from assigns ``self.<name>`` in its own source."""
    pattern = re.compile(rf"\bself\.{re.escape(name)}\b\s*(:[^=\n]*)?=")
    for klass in cls.__mro__:
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):  # a built-in class
            continue
        if pattern.search(source):
            return True
    return False


def _versions() -> str:
    return ", ".join(f"{p} {importlib.metadata.version(p)}" for p in CHECKED_ON)


@pytest.mark.parametrize("private", PRIVATES, ids=lambda p: f"{p.owner}.{p.name}")
def test_the_installed_libraries_still_have_each_listed_private(private: Private) -> None:
    owner = _owner(private)
    found = (
        _sets_on_self(owner, private.name) if private.on_instance else hasattr(owner, private.name)
    )
    assert found, (
        f"{private.owner} has no {private.name} in the installed {_versions()} (checked on "
        f"{CHECKED_ON}); lucid_train.tasks.lightning_privates lists it for {private.where}: "
        f"{private.why}"
    )


@pytest.mark.parametrize("private", PRIVATES, ids=lambda p: f"{p.owner}.{p.name}")
def test_each_listed_private_is_still_used_where_the_list_says(private: Private) -> None:
    module = importlib.import_module(private.where)
    assert module.__file__ is not None
    source = Path(module.__file__).read_text()
    assert re.search(rf"\b{re.escape(private.name)}\b", source), (
        f"{private.where} no longer uses {private.name}: take it out of the list"
    )


def _lightning_privates_touched(cls: type, base: type) -> set[str]:
    """The private names of ``base`` that ``cls`` (its own body) defines or reads on ``self``."""
    own = textwrap.dedent(inspect.getsource(cls))
    names = {n for n in vars(cls) if n.startswith("_") and not n.startswith("__")}
    for node in ast.walk(ast.parse(own)):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id == "self"
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            names.add(node.attr)
    return {n for n in names if hasattr(base, n) or _sets_on_self(base, n)}


@pytest.mark.parametrize(("cls", "base"), SUBCLASSES, ids=lambda c: c.__name__)
def test_every_lightning_private_a_lucid_class_touches_is_listed(cls: type, base: type) -> None:
    listed = {p.name for p in PRIVATES}
    unlisted = sorted(_lightning_privates_touched(cls, base) - listed)
    assert not unlisted, (
        f"{cls.__name__} touches {base.__name__}'s private {unlisted}: list them in "
        "lucid_train.tasks.lightning_privates"
    )


def test_the_check_sees_an_unlisted_private() -> None:
    class Sneaky(LightningCLI):  # an override of a private the list does not hold
        def _instantiate_trainer(self, config: object, callbacks: object) -> None:
            return None

    assert "_instantiate_trainer" in _lightning_privates_touched(Sneaky, LightningCLI)
    assert not _sets_on_self(LightningCLI, "_no_such_attribute")
