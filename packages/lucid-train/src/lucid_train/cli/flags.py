"""The flags of each ``lucid`` verb, beside LightningCLI's own, and how their values read.

``--trainer.*`` come from `lightning.Trainer`'s signature with lucid's defaults
(`TRAINER_DEFAULTS`, ``precision`` and ``accumulate_grad_batches`` re-declared with ``auto``),
``--model.*`` from `lucid_train.tasks.module.YOLOModule`'s (fit), ``--data.*`` from
`lucid_train.data.LucidDataModule`'s; a fit links the model name to the data's task and scale.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any, Literal

import lightning as L
from lightning.pytorch.cli import LightningArgumentParser

from lucid_train.arg_types import BatchLimit, ImageSide
from lucid_train.data import LucidDataModule
from lucid_train.model_spec import parse_model
from lucid_train.run.trainer import GRADIENT_CLIP, LOG_INTERVAL
from lucid_train.tasks.module import SCHEMA_ARGUMENTS, YOLOModule

__all__ = [
    "BATCH_LIMITS",
    "DEFAULT_EPOCHS",
    "DEFAULT_IMG_SIZE",
    "EPILOGS",
    "TRAINER_DEFAULTS",
    "TRAINER_VERBS",
    "VERBS",
    "add_core_arguments",
    "add_verb_arguments",
    "is_model_name",
    "spelling_hints",
    "takes_bool",
    "task_of",
]

VERBS: dict[str, str] = {
    "fit": "Train a model; writes runs/<task>/<name>/.",
    "validate": "Score a checkpoint on the validation split (both decode paths).",
    "test": "Score a checkpoint on the test split (both decode paths).",
    "predict": "Predict images with a checkpoint; writes JSON and overlays.",
    "export": "Write the ONNX of a checkpoint's deploy view (end-to-end top-k).",
}
TRAINER_VERBS = ("fit", "validate", "test")
# The flags most runs set, after the full list (the authors' names in brackets).
EPILOGS: dict[str, str] = {
    "fit": (
        "most used: --model yolo26s-seg (scale and task) | --data.root PATH (a COCO, YOLO or "
        "DOTA set; none: the built-in one) | --trainer.max_epochs N [epochs] | "
        "--data.batch_size N [batch] | --data.img_size N [imgsz] | --data.num_workers N "
        "[workers] | --trainer.devices N [device] | --model.weights FILE (fine-tune) | "
        "--ckpt_path last.ckpt (resume) [resume] | --print_config (the whole config as YAML)"
    ),
}
# No 64-true: the images reach the network as float32 whatever the precision, so a double
# model stopped at its first convolution with torch's "Input type ... and weight type" traceback.
Precision = Literal["auto", "32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true"]
# The main job's defaults (assumptions.md T61): small canvas and a short run sized for a 2-core CPU.
DEFAULT_IMG_SIZE = 320
DEFAULT_EPOCHS = 6
# Trainer arguments whose lucid default differs from Lightning's (shown by --print_config).
TRAINER_DEFAULTS: dict[str, Any] = {
    "gradient_clip_val": GRADIENT_CLIP,  # the authors' max norm
    "use_distributed_sampler": False,  # the data module's EpochSampler shards itself
    "num_sanity_val_steps": 0,
    "log_every_n_steps": LOG_INTERVAL,
    "deterministic": False,  # as the command had it (Lightning's None leaves torch's setting)
    "devices": 1,  # as the authors' (device 0 unless told): data parallel only when asked (T85)
}
# Trainer arguments typed ``int | float``: a count of batches or a fraction. Re-declared, because
# typing's cache can hand Lightning's ``Optional[Union[int, float]]`` over as float-first, and then
# ``--trainer.limit_train_batches 1`` would read as 1.0, every batch.
BATCH_LIMITS = (
    "limit_train_batches",
    "limit_val_batches",
    "limit_test_batches",
    "limit_predict_batches",
)


def add_core_arguments(parser: LightningArgumentParser, verb: str) -> None:
    """The Trainer's, the module's (fit) and the data module's flags of ``verb``."""
    if verb not in TRAINER_VERBS:
        return
    parser.add_class_arguments(
        L.Trainer,
        "trainer",
        fail_untyped=False,
        instantiate=False,
        sub_configs=True,
        skip={"precision", "accumulate_grad_batches", *BATCH_LIMITS},
    )
    for name in BATCH_LIMITS:
        parser.add_argument(
            f"--trainer.{name}",
            type=BatchLimit | None,
            default=None,
            help=f"{name.split('_')[1]} batches per epoch: a count (int >= 0) or a fraction "
            "(float 0.0-1.0); default all",
        )
    parser.add_argument(
        "--trainer.precision",
        type=Precision,
        default="auto",
        help="auto: 16-mixed on CUDA (the authors' AMP), 32-true elsewhere",
    )
    defaults = dict(TRAINER_DEFAULTS)
    data_skip: set[str] = set()  # fit: the task and scale follow --model (links)
    if verb == "fit":
        defaults["max_epochs"] = DEFAULT_EPOCHS
        parser.add_argument(
            "--trainer.accumulate_grad_batches",
            type=int | Literal["auto"],
            default="auto",
            help="batches summed per optimizer step: auto = round(64 / batch), ramped from "
            "1 during warm-up as the authors' trainer does, or a fixed count (the module "
            "accumulates; the Trainer's own count stays 1)",
        )
        parser.add_class_arguments(
            YOLOModule,
            "model",
            fail_untyped=False,
            instantiate=False,
            sub_configs=True,
            skip={"task", *SCHEMA_ARGUMENTS},
        )
    else:  # the module, its task and its canvas come from --ckpt
        data_skip |= {"task", "variant", "scale_policy", "img_size", "augment"}
    parser.add_class_arguments(
        LucidDataModule,
        "data",
        fail_untyped=False,
        instantiate=False,
        sub_configs=True,
        skip=data_skip,
    )
    if verb == "fit":
        parser.set_defaults({"data.img_size": DEFAULT_IMG_SIZE})
    else:
        parser.add_argument(
            "--data.img_size", type=ImageSide | None, default=None, help="default: the checkpoint's"
        )
    parser.set_defaults({f"trainer.{k}": v for k, v in defaults.items()})


