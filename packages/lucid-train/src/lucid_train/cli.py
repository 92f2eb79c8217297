"""The ``lucid`` command, a LightningCLI: ``fit | validate | test | predict`` plus ``export``.

Every flag is an argument of a class or a method, read from its signature by jsonargparse:
``--trainer.*`` of `lightning.Trainer` (callbacks and loggers by class path), ``--model.*`` of
`lucid_train.module.YOLOModule`, ``--data.*`` of `lucid_train.data.LucidDataModule`, the verb's
own (``--ckpt_path`` of ``Trainer.fit``; ``--source`` ... of `LucidCLI.predict`). ``--config``
reads a YAML, ``--print_config`` writes one::

    lucid fit                                   # yolo26n detect on the built-in synthetic set
    lucid fit --model yolo26s-seg --data.root path/to/coco-folder
    lucid fit --print_config > run.yaml && lucid fit --config run.yaml
    lucid fit --ckpt_path runs/detect/train/checkpoints/last.ckpt   # resume (its config.yaml)
    lucid validate --ckpt runs/detect/train/checkpoints/best.ckpt
    lucid predict --ckpt runs/detect/train/checkpoints/best.ckpt --source images/
    lucid export --ckpt runs/detect/train/checkpoints/best.ckpt

What lucid adds to LightningCLI (assumptions.md T60, T70-T74):

- ``--model NAME`` is short for ``--model.model NAME``; the name's suffix picks the task and so
  the module class (`module_class`), and the data's label schema fills the module's
  `SCHEMA_ARGUMENTS`, so a fit builds its module and data module itself (`instantiate_classes`).
- ``--trainer.precision auto`` (16-mixed on CUDA) and ``--trainer.accumulate_grad_batches auto``
  (the module's accumulation to the nominal batch; the Trainer's own stays 1).
- A fit writes ``runs/<task>/<name>/`` (`lucid_train.runs`) with the run's own callbacks and
  loggers; the ones given by class path are added to them. The config that produced the run is
  ``config.yaml`` there; ``--ckpt_path`` resumes with it, and a flag that contradicts it is
  refused in one line.
- validate, test, predict and export rebuild the module from ``--ckpt`` (its EMA weights).

Defaults make the main job (``lucid fit``) finish on a 2-core CPU within ten minutes (README).
"""

from __future__ import annotations

import json
import os
import sys
import time
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import lightning as L
from jsonargparse import Namespace, get_loader
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback

from lucid_train.atomic_files import write_text
from lucid_train.checkpoint import (
    CheckpointError,
    CheckpointInfo,
    load_module,
    read_checkpoint_info,
)
from lucid_train.data import DataFormatError, LayoutError, LucidDataModule
from lucid_train.distributed import fit_strategy, shared_run_dir
from lucid_train.model_spec import parse_model
from lucid_train.module import SCHEMA_ARGUMENTS, YOLOModule, module_class, schema_arguments
from lucid_train.nonfinite import NonFiniteLossError
from lucid_train.runs import (
    GRADIENT_CLIP,
    LOG_INTERVAL,
    build_loggers,
    build_trainer,
    new_run_dir,
    run_dir_of_checkpoint,
)

__all__ = [
    "CONFIG_FILE",
    "LucidCLI",
    "ResumeConflictError",
    "RunConfig",
    "main",
    "resolve_precision",
]

CONFIG_FILE = "config.yaml"  # in the run folder: the config a fit was started with
VERBS: dict[str, str] = {
    "fit": "Train a model; writes runs/<task>/<name>/.",
    "validate": "Score a checkpoint on the validation split (both decode paths).",
    "test": "Score a checkpoint on the test split (both decode paths).",
    "predict": "Predict images with a checkpoint; writes JSON and overlays.",
    "export": "Write the ONNX of a checkpoint's deploy view (end-to-end top-k).",
}
TRAINER_VERBS = ("fit", "validate", "test")
Precision = Literal["auto", "64-true", "32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true"]
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
# Keys of a run's config that may differ when it is resumed.
RESUME_FREE = ("ckpt_path", "config", "print_config")


