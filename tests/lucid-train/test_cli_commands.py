"""The ``lucid`` command end to end on a tiny set: fit writes the run, validate/predict/export
read its checkpoint, and a checkpoint of another task is refused with a clear message."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from lucid_train.cli import main
from lucid_train.model_spec import a_task, parse_model

TINY = ["--data.img_size", "64", "--data.batch_size", "4", "--data.num_workers", "0"]


@pytest.fixture(scope="module")
def detect_run(
    small_synthetic: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    runs = tmp_path_factory.mktemp("runs")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("LUCID_EPOCH_MARKS", str(runs / "epochs.jsonl"))
        code = main(
            ["fit", "--data.root", str(small_synthetic("detect")), *TINY,
             "--trainer.max_epochs", "2", "--run.root", str(runs), "--run.name", "tiny"]
        )  # fmt: skip
    assert code == 0
    return runs / "detect" / "tiny"


def test_model_names_pick_the_task_by_suffix() -> None:
    assert parse_model("yolo26n").task == "detect"
    assert parse_model("yolo26s-seg").task == "segment"
    assert parse_model("yolo26m-pose").task == "pose"
    assert parse_model("yolo26x-obb").scale == "yolo26x"
    with pytest.raises(ValueError, match="yolo26n-seg"):
        parse_model("yolo27n")


def test_a_task_in_a_message_takes_its_article() -> None:
    assert [a_task(t) for t in ("detect", "segment", "pose", "obb")] == [
        "a detect", "a segment", "a pose", "an obb"
    ]  # fmt: skip


@pytest.mark.slow
def test_fit_writes_checkpoints_csv_curves_overlays_and_its_config(detect_run: Path) -> None:
    assert (detect_run / "checkpoints" / "last.ckpt").is_file()
    assert "\n  max_epochs: 2\n" in (detect_run / "config.yaml").read_text()
    assert (detect_run / "checkpoints" / "best.ckpt").is_file()
    header = (detect_run / "metrics.csv").read_text().splitlines()[0]
    for column in ("val/e2e/mAP50-95", "val/nms/mAP50-95", "val/mAP50-95", "train/o2o_box_epoch"):
        assert column in header
    for png in ("losses.png", "metrics.png"):
        assert (detect_run / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(list((detect_run / "overlays").glob("val_*.jpg"))) >= 1


@pytest.mark.slow
def test_fit_logs_each_epochs_training_throughput(detect_run: Path) -> None:
    import csv

    rows = [
        r
        for r in csv.DictReader((detect_run / "metrics.csv").open())
        if r.get("time/train_images_per_s")
    ]
    assert [int(float(r["epoch"])) for r in rows] == [0, 1]
    for r in rows:  # 12 training images at batch 4: 3 batches, all counted
        seconds, rate = float(r["time/train_epoch_s"]), float(r["time/train_images_per_s"])
        assert seconds > 0 and rate * seconds == pytest.approx(12, rel=1e-3)
    # the wall-clock windows a benchmark samples the GPU over (LUCID_EPOCH_MARKS): the same
    # first-batch-to-last-batch span, one line per epoch; and when each validation ended, after
    # its epoch's window (the sanity check's none)
    lines = [json.loads(line) for line in (detect_run.parents[1] / "epochs.jsonl").open()]
    marks = [m for m in lines if "start" in m]
    assert [m["epoch"] for m in marks] == [0, 1]
    for m, r in zip(marks, rows, strict=True):
        assert m["end"] - m["start"] == pytest.approx(float(r["time/train_epoch_s"]), abs=0.05)
    validated = [m for m in lines if "validated" in m]
    assert [m["epoch"] for m in validated] == [0, 1]
    assert all(v["validated"] >= m["end"] for v, m in zip(validated, marks, strict=True))


@pytest.mark.slow
def test_predict_writes_json_and_overlays_for_a_folder(
    detect_run: Path, small_synthetic: Callable[[str], Path], tmp_path: Path
) -> None:
    images = sorted(
        p for p in small_synthetic("detect").rglob("*") if p.suffix in (".jpg", ".png")
    )[:2]
    src = tmp_path / "src"
    src.mkdir()
    for p in images:
        (src / p.name).write_bytes(p.read_bytes())
    out = tmp_path / "pred"
    code = main(["predict", "--ckpt", str(detect_run / "checkpoints" / "best.ckpt"),
                 "--source", str(src), "--out", str(out), "--conf", "0.0"])  # fmt: skip
    assert code == 0
    doc = json.loads((out / "predictions.json").read_text())
    assert [Path(e["file"]).name for e in doc] == [p.name for p in images]
    assert all(set(d) >= {"label", "name", "score", "box"} for e in doc for d in e["detections"])
    assert len(list(out.glob("*.jpg"))) == 2


def test_predict_numbers_its_default_folder_and_says_when_out_holds_files(
    detect_run: Path,
    small_synthetic: Callable[[str], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Was: a second predict without --out replaced runs/<task>/predict/predictions.json and
    left the first one's overlays beside the new ones, unsaid."""
    image = next(p for p in small_synthetic("detect").rglob("*") if p.suffix in (".jpg", ".png"))
    monkeypatch.chdir(tmp_path)
    ckpt = str(detect_run / "checkpoints" / "best.ckpt")
    for _ in range(2):
        assert main(["predict", "--ckpt", ckpt, "--source", str(image)]) == 0
    base = Path("runs") / "detect"
    assert sorted(p.name for p in base.iterdir()) == ["predict", "predict2"]
    assert all((base / f / "predictions.json").is_file() for f in ("predict", "predict2"))
    capsys.readouterr()
    assert main(["predict", "--ckpt", ckpt, "--source", str(image), "--out", "mine"]) == 0
    assert "holds files" not in capsys.readouterr().out
    assert main(["predict", "--ckpt", ckpt, "--source", str(image), "--out", "mine"]) == 0
    assert "lucid predict: --out mine holds files" in capsys.readouterr().out


