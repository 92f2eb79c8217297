"""The ``lucid`` command: ``fit | validate | test | predict | export``.

Flags follow LightningCLI's dotted spelling (``--trainer.max_epochs``, ``--data.root``,
``--model.lr0``) on plain argparse: jsonargparse, which LightningCLI needs, is not a dependency
(assumptions.md T60). The model is chosen by name, its task by the suffix::

    lucid fit                                   # yolo26n detect on the built-in synthetic set
    lucid fit --model yolo26s-seg --data.root path/to/coco-folder
    lucid fit --ckpt_path runs/detect/train/checkpoints/last.ckpt   # resume
    lucid fit --model.weights yolo26n.pt --data.root path/to/coco-folder   # fine-tune
    lucid validate --ckpt runs/detect/train/checkpoints/best.ckpt
    lucid predict --ckpt runs/detect/train/checkpoints/best.ckpt --source images/
    lucid export --ckpt runs/detect/train/checkpoints/best.ckpt

Defaults make the main job (``lucid fit``) finish on a 2-core CPU within ten minutes (README).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["build_parser", "main", "resolve_precision"]

FORMATS = ("auto", "coco", "coco-split-folders", "yolo", "dota")
PRECISIONS = ("auto", "32-true", "16-mixed", "bf16-mixed")
# The main job's defaults (assumptions.md T61): small canvas and a short run sized for a 2-core CPU.
DEFAULT_IMG_SIZE = 320
DEFAULT_BATCH = 16
DEFAULT_EPOCHS = 6


def _add_data(p: argparse.ArgumentParser, *, sizes: bool = True) -> None:
    g = p.add_argument_group("data")
    g.add_argument(
        "--data.root",
        dest="data_root",
        default=None,
        help="dataset folder or YOLO data.yaml (default: the task's built-in set)",
    )
    g.add_argument(
        "--data.format",
        dest="data_format",
        default="auto",
        choices=FORMATS,
        help="on-disk layout; auto probes the folder",
    )
    g.add_argument("--data.num_workers", dest="num_workers", type=int, default=None)
    g.add_argument(
        "--data.cache",
        dest="data_cache",
        default="none",
        choices=("none", "ram"),
        help="ram: decode every image once at setup and train from memory (size printed first)",
    )
    g.add_argument(
        "--data.render",
        dest="data_render",
        default="auto",
        choices=("auto", "cpu", "device"),
        help="where training pixels are painted: device (the GPU, after the transfer) or cpu (the "
        "loader workers); auto: device on CUDA",
    )
    g.add_argument(
        "--data.decode",
        dest="data_decode",
        default="auto",
        choices=("auto", "cpu", "device"),
        help="with device rendering, device decodes JPEGs on the GPU (nvJPEG); auto follows "
        "--data.render",
    )
    if sizes:
        g.add_argument(
            "--data.img_size",
            dest="img_size",
            type=int,
            default=None,
            help=f"canvas side (fit default {DEFAULT_IMG_SIZE}; else the checkpoint's)",
        )
        g.add_argument("--data.batch_size", dest="batch_size", type=int, default=DEFAULT_BATCH)
        g.add_argument("--data.seed", dest="data_seed", type=int, default=0)
        g.add_argument(
            "--data.scale_policy",
            dest="scale_policy",
            action="store_true",
            help="the recipe study's per-scale augmentation (scale/mixup/copy-paste by model "
            "size, assumptions D1) instead of the authors' default.yaml values",
        )


def _add_trainer(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("trainer")
    g.add_argument("--trainer.accelerator", dest="accelerator", default="auto")
    g.add_argument("--trainer.devices", dest="devices", default="auto")
    g.add_argument(
        "--trainer.precision",
        dest="precision",
        default="auto",
        choices=PRECISIONS,
        help="auto: 16-mixed on CUDA (the authors' AMP), 32-true elsewhere",
    )


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every verb."""
    parser = argparse.ArgumentParser(prog="lucid", description=__doc__.split("\n\n")[0])
    verbs = parser.add_subparsers(dest="verb", required=True)

    fit = verbs.add_parser("fit", help="train a model")
    fit.add_argument(
        "--model",
        default="yolo26n",
        help="yolo26<n|s|m|l|x>[-seg|-pose|-obb]; the suffix picks the task",
    )
    fit.add_argument("--ckpt_path", default=None, help="resume from this last.ckpt")
    fit.add_argument("--seed_everything", type=int, default=0)
    _add_data(fit)
    _add_trainer(fit)
    g = fit.add_argument_group("trainer (fit)")
    g.add_argument("--trainer.max_epochs", dest="max_epochs", type=int, default=DEFAULT_EPOCHS)
    g.add_argument(
        "--trainer.accumulate_grad_batches",
        dest="accumulate",
        type=_accumulate,
        default="auto",
        help="batches summed per optimizer step: auto = round(64 / batch), ramped from 1 during "
        "warm-up as the authors' trainer does, or a fixed count",
    )
    g.add_argument(
        "--trainer.limit_train_batches", dest="limit_train_batches", type=float, default=None
    )
    g.add_argument(
        "--trainer.limit_val_batches", dest="limit_val_batches", type=float, default=None
    )
    g.add_argument("--trainer.check_val_every_n_epoch", dest="val_every", type=int, default=1)
    g.add_argument("--trainer.deterministic", dest="deterministic", action="store_true")
    g = fit.add_argument_group("model (optimizer and schedule)")
    g.add_argument(
        "--model.optimizer",
        dest="optimizer",
        default="auto",
        choices=("auto", "MuSGD", "AdamW", "SGD"),
    )
    g.add_argument("--model.lr0", dest="lr0", type=float, default=None)
    g.add_argument("--model.lrf", dest="lrf", type=float, default=0.01)
    g.add_argument("--model.warmup_epochs", dest="warmup_epochs", type=float, default=3.0)
    g.add_argument("--model.weight_decay", dest="weight_decay", type=float, default=5e-4)
    g = fit.add_argument_group("capture (CUDA graphs)")
    g.add_argument(
        "--model.capture",
        dest="capture",
        default="auto",
        choices=("auto", "on", "off"),
        help="record and replay network and loss as CUDA graphs (auto: on CUDA)",
    )
    for part in ("network", "loss"):
        g.add_argument(
            f"--model.capture_{part}",
            dest=f"capture_{part}",
            default="true",
            choices=("true", "false"),
            help=f"record the {part} (with capture on)",
        )
    g.add_argument(
        "--model.loss_capacity",
        dest="loss_capacity",
        type=int,
        default=None,
        help="targets per image the loss is padded to (default 32 with capture on)",
    )
    # -- fine-tuning (issue 16 item 2) --
    g.add_argument(
        "--model.weights",
        dest="weights",
        default=None,
        help="start from these weights: a lucid checkpoint or weights file, or the authors' "
        "yolo26*.pt (read without running pickled code; class branches fresh when the class "
        "count differs)",
    )
    g = fit.add_argument_group("run")
    g.add_argument("--run.root", dest="run_root", default="runs")
    g.add_argument("--run.name", dest="run_name", default="train")

    for verb in ("validate", "test"):
        v = verbs.add_parser(verb, help=f"{verb} a checkpoint on a split (both decode paths)")
        v.add_argument("--ckpt", required=True)
        v.add_argument("--model", default=None, help="expected model/task (checked)")
        _add_data(v)
        _add_trainer(v)
        # -- results files (issue 16 item 4) --
        v.add_argument(
            "--save_json",
            action="store_true",
            help="write each decode path's detections (COCO results JSON; DOTA task-1 text for "
            "obb) and the per-class AP table (printed and per_class_ap.csv)",
        )
        v.add_argument(
            "--save_dir",
            default=None,
            help=f"where --save_json writes (default runs/<task>/{verb}, numbered if taken)",
        )

    pr = verbs.add_parser("predict", help="predict images; writes JSON and overlays")
    pr.add_argument("--ckpt", required=True)
    pr.add_argument("--source", required=True, help="an image or a folder of images")
    pr.add_argument("--model", default=None, help="expected model/task (checked)")
    pr.add_argument("--out", default=None, help="output folder (default runs/<task>/predict)")
    pr.add_argument("--conf", type=float, default=0.25)
    pr.add_argument("--img_size", type=int, default=None)
    pr.add_argument("--device", default="cpu")

    ex = verbs.add_parser("export", help="ONNX of the deploy view (end-to-end top-k)")
    ex.add_argument("--ckpt", required=True)
    ex.add_argument("--model", default=None, help="expected model/task (checked)")
    ex.add_argument("--out", default=None, help="the .onnx file (default beside the checkpoint)")
    ex.add_argument("--img_size", type=int, default=None)
    ex.add_argument("--max_det", type=int, default=300)
    # -- export options (issue 16 item 5) --
    ex.add_argument("--opset", type=int, default=None, help="ONNX opset (default 17; 17..21)")
    ex.add_argument(
        "--dynamic",
        action="store_true",
        help="free batch and image size (traced at --img_size; k = --max_det rows)",
    )
    return parser