class ResumeConflictError(ValueError):
    """A flag given with ``--ckpt_path`` contradicts the config of the run it resumes."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit status. Errors the user can fix (a checkpoint of
    another task, not ours, unsafe or damaged, an unknown layout, a split with no usable image, a
    missing file, a flag that contradicts the run being resumed) print one line, not a
    traceback, and exit with status 2; so do malformed flags (jsonargparse's usage message)."""
    args = list(sys.argv[1:] if argv is None else argv)
    verb = next((a for a in args if a in VERBS), "")
    try:
        cli = LucidCLI(args)
    except (
        CheckpointError,
        LayoutError,
        DataFormatError,
        FileNotFoundError,
        NonFiniteLossError,
        ResumeConflictError,
    ) as err:
        print(f"lucid {verb}: error: {err}", file=sys.stderr)
        return 2
    return cli.exit_code


@dataclass(frozen=True)
class Resume:
    """A fit resumed from a checkpoint: the checkpoint and the run folder it belongs to."""

    checkpoint: CheckpointInfo
    run_dir: Path


class LucidCLI(LightningCLI):
    """The ``lucid`` command (module docstring).

    Args:
        args: the command line, without the program name.
        run: run the verb; False stops after the model, data module and Trainer are built
            (the fit's run folder is created), so a test can look at them.
    """

    def __init__(self, args: Sequence[str], *, run: bool = True) -> None:
        self.exit_code = 0
        self.run_dir: Path | None = None
        self.resume: Resume | None = None
        self._run_verb = run
        self._verb = ""  # the verb whose parser is being built
        super().__init__(
            model_class=YOLOModule,
            datamodule_class=LucidDataModule,
            save_config_callback=RunConfig,
            seed_everything_default=0,
            parser_kwargs={"prog": "lucid", "description": __doc__.split("\n\n")[0]},
            args=list(args),
            auto_configure_optimizers=False,  # the module's recipe (lucid_train.recipe)
            load_from_checkpoint_support=False,  # checkpoints keep plain hyper-parameters
        )

    # -- the parsers -------------------------------------------------------------------------

    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        # Abbreviated flags would read --conf as --config (and jsonargparse 5 drops them).
        return super().init_parser(**{"allow_abbrev": False, **kwargs})

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        """The verbs and the method arguments that are not flags."""
        return {
            "fit": {"model", "train_dataloaders", "val_dataloaders", "datamodule", "weights_only"},
            "validate": {"model", "dataloaders", "datamodule", "ckpt_path", "weights_only"},
            "test": {"model", "dataloaders", "datamodule", "ckpt_path", "weights_only"},
            "predict": set(),
            "export": set(),
        }

    def _add_subcommands(self, parser: LightningArgumentParser, **kwargs: Any) -> None:
        # LightningCLI's, with two verbs that are methods of this class rather than the Trainer.
        self._subcommand_parsers: dict[str, LightningArgumentParser] = {}
        verbs = parser.add_subcommands()
        for verb, skip in self.subcommands().items():
            self._verb = verb
            sub = self.init_parser(**{"description": VERBS[verb], **kwargs.get(verb, {})})
            self.add_default_arguments_to_parser(sub)
            self.add_core_arguments_to_parser(sub)
            self.add_arguments_to_parser(sub)
            owner = L.Trainer if verb in TRAINER_VERBS else type(self)
            self._subcommand_method_arguments[verb] = sub.add_method_arguments(
                owner, verb, skip=set(skip)
            )
            self._subcommand_parsers[verb] = sub
            verbs.add_subcommand(verb, sub, help=VERBS[verb])

    def add_core_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        if self._verb not in TRAINER_VERBS:
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
                type=int | float | None,
                default=None,
                help=f"{name.split('_')[1]} batches per epoch: a count (int) or a fraction "
                "(float); default all",
            )
        parser.add_argument(
            "--trainer.precision",
            type=Precision,
            default="auto",
            help="auto: 16-mixed on CUDA (the authors' AMP), 32-true elsewhere",
        )
        defaults = dict(TRAINER_DEFAULTS)
        data_skip: set[str] = set()  # fit: the task and scale follow --model (links)
        if self._verb == "fit":
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
        if self._verb == "fit":
            parser.set_defaults({"data.img_size": DEFAULT_IMG_SIZE})
        else:
            parser.add_argument(
                "--data.img_size", type=int | None, default=None, help="default: the checkpoint's"
            )
        parser.set_defaults({f"trainer.{k}": v for k, v in defaults.items()})

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        if self._verb == "fit":
            parser.add_argument("--run.root", type=str, default="runs", help="runs/<task>/<name>")
            parser.add_argument(
                "--run.name", type=str, default="train", help="taken: <name>2, <name>3, ..."
            )
            parser.link_arguments("model.model", "data.task", compute_fn=_task_of_model)
            parser.link_arguments("model.model", "data.variant", compute_fn=_scale_of_model)
            parser.link_arguments("data.img_size", "model.img_size")
            parser.link_arguments(
                "trainer.accumulate_grad_batches", "model.accumulate", compute_fn=_accumulation
            )
        elif self._verb in TRAINER_VERBS:
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

    # -- parsing -----------------------------------------------------------------------------

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        argv = self._expand(list(args))
        # --print_config is answered last, so that a resumed fit prints the config it resumes
        printing = [a for a in argv if a.startswith("--print_config")]
        plain = [a for a in argv if a not in printing]
        config = parser.parse_args(plain)
        if config.subcommand == "fit" and config.fit.get("ckpt_path"):
            config = parser.parse_args([*self._resume_argv(parser, plain, config), *printing])
        elif printing:
            parser.parse_args(argv)  # prints and exits
        self.config = config

    def _parse_ckpt_path(self) -> None:
        """Nothing: LightningCLI would read the checkpoint's hyper-parameters into the config; a
        resumed fit reads its run's config.yaml instead (`_resume_config`)."""

    def _expand(self, argv: list[str]) -> list[str]:
        """``--model NAME`` (fit) -> ``--model.model NAME``; a boolean flag without a value
        (``--trainer.deterministic``) -> ``=true``, as the flags were spelt before."""
        verb_at = next((i for i, a in enumerate(argv) if a in VERBS), None)
        if verb_at is None:
            return argv
        verb = argv[verb_at]
        sub = self._subcommand_parsers[verb]
        out, rest = argv[: verb_at + 1], argv[verb_at + 1 :]
        i = 0
        while i < len(rest):
            token, value = rest[i], rest[i + 1] if i + 1 < len(rest) else None
            if verb == "fit" and token.startswith("--model="):
                name = token.partition("=")[2]
                out += ["--model.model", name] if _is_model_name(name) else [token]
            elif verb == "fit" and token == "--model" and value and _is_model_name(value):
                out += ["--model.model", value]
                i += 1
            elif (value is None or value.startswith("--")) and _takes_bool(sub, token):
                out.append(f"{token}=true")
            else:
                out.append(token)
            i += 1
        return out

    def _resume_argv(
        self, parser: LightningArgumentParser, argv: list[str], given: Namespace
    ) -> list[str]:
        """The command line of a resumed fit: its run's ``config.yaml`` (a run written before
        there was one: the checkpoint's hyper-parameters) and the given flags, after refusing a
        given flag that contradicts it."""
        info = read_checkpoint_info(given.fit.ckpt_path)
        run_dir = run_dir_of_checkpoint(info.path)
        self.resume = Resume(info, run_dir)
        verb_at = argv.index("fit")
        flags = argv[verb_at + 1 :]
        saved_file = run_dir / CONFIG_FILE
        if saved_file.is_file():
            source = saved_file
            saved = dict(parser.parse_args(["fit", "--config", str(saved_file)]).fit.items())
            resumed = ["fit", "--config", str(saved_file), *flags]
        else:
            source = info.path
            saved = _checkpoint_settings(info, given.fit)
            resumed = [*argv, "--config", json.dumps(_nested(saved))]
        found = _conflicts(_given_keys(flags), given.fit, saved)
        if found:
            shown = ", ".join(f"--{k} {_show(a)} contradicts {k}: {_show(b)}" for k, a, b in found)
            raise ResumeConflictError(
                f"resuming {run_dir}: {shown} in {source}, the config the run was started with; "
                "drop the flag to resume the run as it was started, or start a new run (without "
                "--ckpt_path)"
            )
        return resumed

    # -- building ----------------------------------------------------------------------------

    def instantiate_classes(self) -> None:
        self.config_init = self.parser.instantiate(self.config)
        verb = str(self.subcommand)
        cfg = self.config_init[verb]
        self.model: Any = None
        self.datamodule: Any = None
        self.trainer: Any = None
        if verb == "fit":
            self.datamodule = LucidDataModule(**_kwargs(cfg.data))
            self.datamodule.setup("fit")  # a split with no usable image stops here
            _share_cores(self.datamodule.num_workers)
            task = self.datamodule.task
            model_args = _kwargs(cfg.model)
            if self.resume is not None:
                # the checkpoint holds the weights; a fine-tuned run's file is not read again
                model_args["weights"] = None
            self.model = module_class(task)(
                **model_args, **schema_arguments(self.datamodule.schema)
            )
            if self.resume is not None:
                self.run_dir = self.resume.run_dir
            else:  # one folder for every rank of a data-parallel fit (T85)
                root, name = cfg.run.root, cfg.run.name
                self.run_dir = shared_run_dir(lambda: new_run_dir(root, task, name))
        elif verb in TRAINER_VERBS:
            self.model = load_module(cfg.ckpt, task=_task_of(cfg.model), model=cfg.model)
            data = _kwargs(cfg.data)
            data["img_size"] = data["img_size"] or int(
                self.model.hparams.get("img_size", DEFAULT_IMG_SIZE)
            )
            self.datamodule = LucidDataModule(self.model.task, **data)
        if verb in TRAINER_VERBS:
            self.trainer = self.instantiate_trainer()

    def instantiate_trainer(self, **kwargs: Any) -> L.Trainer:
        """The Trainer of `lucid_train.runs.build_trainer` with the given Trainer arguments:
        the run's callbacks and loggers first, then those given by class path."""
        verb = str(self.subcommand)
        trainer = _kwargs(self.config_init[verb].trainer)
        options = {k: v for k, v in trainer.items() if v is not None}
        options.pop("accumulate_grad_batches", None)  # the module's (model.accumulate)
        options["precision"] = resolve_precision(
            options["precision"], str(options.get("accelerator", "auto"))
        )
        options.update(kwargs)
        callbacks = _as_list(options.pop("callbacks", None))
        given = options.pop("logger", None)
        loggers = [] if isinstance(given, bool) else _as_list(given)
        if verb != "fit":
            cfg = self.config_init[verb]
            if cfg.get("save_json"):  # results files (issue 16 item 4; assumptions T82)
                from lucid_train.results_files import SaveResults

                out = cfg.save_dir or new_run_dir("runs", self.model.task, verb)
                callbacks.append(SaveResults(Path(out)))
            return build_trainer(None, ema=False, callbacks=callbacks, logger=loggers, **options)
        if options.get("strategy", "auto") == "auto":  # data parallel over several devices
            options["strategy"] = fit_strategy(
                str(options.get("accelerator", "auto")), options.get("devices", 1)
            )
        assert self.run_dir is not None
        resume_epoch = self.resume.checkpoint.epoch if self.resume else None
        if given is not False:
            loggers = [*build_loggers(self.run_dir, resume_epoch), *loggers]
        if self.resume is None:  # a resumed run keeps the config it was started with
            assert self.save_config_callback is not None
            write = self.save_config_callback
            kwargs = {"run_dir": self.run_dir, **self.save_config_kwargs}
            callbacks.append(write(self._parser(verb), self.config[verb], **kwargs))
        return build_trainer(
            self.run_dir,
            callbacks=callbacks,
            resume_epoch=resume_epoch,
            logger=loggers or False,
            **options,
        )

    # -- running -----------------------------------------------------------------------------

    def _run_subcommand(self, subcommand: str) -> None:
        if not self._run_verb:
            return
        if subcommand in TRAINER_VERBS:
            super()._run_subcommand(subcommand)
            return
        cfg = self.config_init[subcommand]
        run = getattr(self, subcommand)
        run(**{k: cfg[k] for k in self._subcommand_method_arguments[subcommand]})

    def before_fit(self) -> None:
        spec = parse_model(self.model.hparams["model"])
        print(f"lucid fit: {spec.name} ({spec.task}) on {self.datamodule.root} -> {self.run_dir}")

    def fit(self, model: YOLOModule, datamodule: LucidDataModule, **kwargs: Any) -> None:
        """``Trainer.fit``, stopping cleanly on SIGTERM (a scheduler's preemption, ``kill``)."""
        from lightning.pytorch.utilities.exceptions import SIGTERMException

        start = time.perf_counter()
        try:
            self.trainer.fit(model, datamodule=datamodule, **kwargs)
        except SIGTERMException:
            self.exit_code = _stopped_by_sigterm(self.trainer, self.run_dir)
            return
        wall = time.perf_counter() - start
        best = getattr(self.trainer.checkpoint_callback, "best_model_score", None)
        best_text = "n/a" if best is None else f"{float(best):.4f}"
        assert self.run_dir is not None
        print(
            f"lucid fit: done in {wall:.0f} s; best val/mAP50-95 (e2e box) {best_text}; "
            f"checkpoints in {self.run_dir / 'checkpoints'}"
        )

    def predict(
        self,
        ckpt: str,
        source: str,
        model: str | None = None,
        out: str | None = None,
        conf: float = 0.25,
        img_size: int | None = None,
        device: str = "cpu",
    ) -> None:
        """Predict images; writes predictions.json and an overlay per image.

        Args:
            ckpt: a lucid checkpoint (the task, classes and canvas come from it).
            source: an image or a folder of images.
            model: the model the checkpoint must be (checked).
            out: the output folder (default runs/<task>/predict).
            conf: the score threshold.
            img_size: the canvas side (default: the checkpoint's).
            device: where the network runs.
        """
        from lucid_train.predict import predict_images

        module = load_module(ckpt, task=_task_of(model), model=model)
        folder = Path(out or Path("runs") / module.task / "predict")
        path = predict_images(module, source, folder, img_size=img_size, conf=conf, device=device)
        print(f"lucid predict: wrote {path} and overlays in {folder}")

    def export(
        self,
        ckpt: str,
        model: str | None = None,
        out: str | None = None,
        img_size: int | None = None,
        max_det: int = 300,
        opset: int | None = None,
        dynamic: bool = False,
    ) -> None:
        """Write the ONNX of the deploy view (end-to-end top-k); needs lucid-models[export].
        The file is checked against PyTorch with onnxruntime when it is installed (exit 1 when
        they disagree).

        Args:
            ckpt: a lucid checkpoint.
            model: the model the checkpoint must be (checked).
            out: the .onnx file (default: beside the checkpoint).
            img_size: the input side (default: the checkpoint's); with --dynamic, the side traced.
            max_det: detections per image.
            opset: the ONNX opset (default 17; 17..21).
            dynamic: free batch and image size (k = max_det rows).
        """
        from lucid_models import ONNX_OPSET, export_onnx
        from lucid_train.onnx_check import check_export

        module = load_module(ckpt, task=_task_of(model), model=model)
        size = img_size or int(module.hparams.get("img_size", 640))
        path = Path(out) if out else Path(ckpt).with_suffix(".onnx")
        opset = opset or ONNX_OPSET
        try:
            names = export_onnx(
                module.model,
                path,
                image_size=(size, size),
                max_det=max_det,
                opset=opset,
                dynamic=dynamic,
            )
        except ValueError as err:
            print(f"lucid export: error: {err}", file=sys.stderr)
            self.exit_code = 2
            return
        shape = f"Bx3xHxW, traced at 1x3x{size}x{size}" if dynamic else f"1x3x{size}x{size}"
        print(f"lucid export: wrote {path} (opset {opset}; input images {shape}; outputs {names})")
        agrees, verdict = check_export(module.model, path, size, max_det, dynamic)
        print(f"lucid export: {verdict}", file=sys.stdout if agrees else sys.stderr)
        self.exit_code = 0 if agrees else 1


