"""lucid: train YOLO26 detectors, then score, predict and export with them (a Lightning CLI).

Every flag is an argument of a class or a method, read from its signature by jsonargparse:
``--trainer.*`` of `lightning.Trainer` (callbacks and loggers by class path), ``--model.*`` of
`lucid_train.tasks.module.YOLOModule`, ``--data.*`` of `lucid_train.data.LucidDataModule`, the
verb's own (``--ckpt_path`` of ``Trainer.fit``; ``--source`` ... of `LucidCLI.predict`).
``--config`` reads a YAML, ``--print_config`` writes one::

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
- A fit writes and holds ``runs/<task>/<name>/`` (`lucid_train.run`) with the run's own callbacks
  and loggers, plus those given by class path. Its config is ``config.yaml`` there; ``--ckpt_path``
  resumes with it, and a flag that contradicts it is refused in one line.
- validate, test, predict and export rebuild the module from ``--ckpt`` (its EMA weights).

Defaults make the main job (``lucid fit``) finish on a 2-core CPU within ten minutes (README).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
from jsonargparse import Namespace
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.utilities import rank_zero_only

from lucid_train.arg_types import ImageSide
from lucid_train.atomic_files import write_text
from lucid_train.cli.class_paths import instantiate_given
from lucid_train.cli.command_errors import report as report_error
from lucid_train.cli.config_files import check_config_files
from lucid_train.cli.export import export_checkpoint
from lucid_train.cli.fit_outcome import already_finished, done_line, stopped
from lucid_train.cli.flags import (
    DEFAULT_IMG_SIZE,
    EPILOGS,
    TRAINER_VERBS,
    VERBS,
    add_core_arguments,
    add_verb_arguments,
    is_model_name,
    spelling_hints,
    takes_bool,
    task_of,
)
from lucid_train.cli.parse_errors import LucidArgumentParser, warn_repeated_flags
from lucid_train.cli.resume import (
    Resume,
    check_resumed_module,
    latest_last_checkpoint,
    resume_argv,
)
from lucid_train.data import LucidDataModule
from lucid_train.data.classes import model_classes
from lucid_train.distributed import fit_strategy, shared_run_dir
from lucid_train.errors import LucidError
from lucid_train.model_spec import parse_model
from lucid_train.run.environment import check_environment
from lucid_train.run.run_folder import checked_run_dir, held_run_folder, release_run_folders
from lucid_train.run.trainer import build_loggers, build_trainer, new_run_dir, numbered
from lucid_train.tasks.module import YOLOModule, schema_arguments
from lucid_train.tasks.restore import load_module
from lucid_train.tasks.task_modules import module_class

__all__ = ["LucidCLI", "RunConfig", "main", "resolve_precision"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit status. Errors the user can fix (a checkpoint of another
    task, not ours, unsafe or damaged, an unknown layout, a split with no usable image, a missing
    file, a flag against the run resumed, malformed flags) print one line and exit with 2."""
    args = list(sys.argv[1:] if argv is None else argv)
    verb = next((a for a in args if a in VERBS), "")
    try:
        check_environment()
        cli = LucidCLI(args)
    except Exception as err:  # a LucidError, a full disk ...: one line (`command_errors`)
        code = report_error(verb, err)
        if code is None:
            raise  # a bug: its traceback is the report
        return code
    finally:
        release_run_folders()  # a fit holds its run folder until its command ends
    return cli.exit_code


def _known_model(name: str) -> str:
    """``name`` when it names a model; else one line saying the forms (not jsonargparse's report
    of the link from the name to the task, which would quote the link)."""
    try:
        parse_model(name)
    except ValueError as err:
        raise LucidError(str(err)) from None
    return name


