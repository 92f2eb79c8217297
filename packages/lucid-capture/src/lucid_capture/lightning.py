"""Lightning integration: a Callback that runs a LightningModule's recorders for one fit.

Requires ``lucid-capture[lightning]``. The module opts in by holding recorders as attributes
(or returning them from a ``capture_recorders()`` method) and calling them in ``training_step``::

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = Net()
            self.graphed = NetworkRecorder(self.net)   # not a submodule: state_dict unchanged

        def training_step(self, batch, batch_idx):
            x, y = batch
            return F.cross_entropy(self.graphed(x), y)

    trainer = L.Trainer(callbacks=[CaptureCallback()], precision="16-mixed")

Lightning keeps everything else: autocast, GradScaler, optimizer step, scheduler, ``zero_grad``
and gradient accumulation all stay eager and unchanged. Validation runs eager (eval mode) and the
recordings survive it.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.utilities import rank_zero_info

from lucid_capture.recorder import Recorder


def find_recorders(module: pl.LightningModule) -> list[Recorder]:
    """The recorders a module opts in: ``capture_recorders()`` if defined, else its attributes."""
    hook = getattr(module, "capture_recorders", None)
    if callable(hook):
        found = list(hook())
    else:
        found = [value for value in vars(module).values() if isinstance(value, Recorder)]
    if not all(isinstance(r, Recorder) for r in found):
        raise TypeError("capture_recorders() must return lucid_capture recorders")
    return found


class CaptureCallback(pl.Callback):
    """Activate a module's recorders once per fit; free their graphs and report at fit end.

    Args:
        enabled: ``False`` keeps every recorder eager (reason ``disabled``) for this trainer.
        verbose: print each recorder's summary when the fit ends.
    """

    def __init__(self, enabled: bool = True, verbose: bool = True) -> None:
        self.enabled = enabled
        self.verbose = verbose
        self.recorders: list[Recorder] = []
        self.summaries: list[str] = []

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.recorders = find_recorders(pl_module)
        self.summaries = []
        for recorder in self.recorders:
            recorder.reset()  # a second fit in the same process starts clean (rule 8)
            recorder.enabled = self.enabled
        if not self.recorders:
            rank_zero_info("lucid-capture: the module holds no recorders; nothing is captured")

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._finish()

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        self._finish()

    def _finish(self) -> None:
        self.summaries = [r.summary() for r in self.recorders]
        for recorder in self.recorders:
            recorder.release()
        if self.verbose and self.summaries:
            rank_zero_info("lucid-capture: " + "; ".join(self.summaries))

    def state_dict(self) -> dict[str, Any]:
        return {}