class RunConfig(SaveConfigCallback):
    """Writes the config of a new fit to ``<run_dir>/config.yaml`` (rank 0, atomically) when the
    fit starts: every flag's value, as ``--print_config`` shows it and ``--config`` reads it."""

    def __init__(
        self, parser: LightningArgumentParser, config: Namespace, run_dir: Path, **kwargs: Any
    ) -> None:
        super().__init__(parser, config, save_to_log_dir=False, **kwargs)
        self.path = Path(run_dir) / self.config_filename

    def save_config(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        text = self.parser.dump(self.config, skip_unset=False)
        write_text(self.path, text)


def resolve_precision(precision: str, accelerator: str) -> str:
    """``auto`` -> ``16-mixed`` when the run lands on CUDA (as the authors' ``amp=True``), else
    ``32-true``; any other value is kept."""
    if precision != "auto":
        return precision
    import torch

    cuda = accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()
    return "16-mixed" if cuda else "32-true"


def _share_cores(workers: int) -> None:
    """Leave the loader workers their cores: intra-op threads = cores - workers, on the CPU and
    beside a GPU alike (oversubscribed OpenMP threads spin against the workers; assumptions.md
    T62). An explicit ``OMP_NUM_THREADS`` wins."""
    import torch

    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) - workers))