CKPT_PATH_HELP = (
    "resume a fit: a run's checkpoint (runs/<task>/<name>/checkpoints/last.ckpt; the run's "
    "config.yaml is read with it), or 'last': the last.ckpt under --run.root written most "
    "recently"
)


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
            parser_class=LucidArgumentParser,  # errors in one line (`parse_errors`)
            args=list(args),
            auto_configure_optimizers=False,  # the module's recipe (lucid_train.tasks.recipe)
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
            sub = self.init_parser(
                **{"description": VERBS[verb], "epilog": EPILOGS.get(verb), **kwargs.get(verb, {})}
            )
            self.add_default_arguments_to_parser(sub)
            self.add_core_arguments_to_parser(sub)
            self.add_arguments_to_parser(sub)
            owner = L.Trainer if verb in TRAINER_VERBS else type(self)
            self._subcommand_method_arguments[verb] = sub.add_method_arguments(
                owner, verb, skip=set(skip)
            )
            if verb == "fit":  # Lightning's text names keywords and URLs lucid does not read
                sub._option_string_actions["--ckpt_path"].help = CKPT_PATH_HELP
            self._subcommand_parsers[verb] = sub
            verbs.add_subcommand(verb, sub, help=VERBS[verb])

    def add_core_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        add_core_arguments(parser, self._verb)

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        add_verb_arguments(parser, self._verb)

    # -- parsing -----------------------------------------------------------------------------

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        check_config_files(list(args))  # a broken file is named (`config_files`)
        argv = self._expand(list(args))
        fit = next((a for a in argv if a in VERBS), "") == "fit"
        if fit and any(a.split("=")[0] == "--data.task" for a in argv):
            # the parser's own refusal quotes its link from the model to the task
            raise LucidError(
                "--data.task: a fit trains its model's task (yolo26n: detect, yolo26n-seg: "
                "segment, -pose, -obb); drop --data.task and name the model of the task"
            )
        # --print_config is answered last, so that a resumed fit prints the config it resumes
        printing = [a for a in argv if a.startswith("--print_config")]
        plain = [a for a in argv if a not in printing]
        config = parser.parse_args(plain)
        if config.subcommand == "fit" and config.fit.get("ckpt_path") == "last":
            found = latest_last_checkpoint(Path(config.fit["run.root"]))
            print(f"lucid fit: --ckpt_path last: resuming {found}", file=sys.stderr)
            plain = [*plain, "--ckpt_path", str(found)]
            config = parser.parse_args(plain)
        if config.subcommand == "fit" and config.fit.get("ckpt_path"):
            self.resume, resumed = resume_argv(parser, plain, config)
            config = parser.parse_args([*resumed, *printing])
        elif printing:
            parser.parse_args(argv)  # prints and exits
        self.config = config

    def _parse_ckpt_path(self) -> None:
        """Nothing: a resumed fit reads its run's config.yaml (`resume_argv`), not the hparams."""

    def _expand(self, argv: list[str]) -> list[str]:
        """``--model NAME`` (fit) -> ``--model.model NAME``; a boolean flag without a value
        (``--trainer.deterministic``) -> ``=true``, as the flags were spelt before."""
        verb_at = next((i for i, a in enumerate(argv) if a in VERBS), None)
        if verb_at is None:
            return argv
        verb = argv[verb_at]
        sub = self._subcommand_parsers[verb]
        out, rest = argv[: verb_at + 1], argv[verb_at + 1 :]
        hints = spelling_hints(sub, rest)
        if hints:
            raise LucidError(
                f"not a flag of lucid {verb}: {', '.join(hints)}; "
                f"`lucid {verb} --help` lists every flag"
            )
        i = 0
        while i < len(rest):
            token, value = rest[i], rest[i + 1] if i + 1 < len(rest) else None
            if verb == "fit" and token.startswith("--model="):
                name = token.partition("=")[2]
                out += ["--model.model", _known_model(name)] if is_model_name(name) else [token]
            elif verb == "fit" and token == "--model" and value and is_model_name(value):
                out += ["--model.model", _known_model(value)]
                i += 1
            elif (value is None or value.startswith("--")) and takes_bool(sub, token):
                out.append(f"{token}=true")
            else:
                out.append(token)
            i += 1
        warn_repeated_flags(sub, out[verb_at + 1 :])  # the parser keeps the last
        return out

    # -- building ----------------------------------------------------------------------------

    def instantiate_classes(self) -> None:
        self.config_init = instantiate_given(self.parser, self.config)  # `class_paths`
        verb = str(self.subcommand)
        cfg = self.config_init[verb]
        self.model: Any = None
        self.datamodule: Any = None
        self.trainer: Any = None
        if verb == "fit":
            data = _kwargs(cfg.data)
            if self.resume is not None and data.get("classes") is None:
                # the run's own classes: one started before D22's rule kept an empty category
                data["classes"] = self.resume.checkpoint.hyper_parameters.get("category_ids")
            self.datamodule = LucidDataModule(**data)
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
                check_resumed_module(self.resume, self.model.hparams)
                self.run_dir = held_run_folder(self.resume.run_dir)
            else:  # one folder for every rank of a data-parallel fit (T85)
                root, name = cfg.run.root, cfg.run.name
                make = lambda: checked_run_dir(lambda: new_run_dir(root, task, name))  # noqa: E731
                self.run_dir = held_run_folder(shared_run_dir(make))  # created, checked, held
        elif verb in TRAINER_VERBS:
            self.model = load_module(cfg.ckpt, task=task_of(cfg.model), model=cfg.model)
            data = _kwargs(cfg.data)
            data["img_size"] = data["img_size"] or int(
                self.model.hparams.get("img_size", DEFAULT_IMG_SIZE)
            )
            # the checkpoint's classes (a fit leaves out categories without annotations, D22)
            data["classes"] = data.get("classes") or model_classes(
                self.model.hparams.get("category_ids", ())
            )
            self.datamodule = LucidDataModule(self.model.task, **data)
        if verb in TRAINER_VERBS:
            self.trainer = self.instantiate_trainer()

    def instantiate_trainer(self, **kwargs: Any) -> L.Trainer:
        """The Trainer of `lucid_train.run.trainer.build_trainer` with the given Trainer arguments:
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
                from lucid_train.cli.results_files import SaveResults

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
        if getattr(rank_zero_only, "rank", 0) != 0:  # each process of a multi-device fit runs it
            return
        spec = parse_model(self.model.hparams["model"])
        print(f"lucid fit: {spec.name} ({spec.task}) on {self.datamodule.root} -> {self.run_dir}")

    def fit(self, model: YOLOModule, datamodule: LucidDataModule, **kwargs: Any) -> None:
        """``Trainer.fit``, stopping cleanly on SIGTERM (a scheduler's preemption, ``kill``)."""
        from lightning.pytorch.utilities.exceptions import SIGTERMException

        if already_finished(self.resume, self.trainer):
            return  # said so; a fit that stops at once would still redraw the run's report
        start = time.perf_counter()
        try:
            self.trainer.fit(model, datamodule=datamodule, **kwargs)
        except SIGTERMException:
            self.exit_code = stopped(self.trainer, self.run_dir, "SIGTERM")  # exit status 0
            return
        except SystemExit:  # Ctrl-C: Lightning shut the fit down and exits 1
            if self.trainer.interrupted:
                stopped(self.trainer, self.run_dir, "Ctrl-C (SIGINT)")
            raise
        assert self.run_dir is not None
        wall = time.perf_counter() - start
        if self.trainer.is_global_zero:
            print(done_line(self.trainer.checkpoint_callback, self.run_dir, wall))

    def predict(
        self,
        ckpt: str,
        source: str,
        model: str | None = None,
        out: str | None = None,
        conf: float = 0.25,
        img_size: ImageSide | None = None,
        device: str = "cpu",
    ) -> None:
        """Predict images; writes predictions.json and an overlay per image.

        Args:
            ckpt: a lucid checkpoint (the task, classes and canvas come from it).
            source: an image or a folder of images.
            model: the model the checkpoint must be (checked).
            out: the output folder (default runs/<task>/predict, numbered when it exists).
            conf: the score threshold.
            img_size: the canvas side (default: the checkpoint's).
            device: where the network runs.
        """
        from lucid_train.cli.predict import predict_images

        module = load_module(ckpt, task=task_of(model), model=model)
        folder = Path(out) if out else numbered(Path("runs") / module.task / "predict")
        if out and folder.is_dir() and any(folder.iterdir()):
            print(
                f"lucid predict: --out {folder} holds files: those of the same names are replaced"
            )
        path = predict_images(module, source, folder, img_size=img_size, conf=conf, device=device)
        print(f"lucid predict: wrote {path} and overlays in {folder}")

    def export(
        self,
        ckpt: str,
        model: str | None = None,
        out: str | None = None,
        img_size: ImageSide | None = None,
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
        self.exit_code = export_checkpoint(
            load_module(ckpt, task=task_of(model), model=model),
            ckpt,
            out=out,
            img_size=img_size,
            max_det=max_det,
            opset=opset,
            dynamic=dynamic,
        )


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


# -- helpers -----------------------------------------------------------------------------------


def _kwargs(ns: Namespace) -> dict[str, Any]:
    """A group of the config as keyword arguments (jsonargparse's bookkeeping left out)."""
    return {k: v for k, v in ns.as_dict().items() if not k.startswith("__")}


def _as_list(value: Any) -> list[Any]:
    return [] if value is None else list(value) if isinstance(value, (list, tuple)) else [value]


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