def test_predict_on_one_undecodable_file_says_so_in_one_line(
    detect_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Was the data loader's advice ("read the split with verify='full'"), which a source is not."""
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"\xff\xd8 not a JPEG")
    code = main(["predict", "--ckpt", str(detect_run / "checkpoints" / "best.ckpt"),
                 "--source", str(broken), "--out", str(tmp_path / "pred")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert f"lucid predict: error: --source {broken}: cannot decode image" in err
    assert "verify" not in err and "a folder" in err


@pytest.mark.parametrize(
    ("verb", "flags", "says"),
    [
        ("predict", ["--conf", "5"], "conf (--conf): expected >= 0 and <= 1, got 5"),
        ("predict", ["--img_size", "100"], "multiple of 32"),
        ("export", ["--img_size", "100"], "multiple of 32"),
        ("export", ["--max_det", "0"], "max_det (--max_det): expected >= 1, got 0"),  # was: SIGFPE
    ],
)
def test_a_predict_or_export_setting_out_of_range_is_one_line(
    verb: str,
    flags: list[str],
    says: str,
    detect_run: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Was: no detections without a word (``--conf 5``), a canvas fit refuses (100 px), and a
    process killed by a floating-point exception inside torch's exporter (``--max_det 0``)."""
    if verb == "export":
        pytest.importorskip("onnx")
    source = ["--source", str(tmp_path)] if verb == "predict" else []
    argv = [verb, "--ckpt", str(detect_run / "checkpoints" / "best.ckpt"), *source,
            "--out", str(tmp_path / "out"), *flags]  # fmt: skip
    try:
        code = main(argv)
    except SystemExit as stop:  # refused by the flag's type while parsing (its usage message)
        code = stop.code
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and says in err, err


def test_predict_on_a_cuda_device_torch_cannot_see_is_one_line(
    detect_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here: the refusal is for machines without one")
    code = main(["predict", "--ckpt", str(detect_run / "checkpoints" / "best.ckpt"),
                 "--source", str(tmp_path), "--device", "cuda"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert "--device cuda: torch finds no CUDA device here; use --device cpu" in err


@pytest.mark.slow
def test_a_checkpoint_of_another_task_is_refused_naming_file_task_and_fix(
    detect_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = detect_run / "checkpoints" / "last.ckpt"
    code = main(["predict", "--ckpt", str(ckpt), "--model", "yolo26n-seg",
                 "--source", str(tmp_path)])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert str(ckpt) in err and "trained for detect" in err and "drop --model" in err


@pytest.mark.slow
def test_validate_scores_both_decode_paths(
    detect_run: Path, small_synthetic: Callable[[str], Path], capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["validate", "--ckpt", str(detect_run / "checkpoints" / "best.ckpt"),
                 "--data.root", str(small_synthetic("detect")), "--data.num_workers", "0",
                 "--data.batch_size", "4"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    assert "e2e" in out and "nms" in out


@pytest.mark.slow
def test_export_writes_onnx_of_the_deploy_view(detect_run: Path, tmp_path: Path) -> None:
    onnx = pytest.importorskip("onnx")
    out = tmp_path / "model.onnx"
    code = main(["export", "--ckpt", str(detect_run / "checkpoints" / "best.ckpt"),
                 "--out", str(out), "--max_det", "20"])  # fmt: skip
    assert code == 0
    graph = onnx.load(str(out)).graph
    assert [d.dim_value for d in graph.input[0].type.tensor_type.shape.dim] == [1, 3, 64, 64]


def test_export_into_a_folder_names_the_file_and_refuses_another_format(
    detect_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Was: ``--out <folder>`` told to pass "a folder that exists", and ``--out m.engine``
    held ONNX under another format's name without a word."""
    pytest.importorskip("onnx")
    ckpt = str(detect_run / "checkpoints" / "best.ckpt")
    assert main(["export", "--ckpt", ckpt, "--out", str(tmp_path / "m.engine")]) == 2
    assert "lucid exports ONNX only" in capsys.readouterr().err
    assert not (tmp_path / "m.engine").exists()
    assert main(["export", "--ckpt", ckpt, "--out", str(tmp_path)]) == 0
    assert (tmp_path / "best.onnx").is_file()


def test_console_script_module_answers_help() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "lucid_train", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for verb in ("fit", "validate", "test", "predict", "export"):
        assert verb in out
    assert "YOLO26 detectors" in out and "``" not in out  # a sentence, not the docstring's markup


@pytest.mark.slow
@pytest.mark.parametrize("task", ["segment", "obb"])
def test_fit_reads_a_yolo_txt_folder_probed_or_named(
    task: str, small_synthetic: Callable[[str], Path], tmp_path: Path
) -> None:
    from lucid_train.data import read_split, write_yolo

    coco = small_synthetic(task)
    splits = {s: read_split(coco, s, task=task) for s in ("train", "val")}  # type: ignore[arg-type]
    yaml = write_yolo(splits, tmp_path / "yolo")
    model = parse_model(f"yolo26n-{'seg' if task == 'segment' else task}").name
    for fmt in ("auto", "yolo"):
        code = main(
            ["fit", "--model", model, "--data.root", str(yaml.parent), "--data.format", fmt,
             *TINY, "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "1",
             "--run.root", str(tmp_path / "runs"), "--run.name", fmt]
        )  # fmt: skip
        assert code == 0
        assert (tmp_path / "runs" / task / fmt / "checkpoints" / "last.ckpt").is_file()


@pytest.mark.slow
def test_fit_reads_a_coco_folder_probed_or_named(
    small_synthetic: Callable[[str], Path], tmp_path: Path
) -> None:
    coco = small_synthetic("pose")
    for fmt in ("auto", "coco"):
        code = main(
            ["fit", "--model", "yolo26n-pose", "--data.root", str(coco), "--data.format", fmt,
             *TINY, "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "1",
             "--run.root", str(tmp_path / "runs"), "--run.name", fmt]
        )  # fmt: skip
        assert code == 0
        assert (tmp_path / "runs" / "pose" / fmt / "checkpoints" / "last.ckpt").is_file()


@pytest.mark.slow
def test_fit_reads_a_dota_folder_probed_or_named(
    small_synthetic: Callable[[str], Path], tmp_path: Path
) -> None:
    """The obb synthetic set written as DOTA (images + labelTxt quads, DOTA v1 class names)."""
    import shutil

    from lucid_train.data import read_split
    from lucid_train.data.formats.dota import DOTA_V1_CLASSES
    from lucid_train.data.rotated import rbox_corners

    coco = small_synthetic("obb")
    for split in ("train", "val"):
        index = read_split(coco, split, task="obb")
        (tmp_path / "dota" / split / "labelTxt").mkdir(parents=True)
        (tmp_path / "dota" / split / "images").mkdir()
        for record in index.records:
            shutil.copy(record.path, tmp_path / "dota" / split / "images" / record.path.name)
            assert record.targets.rboxes is not None
            lines = [
                " ".join(f"{v:.2f}" for v in quad.reshape(-1)) + f" {DOTA_V1_CLASSES[int(label)]} 0"
                for quad, label in zip(
                    rbox_corners(record.targets.rboxes), record.targets.labels, strict=True
                )
            ]
            label_file = tmp_path / "dota" / split / "labelTxt" / f"{record.path.stem}.txt"
            label_file.write_text("\n".join(lines) + "\n")
    for fmt in ("auto", "dota"):
        code = main(
            ["fit", "--model", "yolo26n-obb", "--data.root", str(tmp_path / "dota"),
             "--data.format", fmt, *TINY, "--trainer.max_epochs", "1",
             "--trainer.limit_train_batches", "1", "--run.root", str(tmp_path / "runs"),
             "--run.name", fmt]
        )  # fmt: skip
        assert code == 0
        assert (tmp_path / "runs" / "obb" / fmt / "checkpoints" / "last.ckpt").is_file()


@pytest.mark.slow
def test_fit_trains_with_the_authors_default_augmentation_unless_the_scale_policy_is_asked(
    small_synthetic: Callable[[str], Path], tmp_path: Path
) -> None:
    from lucid_train.cli import LucidCLI
    from lucid_train.data import AugmentConfig

    root = str(small_synthetic("segment"))
    for flags, expected in (
        ([], AugmentConfig()),  # default.yaml: no copy-paste, scale 0.5, no mixup
        (["--data.scale_policy"], AugmentConfig.for_variant("s")),
    ):
        cli = LucidCLI(
            ["fit", "--model", "yolo26s-seg", "--data.root", root, *TINY, *flags,
             "--run.root", str(tmp_path)],
            run=False,
        )  # fmt: skip
        assert cli.datamodule.augment == expected
    assert AugmentConfig.for_variant("s").copy_paste > 0 == AugmentConfig().copy_paste


@pytest.mark.slow
def test_precision_auto_is_the_authors_amp_on_cuda_and_full_precision_elsewhere(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch

    from lucid_train.cli import resolve_precision

    with pytest.raises(SystemExit):
        main(["fit", "--print_config"])
    assert "\n  precision: auto\n" in capsys.readouterr().out
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_precision("auto", "auto") == "32-true"
    assert resolve_precision("auto", "gpu") == "32-true"  # no CUDA: nothing to mix on
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_precision("auto", "auto") == "16-mixed"
    assert resolve_precision("auto", "cpu") == "32-true"
    assert resolve_precision("bf16-mixed", "auto") == "bf16-mixed"