def _stopped_by_sigterm(trainer: L.Trainer, run_dir: Path | None) -> int:
    """SIGTERM: Lightning stopped after the batch in flight; last.ckpt (written at this epoch's
    start) is the resume point. Exit status 0."""
    assert run_dir is not None
    last = (run_dir / "checkpoints" / "last.ckpt").resolve()
    print(
        f"lucid fit: stopped by SIGTERM in epoch {trainer.current_epoch}; resume with "
        f"`lucid fit --ckpt_path {last}` (the run's {CONFIG_FILE} holds its flags; that epoch "
        "runs again from its start)",
        file=sys.stderr,
    )
    return 0


# -- helpers -----------------------------------------------------------------------------------


def _task_of_model(name: str) -> str:
    return parse_model(name).task


def _scale_of_model(name: str) -> str:
    return parse_model(name).scale[-1]  # yolo26s -> s


def _accumulation(value: int | str) -> int | str:
    """``auto`` or a positive count (raises ValueError otherwise)."""
    from lucid_train.optim import resolve_accumulation

    resolve_accumulation(value, 1, 64)
    return value


def _task_of(model: str | None) -> Any:
    return None if model is None else parse_model(model).task


def _is_model_name(value: str) -> bool:
    """Whether ``--model VALUE`` names a model rather than a config (a file or inline YAML)."""
    return not any(c in value for c in "{:\n") and not Path(value).is_file()


