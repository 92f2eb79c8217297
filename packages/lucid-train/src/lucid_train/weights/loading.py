"""Starting a run from weights: a lucid checkpoint, a converted weights file, or the authors'
released ``yolo26{n,s,m,l,x}[-seg|-pose|-obb].pt``.

`load_weights` fills a freshly built task module (`lucid_train.tasks.module.YOLOModule`) from a file
and returns a `WeightsReport`, whose `WeightsReport.summary` is the one line a fit prints. The
rules (assumptions.md T80, T81):

* Nothing from the file runs: lucid files are read with ``torch.load(weights_only=True)``
  (`lucid_train.weights.checkpoint_file.load_checkpoint_file`), the authors' with the inert
  unpickler (`lucid_train.weights.authors_pickle`); their names are mapped by
  `lucid_train.weights.authors_names`.
* The task must be the run's; a known scale must be the run's too.
* Every tensor of the network (and of the pose flow) must be in the file with our shape; the
  first that is missing or of another shape is named in the error, in both spellings.
* The class branches (both heads' ``cls`` and the segment semantic head) are left at their fresh
  initialisation when the file's class count differs from the run's; the keypoint branches
  likewise when the keypoint count differs. Fresh and ignored tensors are counted in the summary.
* From a lucid checkpoint the EMA weights are taken when it has them (what it was validated
  with, assumptions.md T47); training state (optimizer, ProgLoss weight, epoch) is not.

The one-time conversion of an authors' file into a lucid weights file builds a module, so it
lives above the modules (`lucid_train.tasks.restore.convert_weights`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from lucid_train.model_spec import a_task, model_name, parse_model
from lucid_train.weights.authors_names import authors_key, lucid_key
from lucid_train.weights.authors_pickle import (
    AuthorsCheckpoint,
    AuthorsFormatError,
    is_authors_checkpoint,
    read_authors_checkpoint,
)
from lucid_train.weights.checkpoint_file import (
    CheckpointError,
    CorruptCheckpointError,
    load_checkpoint_file,
    missing_file,
)

__all__ = [
    "LUCID_WEIGHTS_KEY",
    "WeightsError",
    "WeightsReport",
    "load_weights",
    "loadable_keys",
    "read_authors_file",
]

LUCID_WEIGHTS_KEY = "lucid_weights"  # the metadata record of a converted weights file
WEIGHT_PREFIXES = ("model.", "flow.")  # the network and the pose flow: what weights carry
CLASS_BRANCHES = ("model.head.one2many.cls", "model.head.one2one.cls", "model.head.semantic")
KEYPOINT_BRANCHES = tuple(
    f"model.head.{branch}.{part}"
    for branch in ("one2many", "one2one")
    for part in ("keypoint_trunk", "keypoints", "keypoint_sigma")
)


class WeightsError(CheckpointError):
    """Weights that cannot start this run; one line naming the file, what and the fix."""


@dataclass(frozen=True)
class _Source:
    state: dict[str, Tensor]  # our keys
    ignored: tuple[str, ...]  # the file's keys without a place here (its own spelling)
    origin: str  # "Ultralytics 8.4.190 yolo26n" / "lucid checkpoint yolo26n" ...
    model: str | None
    num_classes: int | None
    num_keypoints: int | None
    theirs: dict[str, str] = field(default_factory=dict)  # our key -> the file's spelling


@dataclass(frozen=True)
class WeightsReport:
    """What `load_weights` did.

    Attributes:
        path: the file.
        origin: what it is (``Ultralytics 8.4.190 yolo26n``, ``lucid checkpoint yolo26n``...).
        loaded: our keys filled from the file.
        fresh: our keys left at their initialisation, and why (empty reason when none).
        ignored: the file's keys with no place in the run.
        values: numbers loaded.
    """

    path: Path
    origin: str
    loaded: tuple[str, ...]
    fresh: tuple[str, ...]
    fresh_reason: str
    ignored: tuple[str, ...]
    values: int

    def summary(self) -> str:
        """One line: loaded, fresh and ignored tensors."""
        total = len(self.loaded) + len(self.fresh)
        line = (
            f"weights: loaded {len(self.loaded)}/{total} tensors ({self.values / 1e6:.2f}M "
            f"values) from {self.path} ({self.origin}); fresh: "
        )
        line += f"{len(self.fresh)} ({self.fresh_reason})" if self.fresh else "none"
        if self.ignored:
            shown = ", ".join(self.ignored[:3]) + (", ..." if len(self.ignored) > 3 else "")
            line += f"; ignored {len(self.ignored)} from the file ({shown})"
        return line


def loadable_keys(module: torch.nn.Module) -> dict[str, Tensor]:
    """The module's state that weights carry: the network and the pose flow (not the ProgLoss
    weight or other training state)."""
    return {k: v for k, v in module.state_dict().items() if k.startswith(WEIGHT_PREFIXES)}


def _shape(t: Tensor | torch.Size) -> str:
    return "x".join(map(str, t.shape if isinstance(t, Tensor) else t)) or "scalar"


def read_authors_file(path: Path) -> AuthorsCheckpoint:
    """The authors' checkpoint at ``path``, or a `WeightsError` naming the file and what in it
    this reader cannot use."""
    try:
        return read_authors_checkpoint(path)
    except AuthorsFormatError as err:
        raise WeightsError(
            f"weights {path}: an Ultralytics checkpoint, but {err}; lucid reads the yolo26*.pt "
            "files Ultralytics 8.4 writes (its trainer's best.pt / last.pt, or YOLO.save)"
        ) from None


def _read_source(path: Path, ours: frozenset[str]) -> _Source:
    if is_authors_checkpoint(path):
        ck = read_authors_file(path)
        state: dict[str, Tensor] = {}
        theirs: dict[str, str] = {}
        unplaced = []
        for key, value in ck.state_dict.items():
            mine = lucid_key(key, ours)
            if mine is None:
                unplaced.append(key)
            else:
                state[mine] = value
                theirs[mine] = key
        version = f"Ultralytics {ck.version}" if ck.version else "Ultralytics"
        kpt = ck.kpt_shape[0] if ck.kpt_shape else None
        return _Source(
            state,
            tuple(unplaced),
            f"{version} {ck.model_name or ck.model_class}",
            ck.model_name,
            ck.num_classes,
            kpt,
            theirs,
        )
    try:
        ckpt = load_checkpoint_file(path)
    except CheckpointError as err:
        # what the reader found, without its advice on resuming (a resume's, not a weights file's)
        found = (
            err.finding
            if isinstance(err, CorruptCheckpointError)
            else str(err).removeprefix(f"checkpoint {path}").lstrip(": ")
        )
        raise WeightsError(
            f"weights {path}: neither a lucid checkpoint or weights file nor an Ultralytics "
            f"checkpoint ({found}); pass a last.ckpt/best.ckpt of `lucid fit`, a converted "
            "file (python -m lucid_train.weights) or a yolo26*.pt"
        ) from None
    if isinstance(ckpt, dict) and isinstance(ckpt.get(LUCID_WEIGHTS_KEY), dict):
        meta = ckpt[LUCID_WEIGHTS_KEY]
        origin = f"lucid weights {meta.get('model')}, converted from {meta.get('source')}"
        hp = meta
        state = dict(ckpt["state_dict"])
    elif isinstance(ckpt, dict) and "model" in (ckpt.get("hyper_parameters") or {}):
        from lucid_train.optim import ema_state_dict

        hp = dict(ckpt["hyper_parameters"])
        origin = f"lucid checkpoint {hp['model']}"
        averaged = ema_state_dict(ckpt)
        origin += ", EMA weights" if averaged is not None else ""
        state = dict(averaged if averaged is not None else ckpt["state_dict"])
    else:
        raise WeightsError(
            f"weights {path}: a torch file, but neither a lucid checkpoint (no hyper_parameters "
            "with a model) nor a lucid weights file nor an Ultralytics checkpoint; pass a "
            "last.ckpt/best.ckpt of `lucid fit`, a converted file or a yolo26*.pt"
        )
    ignored = tuple(k for k in state if k.startswith(WEIGHT_PREFIXES) and k not in ours)
    state = {k: v for k, v in state.items() if k.startswith(WEIGHT_PREFIXES) and k in ours}
    return _Source(
        state, ignored, origin, hp.get("model"), hp.get("num_classes"), hp.get("num_keypoints")
    )


def _in(key: str, prefixes: tuple[str, ...]) -> bool:
    return any(key == p or key.startswith(p + ".") for p in prefixes)


def load_weights(module: Any, path: str | Path) -> WeightsReport:
    """Fill ``module`` (a freshly built task module) from the weights at ``path``.

    Raises:
        FileNotFoundError: no such file.
        WeightsError: unreadable or unsafe file, another task or scale, a tensor missing or of
            another shape (the first one is named).
    """
    p = Path(path)
    if not p.is_file():
        raise missing_file("weights", p)
    target = loadable_keys(module)
    src = _read_source(p, frozenset(target))
    here = model_name(parse_model(module.hparams["model"]).scale, module.task)
    if src.model is not None:
        theirs = parse_model(src.model)
        if theirs.task != module.task:
            raise WeightsError(
                f"weights {p} are {a_task(theirs.task)} model ({src.model}), but this run trains "
                f"{module.task} ({here}); pass --model {theirs.name} or {module.task} weights"
            )
        if theirs.scale != parse_model(here).scale:
            raise WeightsError(
                f"weights {p} are {src.model}, but this run builds {here}; pass --model "
                f"{theirs.name} or weights of {here}"
            )
    fresh_groups: tuple[str, ...] = ()
    reasons = []
    nc = module.hparams["num_classes"]
    if src.num_classes is not None and src.num_classes != nc:
        fresh_groups += CLASS_BRANCHES
        reasons.append(f"the class branches: {nc} classes here, {src.num_classes} in the file")
    kpt = module.hparams.get("num_keypoints")
    if module.task == "pose" and src.num_keypoints is not None and src.num_keypoints != kpt:
        fresh_groups += KEYPOINT_BRANCHES
        reasons.append(
            f"the keypoint branches: {kpt} keypoints here, {src.num_keypoints} in the file"
        )
    loaded, fresh = [], []
    for key, mine in target.items():
        if _in(key, fresh_groups):
            fresh.append(key)
            continue
        spelled = f"{key} ({src.theirs[key]} in the file)" if key in src.theirs else key
        if key not in src.state:
            name = authors_key(key) if src.theirs else None
            also = f" (the authors' {name})" if name else ""
            raise WeightsError(
                f"weights {p} ({src.origin}) have no {key}{also}, which {here} needs; pass "
                f"weights of {here}"
            )
        value = src.state[key]
        if value.shape != mine.shape:
            raise WeightsError(
                f"weights {p} ({src.origin}): {spelled} is {_shape(value)} in the file but "
                f"{_shape(mine)} in {here} (first mismatch); pass weights of {here}"
            )
        loaded.append(key)
    with torch.no_grad():
        for key in loaded:
            target[key].copy_(src.state[key].to(target[key].dtype))
    return WeightsReport(
        path=p,
        origin=src.origin,
        loaded=tuple(loaded),
        fresh=tuple(fresh),
        fresh_reason="; ".join(reasons),
        ignored=src.ignored,
        values=sum(target[k].numel() for k in loaded),
    )