def add_verb_arguments(parser: LightningArgumentParser, verb: str) -> None:
    """The flags of ``verb`` itself: the run folder (fit), ``--ckpt`` and the results files
    (validate, test)."""
    if verb == "fit":
        parser.add_argument("--run.root", type=str, default="runs", help="runs/<task>/<name>")
        parser.add_argument(
            "--run.name", type=str, default="train", help="taken: <name>2, <name>3, ..."
        )
        parser.link_arguments("model.model", "data.task", compute_fn=_task_of_model)
        parser.link_arguments("model.model", "data.variant", compute_fn=_scale_of_model)
        parser.link_arguments("data.img_size", "model.img_size", int)  # a plain int to keep
        parser.link_arguments(
            "trainer.accumulate_grad_batches", "model.accumulate", compute_fn=_accumulation
        )
    elif verb in TRAINER_VERBS:
        parser.add_argument("--ckpt", type=str, required=True, help="a lucid checkpoint")
        parser.add_argument(
            "--model", type=str | None, default=None, help="the model it must be (checked)"
        )
        parser.add_argument(
            "--save_json",
            type=bool,
            default=False,
            help="write each decode path's detections (COCO results JSON; DOTA task-1 text "
            "for obb) and the per-class AP table (printed and per_class_ap.csv)",
        )
        parser.add_argument(
            "--save_dir",
            type=str | None,
            default=None,
            help="where --save_json writes (default runs/<task>/<verb>, numbered if taken)",
        )


def _task_of_model(name: str) -> str:
    return parse_model(name).task


def _scale_of_model(name: str) -> str:
    return parse_model(name).scale[-1]  # yolo26s -> s


def _accumulation(value: int | str) -> int | str:
    """``auto`` or a positive count (raises ValueError otherwise)."""
    from lucid_train.optim import resolve_accumulation

    resolve_accumulation(value, 1, 64)
    return value


def task_of(model: str | None) -> Any:
    return None if model is None else parse_model(model).task


def is_model_name(value: str) -> bool:
    """Whether ``--model VALUE`` names a model rather than a config (a file or inline YAML)."""
    return not any(c in value for c in "{:\n") and not Path(value).is_file()


def takes_bool(parser: LightningArgumentParser, option: str) -> bool:
    """Whether ``option`` of ``parser`` is a flag whose type admits a bool."""
    action = parser._option_string_actions.get(option)
    hint = getattr(action, "_typehint", None)
    return hint is bool or bool in typing.get_args(hint)


# The authors' training arguments (``yolo train epochs=3 imgsz=640``) whose lucid flag is not
# ``--<group>.<the same name>``; the others are found by that suffix (``lr0`` -> --model.lr0).
AUTHORS_NAMES: dict[str, str] = {
    "epochs": "trainer.max_epochs",
    "batch": "data.batch_size",
    "imgsz": "data.img_size",
    "device": "trainer.devices",
    "workers": "data.num_workers",
    "seed": "seed_everything",
    "name": "run.name",
    "project": "run.root",
    "resume": "ckpt_path",
    "amp": "trainer.precision",
    "time": "trainer.max_time",
    "pretrained": "model.weights",
}


def spelling_hints(parser: LightningArgumentParser, tokens: list[str]) -> list[str]:
    """``--epochs (lucid: --trainer.max_epochs)`` for each token of ``tokens`` that is not a flag
    of ``parser`` but names one the authors' way: ``--epochs``, ``epochs=3``, or a dotless flag
    that is the last part of exactly one of ours (``--max_epochs``). Tokens it cannot place are
    left to the parser's own error."""
    known = parser._option_string_actions
    hints = []
    for before, token in zip(["", *tokens], tokens, strict=False):
        if token.startswith("--"):
            name = token[2:].partition("=")[0]
        elif "=" in token and not token.startswith("-") and not before.startswith("-"):
            name = token.partition("=")[0]  # the authors' CLI: key=value (not a flag's value)
        else:
            continue
        if not name or "." in name or f"--{name}" in known:
            continue
        target = AUTHORS_NAMES.get(name)
        if target is None:
            ends = [o[2:] for o in known if o.startswith("--") and o.endswith(f".{name}")]
            target = ends[0] if len(ends) == 1 else None
        if target is not None and f"--{target}" in known:
            hints.append(f"{token.partition('=')[0]} (lucid: --{target})")
    return hints