def _task_of(model: str | None) -> Any:
    from lucid_train.model_spec import parse_model

    return None if model is None else parse_model(model).task


def _devices(value: str) -> Any:
    return int(value) if value.isdigit() else value


def _datamodule(
    args: argparse.Namespace, task: Any, img_size: int, batch: int, variant: str
) -> Any:
    from lucid_train.data import LucidDataModule

    return LucidDataModule(
        task,
        args.data_root,
        layout=args.data_format,
        img_size=img_size,
        batch_size=batch,
        num_workers=args.num_workers,
        variant=variant if getattr(args, "scale_policy", False) else None,
        seed=getattr(args, "data_seed", 0),
        cache=args.data_cache,
        render=args.data_render,
        decode=args.data_decode,
    )


def _fit(args: argparse.Namespace) -> int:
    import lightning as L
    from lightning.pytorch.utilities.exceptions import SIGTERMException

    from lucid_train.checkpoint import CheckpointError, check_task, read_checkpoint_info
    from lucid_train.distributed import fit_strategy, shared_run_dir
    from lucid_train.model_spec import parse_model
    from lucid_train.module import module_class
    from lucid_train.runs import build_trainer, new_run_dir, run_dir_of_checkpoint

    # -- fine-tuning (issue 16 item 2): weights only for a new run; a resumed one has its own --
    if args.weights and args.ckpt_path:
        raise CheckpointError(
            f"--model.weights {args.weights} with --ckpt_path {args.ckpt_path}: a resumed run "
            "continues from its checkpoint's weights; drop --model.weights"
        )
    spec = parse_model(args.model)
    img_size = args.img_size or DEFAULT_IMG_SIZE
    hparams: dict[str, Any] | None = None
    resume_epoch: int | None = None
    if args.ckpt_path:
        info = read_checkpoint_info(args.ckpt_path)
        requested = spec.task if args.model != "yolo26n" else None
        check_task(info, requested, args.model)
        spec = parse_model(info.model)
        hparams = dict(info.hyper_parameters)
        img_size = int(hparams.get("img_size", img_size))
        run_dir = run_dir_of_checkpoint(args.ckpt_path)
        resume_epoch = info.epoch
    else:
        run_dir = shared_run_dir(lambda: new_run_dir(args.run_root, spec.task, args.run_name))
    L.seed_everything(args.seed_everything, workers=True)
    dm = _datamodule(args, spec.task, img_size, args.batch_size, spec.scale[-1])
    dm.setup("fit")
    _share_cores(args.accelerator, dm.num_workers)
    schema = dm.schema
    cls = module_class(spec.task)
    if hparams is None:
        hparams = {
            "model": spec.name,
            "num_classes": schema.num_classes,
            "class_names": schema.class_names,
            "category_ids": schema.category_ids,
            "num_keypoints": schema.num_keypoints if spec.task == "pose" else None,
            "keypoint_names": schema.keypoint_names,
            "flip_index": schema.flip_index,
            "skeleton": schema.skeleton,
            "optimizer": args.optimizer,
            "lr0": args.lr0,
            "lrf": args.lrf,
            "warmup_epochs": args.warmup_epochs,
            "weight_decay": args.weight_decay,
            "img_size": img_size,
            "capture": args.capture,
            "capture_network": args.capture_network == "true",
            "capture_loss": args.capture_loss == "true",
            "loss_capacity": args.loss_capacity,
            "accumulate": args.accumulate,
        }
    hparams.setdefault("accumulate", args.accumulate)  # checkpoints written before it existed
    module = cls(**hparams, weights=args.weights)
    extra: dict[str, Any] = {}
    if args.limit_train_batches is not None:
        extra["limit_train_batches"] = _limit(args.limit_train_batches)
    if args.limit_val_batches is not None:
        extra["limit_val_batches"] = _limit(args.limit_val_batches)
    trainer = build_trainer(
        run_dir,
        max_epochs=args.max_epochs,
        precision=resolve_precision(args.precision, args.accelerator),
        accelerator=args.accelerator,
        devices=_devices(args.devices),
        strategy=fit_strategy(args.accelerator, _devices(args.devices)),  # DDP: assumptions T85
        deterministic=args.deterministic,
        check_val_every_n_epoch=args.val_every,
        resume_epoch=resume_epoch,
        **extra,
    )
    print(f"lucid fit: {spec.name} ({spec.task}) on {dm.root} -> {run_dir}")
    start = time.perf_counter()
    try:
        trainer.fit(module, datamodule=dm, ckpt_path=args.ckpt_path)
    except SIGTERMException:
        return _stopped_by_sigterm(trainer, run_dir)
    wall = time.perf_counter() - start
    ckpt = trainer.checkpoint_callback
    best = getattr(ckpt, "best_model_score", None)
    best_text = "n/a" if best is None else f"{float(best):.4f}"
    print(
        f"lucid fit: done in {wall:.0f} s; best val/mAP50-95 (e2e box) {best_text}; "
        f"checkpoints in {run_dir / 'checkpoints'}"
    )
    return 0


