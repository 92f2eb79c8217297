"""Flatten a call's arguments or outputs into their tensors and rebuild them around others.

Supports what models take and return: a tensor, tuples (named too), lists, dicts and
dataclasses, nested, with non-tensor leaves (``None``, numbers, strings) kept as constants.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import torch

Rebuild = Callable[[Iterator[torch.Tensor]], Any]


def flatten(tree: Any) -> tuple[list[torch.Tensor], Rebuild]:
    """Return the tensor leaves in order and a function that rebuilds the same structure."""
    leaves: list[torch.Tensor] = []
    rebuild = _flatten(tree, leaves)
    return leaves, rebuild


def unflatten(rebuild: Rebuild, leaves: list[torch.Tensor]) -> Any:
    it = iter(leaves)
    tree = rebuild(it)
    if next(it, None) is not None:
        raise ValueError("more tensors than the structure holds")
    return tree


def describe(tree: Any) -> str:
    """The structure of ``tree`` with its constants and a ``T`` for each tensor: two calls whose
    descriptions are equal rebuild the same way from their tensors."""
    if isinstance(tree, torch.Tensor):
        return "T"
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        fields = [f.name for f in dataclasses.fields(tree) if f.init]
        inner = ", ".join(f"{n}={describe(getattr(tree, n))}" for n in fields)
        return f"{type(tree).__qualname__}({inner})"
    if isinstance(tree, list | tuple):
        inner = ", ".join(describe(v) for v in tree)
        return f"{type(tree).__qualname__}[{inner}]"
    if isinstance(tree, dict):
        inner = ", ".join(f"{k!r}: {describe(v)}" for k, v in tree.items())
        return f"{type(tree).__qualname__}{{{inner}}}"
    return f"{type(tree).__qualname__}:{tree!r}"


def _flatten(tree: Any, leaves: list[torch.Tensor]) -> Rebuild:
    if isinstance(tree, torch.Tensor):
        leaves.append(tree)
        return lambda it: next(it)
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        cls = type(tree)
        names = [f.name for f in dataclasses.fields(tree) if f.init]
        parts = [_flatten(getattr(tree, n), leaves) for n in names]
        return lambda it: cls(**{n: p(it) for n, p in zip(names, parts, strict=True)})
    if isinstance(tree, tuple) and hasattr(tree, "_fields"):  # a namedtuple
        ntype = type(tree)
        parts = [_flatten(v, leaves) for v in tree]
        return lambda it: ntype(*(p(it) for p in parts))
    if isinstance(tree, list | tuple):
        seq_type = type(tree)
        parts = [_flatten(v, leaves) for v in tree]
        return lambda it: seq_type(p(it) for p in parts)
    if isinstance(tree, dict):
        dict_type = type(tree)
        keyed = [(k, _flatten(v, leaves)) for k, v in tree.items()]
        return lambda it: dict_type((k, p(it)) for k, p in keyed)
    return lambda it: tree
