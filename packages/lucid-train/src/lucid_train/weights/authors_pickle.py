"""Reading the authors' released ``.pt`` files without running code from them.

An Ultralytics checkpoint is a ``torch.save`` zip archive (``<name>/data.pkl`` plus one record
per storage under ``<name>/data/``) whose pickle rebuilds their model *objects*: ``{"model":
DetectionModel, "train_args": {...}, ...}``. ``torch.load(weights_only=True)`` refuses it (it
names ``ultralytics.nn.tasks.DetectionModel``), and ``weights_only=False`` would import
Ultralytics and run whatever the pickle asks for.

`read_authors_checkpoint` unpickles ``data.pkl`` with `InertUnpickler`, whose ``find_class``
never imports anything: each class the pickle names becomes an inert stand-in (`Inert`) that only
records the arguments and state the pickle hands it. The only callables it gives out are its own
tensor rebuilders (in place of ``torch._utils._rebuild_tensor_v2`` / ``_rebuild_parameter``),
``collections.OrderedDict``, ``set`` and ``frozenset``; storages are read from the archive's
records as raw bytes of the dtype the pickle names. The module tree is then walked the way
``nn.Module.state_dict`` walks it (``_parameters``, then ``_buffers`` not marked
non-persistent, then ``_modules``), giving the authors' keys and tensors.

Pitfalls named: pickles of protocol 2 spell builtins ``__builtin__``; numpy scalars in
``train_metrics`` arrive as stand-ins (never needed); a file saved before torch 1.6 (not a
zip) is refused, as is a big-endian one.
"""

from __future__ import annotations

import collections
import io
import pickle
import pickletools
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import Tensor

from lucid_train.errors import LucidError

__all__ = [
    "AuthorsCheckpoint",
    "Inert",
    "InertUnpickler",
    "is_authors_checkpoint",
    "pickle_globals",
    "read_authors_checkpoint",
]

STORAGE_DTYPES: dict[str, torch.dtype] = {
    "HalfStorage": torch.float16,
    "FloatStorage": torch.float32,
    "DoubleStorage": torch.float64,
    "BFloat16Storage": torch.bfloat16,
    "LongStorage": torch.int64,
    "IntStorage": torch.int32,
    "ShortStorage": torch.int16,
    "CharStorage": torch.int8,
    "ByteStorage": torch.uint8,
    "BoolStorage": torch.bool,
    "UntypedStorage": torch.uint8,
}
# The model classes of the authors' tasks (``ultralytics.nn.tasks``).
TASK_OF_CLASS = {
    "DetectionModel": "detect",
    "SegmentationModel": "segment",
    "PoseModel": "pose",
    "OBBModel": "obb",
}


class AuthorsFormatError(LucidError, ValueError):
    """The file is not a checkpoint this reader understands (one line: what and why)."""


class Inert:
    """A stand-in for a class the pickle names: it records, and runs nothing.

    Attributes:
        qualified: ``module.name`` the pickle asked for (a class attribute of each stand-in).
        args: what the pickle passed when building it (``NEWOBJ`` or ``REDUCE``).
        state: what it passed to ``BUILD`` (a module's ``__dict__``), None if nothing.
    """

    qualified: ClassVar[str] = "?"
    args: tuple[Any, ...]
    state: Any

    def __new__(cls, *args: Any, **kwargs: Any) -> Inert:
        obj = object.__new__(cls)
        obj.args = args
        obj.state = None
        return obj

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def attributes(self) -> dict[str, Any]:
        """The recorded ``__dict__`` (a ``(dict, slots)`` state's dict part), else ``{}``."""
        state = self.state
        if isinstance(state, tuple) and len(state) == 2:
            state = state[0]
        return state if isinstance(state, dict) else {}


@dataclass(frozen=True)
class _StorageType:
    dtype: torch.dtype


def _rebuild_tensor(
    storage: Tensor, offset: int, size: Any, stride: Any, *_: Any, **__: Any
) -> Tensor:
    """``torch._utils._rebuild_tensor_v2``'s job on a flat tensor of the storage's bytes."""
    if not isinstance(storage, Tensor):
        raise pickle.UnpicklingError("a tensor was rebuilt from something that is no storage")
    return torch.as_strided(storage, tuple(size), tuple(stride), int(offset))


def _rebuild_parameter(data: Any, *_: Any) -> Any:
    """``torch._utils._rebuild_parameter(_with_state)``: the tensor itself is what we keep."""
    return data