def _stopped_by_sigterm(trainer: Any, run_dir: Path) -> int:
    """SIGTERM (a scheduler's preemption, ``kill``): Lightning stopped after the batch in flight;
    last.ckpt (written at this epoch's start) is the resume point. Exit status 0."""
    last = (run_dir / "checkpoints" / "last.ckpt").resolve()
    print(
        f"lucid fit: stopped by SIGTERM in epoch {trainer.current_epoch}; resume with "
        f"`lucid fit --ckpt_path {last}` and the same flags (that epoch runs again from its start)",
        file=sys.stderr,
    )
    return 0


def resolve_precision(precision: str, accelerator: str) -> str:
    """``auto`` -> ``16-mixed`` when the run lands on CUDA (as the authors' ``amp=True``), else
    ``32-true``; any other value is kept."""
    if precision != "auto":
        return precision
    import torch

    cuda = accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()
    return "16-mixed" if cuda else "32-true"


def _share_cores(accelerator: str, workers: int) -> None:
    """On the CPU, leave the loader workers their cores: intra-op threads = cores - workers
    (oversubscribed OpenMP threads spin against the workers; assumptions.md T62). An explicit
    ``OMP_NUM_THREADS`` wins."""
    import torch

    on_cpu = accelerator == "cpu" or (accelerator == "auto" and not torch.cuda.is_available())
    if on_cpu and "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) - workers))


