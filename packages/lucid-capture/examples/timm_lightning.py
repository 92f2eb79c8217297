"""A timm classifier trained by Lightning, its forward and backward replayed as CUDA graphs.

    pip install timm "lucid-capture[lightning]"
    python packages/lucid-capture/examples/timm_lightning.py

A plain LightningModule: the module holds a ``NetworkRecorder`` around its network and calls it in
``training_step``; ``CaptureCallback`` activates it for the fit. Lightning keeps autocast, the
GradScaler, accumulation, the optimizer and ``zero_grad``. A partial last batch runs eager (reason
``shape``), and so does validation (eval mode). Without CUDA every call runs eager (``no CUDA``).
"""

from __future__ import annotations

import lightning.pytorch as L
import timm
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from lucid_capture import NetworkRecorder
from lucid_capture.lightning import CaptureCallback


class TimmClassifier(L.LightningModule):
    def __init__(self, model_name: str = "resnet18", num_classes: int = 10, lr: float = 1e-3):
        super().__init__()
        self.net = timm.create_model(model_name, pretrained=False, num_classes=num_classes)
        self.graphed = NetworkRecorder(self.net)  # not a submodule: state_dict keys unchanged
        self.lr = lr

    def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor:
        images, labels = batch
        loss = F.cross_entropy(self.graphed(images).float(), labels)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.net.parameters(), lr=self.lr, weight_decay=0.05)


def random_images(count: int, size: int = 64, classes: int = 10) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    images = torch.randn(count, 3, size, size, generator=g)
    return TensorDataset(images, torch.randint(0, classes, (count,), generator=g))


def fit(
    *,
    capture: bool = True,
    batches: int = 12,
    batch_size: int = 16,
    image_size: int = 64,
    precision: str = "bf16-mixed",
    accumulate: int = 2,
    accelerator: str = "auto",
    model_name: str = "resnet18",
) -> tuple[TimmClassifier, CaptureCallback]:
    """One epoch of ``batches`` batches, the last one partial; returns the module and callback."""
    torch.manual_seed(0)
    module = TimmClassifier(model_name)
    callback = CaptureCallback(enabled=capture)
    trainer = L.Trainer(
        accelerator=accelerator,
        devices=1,
        max_epochs=1,
        precision=precision,  # type: ignore[arg-type]
        accumulate_grad_batches=accumulate,
        callbacks=[callback],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    data = random_images(batches * batch_size - batch_size // 2, image_size)
    trainer.fit(module, DataLoader(data, batch_size=batch_size))
    return module, callback


if __name__ == "__main__":
    _, done = fit()
    print("\n".join(done.summaries))  # network: 1 recording, 11 replays, 0 retired, 1 eager ...