class InertUnpickler(pickle.Unpickler):
    """Unpickles a ``torch.save`` archive's ``data.pkl`` without importing or running anything
    it names (see the module docstring).

    Args:
        data: the pickle's bytes.
        archive: the open zip archive holding the storages.
        prefix: the archive's top folder (``<name>/``).
    """

    SAFE: ClassVar[dict[tuple[str, str], Any]] = {
        ("collections", "OrderedDict"): collections.OrderedDict,
        ("builtins", "set"): set,
        ("builtins", "frozenset"): frozenset,
        ("__builtin__", "set"): set,
        ("__builtin__", "frozenset"): frozenset,
        ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor,
        ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
        ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
        ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter,
    }

    def __init__(self, data: bytes, archive: zipfile.ZipFile, prefix: str) -> None:
        super().__init__(io.BytesIO(data))
        self.archive = archive
        self.prefix = prefix
        self.storages: dict[str, Tensor] = {}
        self.stand_ins: dict[str, type[Inert]] = {}

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self.SAFE:
            return self.SAFE[module, name]
        if module == "torch" and name in STORAGE_DTYPES:
            return _StorageType(STORAGE_DTYPES[name])
        qualified = f"{module}.{name}"
        if qualified not in self.stand_ins:
            self.stand_ins[qualified] = type(name, (Inert,), {"qualified": qualified})
        return self.stand_ins[qualified]

    def persistent_load(self, pid: Any) -> Tensor:
        if not (isinstance(pid, tuple) and len(pid) >= 3 and pid[0] == "storage"):
            raise pickle.UnpicklingError(f"unknown persistent id {pid!r:.60}")
        kind, key = pid[1], str(pid[2])
        if not isinstance(kind, _StorageType):
            raise pickle.UnpicklingError(f"storage of an unknown type ({kind!r:.60})")
        if key not in self.storages:
            raw = bytearray(self.archive.read(f"{self.prefix}data/{key}"))
            self.storages[key] = (
                torch.frombuffer(raw, dtype=kind.dtype) if raw else torch.empty(0, dtype=kind.dtype)
            )
        return self.storages[key]


@dataclass(frozen=True)
class AuthorsCheckpoint:
    """What an authors' checkpoint holds that lucid reads.

    Attributes:
        path: the file.
        state_dict: the model's tensors by the authors' keys, in ``state_dict`` order.
        model_class: ``ultralytics.nn.tasks.DetectionModel`` and the like.
        task: ``detect`` / ``segment`` / ``pose`` / ``obb`` (None if unknown).
        scale: ``n`` / ``s`` / ``m`` / ``l`` / ``x`` (None if unknown).
        num_classes: ``nc`` of the build.
        class_names: the model's ``names``, in label order.
        kpt_shape: ``[K, 3]`` for pose.
        version: the Ultralytics version that wrote it.
        globals_named: every ``module.name`` the pickle asked for (none was imported).
    """

    path: Path
    state_dict: dict[str, Tensor]
    model_class: str
    task: str | None
    scale: str | None
    num_classes: int | None
    class_names: tuple[str, ...]
    kpt_shape: tuple[int, ...] | None
    version: str | None
    globals_named: tuple[str, ...] = field(default=())

    @property
    def model_name(self) -> str | None:
        """``yolo26n-seg`` and the like, when scale and task are known."""
        if self.scale is None or self.task is None:
            return None
        suffix = {"detect": "", "segment": "-seg", "pose": "-pose", "obb": "-obb"}[self.task]
        return f"yolo26{self.scale}{suffix}"


def _archive_prefix(archive: zipfile.ZipFile) -> str:
    names = [n for n in archive.namelist() if n.endswith("data.pkl")]
    if not names:
        raise AuthorsFormatError("a zip archive without data.pkl, so not written by torch.save")
    return names[0][: -len("data.pkl")]


def pickle_globals(data: bytes) -> set[str]:
    """``module.name`` of every global a pickle names, read from its opcodes (nothing is
    unpickled). For ``STACK_GLOBAL`` (protocol 4) the last two strings pushed are taken; a name
    fetched from the memo is missed there, which ``torch.save``'s protocol 2 (``GLOBAL``, name
    inline) never needs."""
    found: set[str] = set()
    strings: list[str] = []
    for op, arg, _ in pickletools.genops(data):
        if op.name == "GLOBAL" and isinstance(arg, str):
            found.add(arg.replace(" ", "."))
        elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
            found.add(f"{strings[-2]}.{strings[-1]}")
        elif isinstance(arg, str):
            strings.append(arg)
    return found