def _accumulate(value: str) -> int | str:
    """``auto`` or a positive integer (argparse type of ``--trainer.accumulate_grad_batches``)."""
    from lucid_train.optim import resolve_accumulation

    try:
        resolve_accumulation(value, 1, 64)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return value if value == "auto" else int(value)


def _limit(value: float) -> int | float:
    return int(value) if value >= 1 and float(value).is_integer() else value


def _evaluate(args: argparse.Namespace) -> int:
    from lucid_train.checkpoint import load_module
    from lucid_train.model_spec import parse_model
    from lucid_train.runs import build_trainer

    module = load_module(args.ckpt, task=_task_of(args.model), model=args.model)
    hp = module.hparams
    img_size = args.img_size or int(hp.get("img_size", DEFAULT_IMG_SIZE))
    spec = parse_model(hp["model"])
    dm = _datamodule(args, spec.task, img_size, args.batch_size, spec.scale[-1])
    # -- results files (issue 16 item 4) --
    callbacks = []
    if args.save_json:
        from lucid_train.results_files import SaveResults
        from lucid_train.runs import new_run_dir

        out = Path(args.save_dir) if args.save_dir else new_run_dir("runs", spec.task, args.verb)
        callbacks.append(SaveResults(out))
    trainer = build_trainer(
        None,
        callbacks=callbacks,
        ema=False,
        precision=resolve_precision(args.precision, args.accelerator),
        accelerator=args.accelerator,
        devices=_devices(args.devices),
    )
    run = trainer.validate if args.verb == "validate" else trainer.test
    run(module, datamodule=dm)
    return 0


