"""`KernelWarmup` starts ``lucid_models.warm_kernels`` for CUDA fits whose BatchNorm + SiLU is
fused, with the fit's model, batch per device, image size and precision, and for nothing else
(the GPU half: test_kernel_warmup_gpu.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from lucid_models.warm_kernels import warm_kernels, warm_size
from lucid_train.tasks.kernel_warmup import (
    KernelWarmup,
    cache_holds_fused_kernels,
    warmup_command,
)


def test_the_command_carries_the_fits_model_batch_size_and_precision() -> None:
    command = warmup_command(
        "yolo26s-pose", classes=2, keypoints=17, batch=8, size=480, precision="bf16-mixed",
        device=1,
    )  # fmt: skip
    assert command is not None
    assert command[1:3] == ["-m", "lucid_models.warm_kernels"]
    args = dict(zip(command[3::2], command[4::2], strict=True))
    assert args == {
        "--model": "yolo26s", "--task": "pose", "--classes": "2", "--batch": "8",
        "--size": "480", "--dtype": "bfloat16", "--device": "cuda:1", "--keypoints": "17",
    }  # fmt: skip


@pytest.mark.parametrize("precision", ["16-true", "bf16-true", "64-true"])
def test_a_half_precision_model_is_not_warmed_up(precision: str) -> None:
    """Its BatchNorm parameters are not float32, so the fused pair never runs."""
    assert warmup_command(
        "yolo26n", classes=80, keypoints=None, batch=16, size=640, precision=precision, device=0
    ) is None  # fmt: skip


def test_a_cpu_fit_starts_no_process() -> None:
    trainer = SimpleNamespace(
        strategy=SimpleNamespace(root_device=torch.device("cpu")), local_rank=0, world_size=1,
        datamodule=SimpleNamespace(img_size=320, batch_size=16), precision="32-true",
    )  # fmt: skip
    module = SimpleNamespace(hparams={"model": "yolo26n", "num_classes": 3})
    warmup = KernelWarmup()
    warmup.setup(trainer, module, "fit")  # type: ignore[arg-type]
    assert warmup._process is None
    warmup.on_train_batch_start(trainer, module, None, 0)  # type: ignore[arg-type]
    warmup.teardown(trainer, module, "fit")  # type: ignore[arg-type]


def test_the_warm_up_itself_runs_nothing_off_cuda() -> None:
    assert warm_kernels("yolo26n", num_classes=3, batch=2, size=64, device="cpu") == 0


@pytest.mark.parametrize("size", [0, 100, -32])
def test_the_warm_size_needs_the_fits_multiple_of_32(size: int) -> None:
    with pytest.raises(ValueError, match="multiple of 32"):
        warm_size(size)


def test_a_cache_that_holds_the_fused_kernels_is_not_warmed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The warm-up is for a fresh cache: one compiled fused kernel in it and the fit goes on
    alone (a new signature then compiles in its first step, as without the warm-up)."""
    pytest.importorskip("triton", reason="Triton's cache folder")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    assert not cache_holds_fused_kernels()
    (tmp_path / "ABC123").mkdir()
    (tmp_path / "ABC123" / "_grad_apply.cubin").write_bytes(b"")
    assert not cache_holds_fused_kernels()
    (tmp_path / "ABC123" / "_apply_silu.cubin").write_bytes(b"")
    assert cache_holds_fused_kernels()


def _cuda_fit() -> tuple[SimpleNamespace, SimpleNamespace]:
    trainer = SimpleNamespace(
        strategy=SimpleNamespace(root_device=torch.device("cuda", 0)), local_rank=0,
        world_size=1, datamodule=SimpleNamespace(img_size=64, batch_size=2),
        precision="16-mixed",
    )  # fmt: skip
    return trainer, SimpleNamespace(hparams={"model": "yolo26n", "num_classes": 3})


def test_a_cuda_fit_starts_no_warm_up_unless_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("LUCID_WARM_KERNELS", raising=False)
    trainer, module = _cuda_fit()
    warmup = KernelWarmup()
    warmup.setup(trainer, module, "fit")  # type: ignore[arg-type]
    assert warmup._process is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs the warm-up to fail: no CUDA")
def test_a_warm_up_that_fails_leaves_the_fit_going_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Asked for on a machine without CUDA (a CUDA fit's setup, faked), the warm-up process
    starts, fails at the device, and the first batch goes on with its exit code and last lines
    in the log."""
    pytest.importorskip("triton", reason="the fused pair is a set of Triton kernels")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("LUCID_WARM_KERNELS", "1")
    trainer, module = _cuda_fit()
    warmup = KernelWarmup()
    warmup.setup(trainer, module, "fit")  # type: ignore[arg-type]
    assert warmup._process is not None
    assert "--model yolo26n --task detect --classes 3 --batch 2 --size 64" in " ".join(
        map(str, warmup._process.args)  # type: ignore[arg-type]
    )
    warmup.on_train_batch_start(trainer, module, None, 0)  # type: ignore[arg-type]
    out = capsys.readouterr().out
    assert "the kernel warm-up exited with 1; the fit compiles its kernels itself" in out
    assert "Error" in out  # its traceback's last lines
    warmup.teardown(trainer, module, "fit")  # type: ignore[arg-type]
