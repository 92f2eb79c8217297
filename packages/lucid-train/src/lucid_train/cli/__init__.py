"""The ``lucid`` command: the LightningCLI app (`app`), each verb's flags (`flags`), resuming a
fit (`resume`), ``predict`` (`predict`), ``export`` (`export`, `onnx_check`) and the results
files of ``validate|test --save_json`` (`results_files`)."""

from lucid_train.cli.app import LucidCLI, RunConfig, main, resolve_precision
from lucid_train.cli.resume import CONFIG_FILE, ResumeConflictError

__all__ = [
    "CONFIG_FILE",
    "LucidCLI",
    "ResumeConflictError",
    "RunConfig",
    "main",
    "resolve_precision",
]