def _takes_bool(parser: LightningArgumentParser, option: str) -> bool:
    """Whether ``option`` of ``parser`` is a flag whose type admits a bool."""
    action = parser._option_string_actions.get(option)
    hint = getattr(action, "_typehint", None)
    return hint is bool or bool in typing.get_args(hint)


def _kwargs(ns: Namespace) -> dict[str, Any]:
    """A group of the config as keyword arguments (jsonargparse's bookkeeping left out)."""
    return {k: v for k, v in ns.as_dict().items() if not k.startswith("__")}


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _given_keys(flags: Sequence[str]) -> list[str]:
    """The config keys a command line sets: its ``--key`` flags and the keys of its
    ``--config`` files (nested keys joined by dots; a class path's arguments count as one)."""
    keys: list[str] = []
    for i, token in enumerate(flags):
        if not token.startswith("-") or token == "-":
            continue
        name, eq, value = token.lstrip("-").partition("=")
        name = name.rstrip("+")  # --trainer.callbacks+=...
        if name in ("c", "config"):
            value = value if eq else (flags[i + 1] if i + 1 < len(flags) else "")
            path = Path(value)
            text = path.read_text() if path.is_file() else value
            keys.extend(_nested_keys(get_loader("yaml")(text)))
        elif name not in RESUME_FREE:
            keys.append(name)
    return keys


