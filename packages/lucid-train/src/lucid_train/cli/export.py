"""``lucid export``: the ONNX of a checkpoint's deploy view (end-to-end top-k), then checked.

The file is checked against PyTorch with onnxruntime when it is installed (`onnx_check`); the
exit status says how it went: 0 written (and agrees, where checked), 1 disagrees, 2 refused.
"""

from __future__ import annotations

import errno
import sys
from pathlib import Path

from lucid_train.errors import check_range
from lucid_train.tasks.module import YOLOModule

__all__ = ["export_checkpoint"]


def export_checkpoint(
    module: YOLOModule,
    ckpt: str,
    *,
    out: str | None,
    img_size: int | None,
    max_det: int,
    opset: int | None,
    dynamic: bool,
) -> int:
    """Write ``module``'s deploy view (read from ``ckpt``) as ONNX and check it; returns the
    exit status. The arguments are `lucid_train.cli.app.LucidCLI.export`'s."""
    # lucid-models[export]: imported when asked for
    from lucid_models import ONNX_OPSET, export_onnx
    from lucid_train.cli.onnx_check import check_export

    check_range("max_det", max_det, low=1, flag="--max_det")
    size = img_size or int(module.hparams.get("img_size", 640))
    path = Path(out) if out else Path(ckpt).with_suffix(".onnx")
    if path.is_dir():  # a folder: the checkpoint's name in it
        path = path / Path(ckpt).with_suffix(".onnx").name
    elif not path.suffix:
        path = path.with_suffix(".onnx")
    if path.suffix.lower() != ".onnx":
        print(
            f"lucid export: error: --out {path}: lucid exports ONNX only; name the file .onnx "
            "(TensorRT and others build their engines from it)",
            file=sys.stderr,
        )
        return 2
    opset = opset or ONNX_OPSET
    # a folder's --out names the file after the checkpoint: another run's best.ckpt lands on it
    replaced = " (it replaced the file of that name there)" if path.is_file() else ""
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
        return 2
    except OSError as err:
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            raise  # the disk-full line of `command_errors`
        # the writer's temporary name would mislead: name the file asked for, and the fix
        print(
            f"lucid export: error: --out {path}: cannot write there ({err.strerror}); pass "
            "--out in a folder that exists and you may write",
            file=sys.stderr,
        )
        return 2
    shape = f"Bx3xHxW, traced at 1x3x{size}x{size}" if dynamic else f"1x3x{size}x{size}"
    print(
        f"lucid export: wrote {path} (opset {opset}; input images {shape}; outputs {names})"
        + replaced
    )
    agrees, verdict = check_export(module.model, path, size, max_det, dynamic)
    print(f"lucid export: {verdict}", file=sys.stdout if agrees else sys.stderr)
    return 0 if agrees else 1