def is_authors_checkpoint(path: Path) -> bool:
    """Whether ``path`` is a torch zip archive whose pickle names an ``ultralytics`` global
    (read from the opcodes, nothing unpickled)."""
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as archive:
        try:
            data = archive.read(_archive_prefix(archive) + "data.pkl")
        except AuthorsFormatError:
            return False
    try:
        named = pickle_globals(data)
    except Exception:  # not a pickle at all: not theirs (the lucid reader reports the damage)
        return False
    return any(g.startswith("ultralytics.") for g in named)


def _walk(node: Any, prefix: str, out: dict[str, Tensor]) -> None:
    """``nn.Module.state_dict`` order over the recorded module tree."""
    attrs = node.attributes() if isinstance(node, Inert) else {}
    for name, value in (attrs.get("_parameters") or {}).items():
        if isinstance(value, Tensor):
            out[prefix + name] = value
    skip = attrs.get("_non_persistent_buffers_set") or set()
    for name, value in (attrs.get("_buffers") or {}).items():
        if isinstance(value, Tensor) and name not in skip:
            out[prefix + name] = value
    for name, child in (attrs.get("_modules") or {}).items():
        if child is not None:
            _walk(child, f"{prefix}{name}.", out)


def read_authors_checkpoint(path: str | Path) -> AuthorsCheckpoint:
    """Read the model of an Ultralytics ``.pt`` (the EMA if the file still holds one, as their
    loader does, else ``model``) without running code from it.

    Raises:
        AuthorsFormatError: not a torch zip archive, big-endian, not a pickle this reader can
            walk, or without a model.
    """
    p = Path(path)
    if not zipfile.is_zipfile(p):
        raise AuthorsFormatError(
            "not a torch zip archive (torch.save since torch 1.6); load it once with the "
            "Ultralytics release that wrote it and save it again"
        )
    with zipfile.ZipFile(p) as archive:
        prefix = _archive_prefix(archive)
        order = f"{prefix}byteorder"
        if order in archive.namelist() and archive.read(order).strip() != b"little":
            raise AuthorsFormatError("a big-endian archive; lucid reads little-endian ones")
        unpickler = InertUnpickler(archive.read(f"{prefix}data.pkl"), archive, prefix)
        try:
            top = unpickler.load()
        except Exception as err:  # a damaged or foreign pickle: one line, no traceback
            raise AuthorsFormatError(
                f"its pickle does not read ({type(err).__name__}: {err})"
            ) from None
    if not isinstance(top, dict):
        raise AuthorsFormatError(f"its pickle holds a {type(top).__name__}, not a checkpoint dict")
    net = top.get("ema") or top.get("model")
    if not isinstance(net, Inert):
        raise AuthorsFormatError("the checkpoint holds no model under 'ema' or 'model'")
    state: dict[str, Tensor] = {}
    _walk(net, "", state)
    if not state:
        raise AuthorsFormatError(f"its model ({net.qualified}) holds no tensors")
    attrs = net.attributes()
    found = attrs.get("yaml")
    yaml: dict[str, Any] = found if isinstance(found, dict) else {}
    cls_name = net.qualified.rsplit(".", 1)[-1]
    task = attrs.get("task") if isinstance(attrs.get("task"), str) else TASK_OF_CLASS.get(cls_name)
    names = attrs.get("names")
    class_names = (
        tuple(str(names[k]) for k in sorted(names)) if isinstance(names, dict) else tuple()
    )
    nc = yaml.get("nc")
    kpt = yaml.get("kpt_shape")
    version = top.get("version")
    return AuthorsCheckpoint(
        path=p,
        state_dict=state,
        model_class=net.qualified,
        task=task if task in TASK_OF_CLASS.values() else None,
        scale=yaml.get("scale") if isinstance(yaml.get("scale"), str) else None,
        num_classes=int(nc) if isinstance(nc, int) else None,
        class_names=class_names,
        kpt_shape=tuple(int(v) for v in kpt) if isinstance(kpt, list | tuple) else None,
        version=version if isinstance(version, str) else None,
        globals_named=tuple(sorted(unpickler.stand_ins)),
    )