def _predict(args: argparse.Namespace) -> int:
    from lucid_train.checkpoint import load_module
    from lucid_train.predict import predict_images

    module = load_module(args.ckpt, task=_task_of(args.model), model=args.model)
    out = Path(args.out or Path("runs") / module.task / "predict")
    path = predict_images(
        module, args.source, out, img_size=args.img_size, conf=args.conf, device=args.device
    )
    print(f"lucid predict: wrote {path} and overlays in {out}")
    return 0


def _export(args: argparse.Namespace) -> int:
    from lucid_models import ONNX_OPSET, export_onnx
    from lucid_train.checkpoint import load_module
    from lucid_train.onnx_check import check_export

    module = load_module(args.ckpt, task=_task_of(args.model), model=args.model)
    size = args.img_size or int(module.hparams.get("img_size", 640))
    out = Path(args.out) if args.out else Path(args.ckpt).with_suffix(".onnx")
    opset = args.opset or ONNX_OPSET
    try:
        names = export_onnx(
            module.model,
            out,
            image_size=(size, size),
            max_det=args.max_det,
            opset=opset,
            dynamic=args.dynamic,
        )
    except ValueError as err:
        print(f"lucid export: error: {err}", file=sys.stderr)
        return 2
    shape = f"Bx3xHxW, traced at 1x3x{size}x{size}" if args.dynamic else f"1x3x{size}x{size}"
    print(f"lucid export: wrote {out} (opset {opset}; input images {shape}; outputs {names})")
    agrees, verdict = check_export(module.model, out, size, args.max_det, args.dynamic)
    print(f"lucid export: {verdict}", file=sys.stdout if agrees else sys.stderr)
    return 0 if agrees else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit status. Errors the user can fix (a checkpoint of
    another task, not ours, unsafe or damaged, an unknown layout, a split with no usable image, a
    missing file) print one line, not a traceback, and exit with status 2."""
    from lucid_train.checkpoint import CheckpointError
    from lucid_train.data import DataFormatError, LayoutError
    from lucid_train.nonfinite import NonFiniteLossError

    args = build_parser().parse_args(argv)
    verbs = {
        "fit": _fit,
        "validate": _evaluate,
        "test": _evaluate,
        "predict": _predict,
        "export": _export,
    }
    try:
        return verbs[args.verb](args)
    except (
        CheckpointError,
        LayoutError,
        DataFormatError,
        FileNotFoundError,
        NonFiniteLossError,
    ) as err:
        print(f"lucid {args.verb}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