def _nested_keys(doc: Any, prefix: str = "") -> list[str]:
    if not isinstance(doc, dict) or "class_path" in doc or not doc:
        return [prefix] if prefix else []
    return [k for key, value in doc.items() for k in _nested_keys(value, f"{prefix}{key}.")]


def _conflicts(
    keys: Sequence[str], given: Namespace, saved: dict[str, Any]
) -> list[tuple[str, Any, Any]]:
    """``(key, given value, saved value)`` for each key of ``saved`` (dotted, one per value) that
    a given key sets (the key itself, a group above it or a value inside it) to another value."""
    found = []
    for key, value in saved.items():
        if key.split(".")[-1].startswith("__") or key in RESUME_FREE:
            continue
        hit = any(k == key or key.startswith(f"{k}.") or k.startswith(f"{key}.") for k in keys)
        if hit and key in given and given[key] != value:
            found.append((key, given[key], value))
    return found


def _nested(flat: dict[str, Any]) -> dict[str, Any]:
    """``{"a.b": 1}`` -> ``{"a": {"b": 1}}``."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        *groups, name = key.split(".")
        node = out
        for group in groups:
            node = node.setdefault(group, {})
        node[name] = value
    return out


def _checkpoint_settings(info: CheckpointInfo, given: Namespace) -> dict[str, Any]:
    """The fit settings a checkpoint's hyper-parameters hold, as config keys: the module's
    arguments, its canvas (``data.img_size``) and accumulation."""
    hp = info.hyper_parameters
    out = {f"model.{k}": v for k, v in hp.items() if f"model.{k}" in given}
    for key in ("model.img_size", "model.accumulate", *(f"model.{k}" for k in SCHEMA_ARGUMENTS)):
        out.pop(key, None)  # link targets and the data's schema
    if "img_size" in hp:
        out["data.img_size"] = hp["img_size"]
    if "accumulate" in hp:
        out["trainer.accumulate_grad_batches"] = hp["accumulate"]
    return out


def _show(value: Any) -> str:
    if isinstance(value, Namespace):
        value = value.as_dict()
    return value if isinstance(value, str) else json.dumps(value, default=str)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
