"""``lucid export`` options: the opset is stated, dynamic batch and image size, and the written
file is checked against PyTorch with onnxruntime when it is installed (skipped with a line when
it is not)."""

from __future__ import annotations

import builtins
from pathlib import Path
from typing import Any

import pytest

from lucid_testing.module_checkpoints import write_module_checkpoint
from lucid_train.cli import main

pytest.importorskip("onnx", reason="writing ONNX needs lucid-models[export]")


def test_dynamic_export_states_opset_and_onnxruntime_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dynamic graph at opset 18: the input's dims are named, and the command says which opset
    it wrote and that onnxruntime agreed with PyTorch on two shapes."""
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    ckpt = tmp_path / "best.ckpt"
    write_module_checkpoint(ckpt)
    out = tmp_path / "model.onnx"
    code = main(["export", "--ckpt", str(ckpt), "--out", str(out), "--max_det", "20",
                 "--opset", "18", "--dynamic"])  # fmt: skip
    text = capsys.readouterr().out
    assert code == 0
    assert "opset 18" in text and "Bx3xHxW, traced at 1x3x64x64" in text
    assert "onnxruntime matches PyTorch on 1x3x64x64, 2x3x96x64" in text
    dims = onnx.load(str(out)).graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["batch", 3, "height", "width"]


def test_export_without_onnxruntime_says_the_file_was_not_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real_import = builtins.__import__

    def no_onnxruntime(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "onnxruntime":
            raise ModuleNotFoundError("No module named 'onnxruntime'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_onnxruntime)
    ckpt = tmp_path / "best.ckpt"
    write_module_checkpoint(ckpt)
    code = main(["export", "--ckpt", str(ckpt), "--out", str(tmp_path / "m.onnx"),
                 "--max_det", "20"])  # fmt: skip
    text = capsys.readouterr().out
    assert code == 0
    assert "opset 17" in text
    assert "onnxruntime is not installed: the file was not checked" in text


def test_an_impossible_dynamic_export_is_one_line_and_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ckpt = tmp_path / "best.ckpt"
    write_module_checkpoint(ckpt)
    code = main(["export", "--ckpt", str(ckpt), "--img_size", "32", "--dynamic"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and "give only 21 anchors" in err[0]


def test_an_export_where_nothing_can_be_written_names_the_file_asked_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not the writer's temporary name in an errno line: the --out given, why, and the fix."""
    ckpt = tmp_path / "best.ckpt"
    write_module_checkpoint(ckpt)
    out = tmp_path / "no-such-folder" / "m.onnx"
    code = main(["export", "--ckpt", str(ckpt), "--out", str(out), "--max_det", "20"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err == [
        f"lucid export: error: --out {out}: cannot write there (No such file or directory); "
        "pass --out in a folder that exists and you may write"
    ]


def test_an_export_over_an_earlier_file_says_it_replaced_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder's --out names the file after the checkpoint, so two runs' best.ckpt land on one
    best.onnx. Was: 'wrote', as for a new file."""
    ckpt = tmp_path / "best.ckpt"
    write_module_checkpoint(ckpt)
    (tmp_path / "out").mkdir()
    argv = ["export", "--ckpt", str(ckpt), "--out", str(tmp_path / "out"), "--max_det", "20"]
    assert main(argv) in (0, 1)
    assert "replaced" not in capsys.readouterr().out
    assert main(argv) in (0, 1)
    out = capsys.readouterr().out
    assert f"wrote {tmp_path / 'out' / 'best.onnx'} (" in out and "(it replaced the file" in out
