"""Data-parallel training: one process per device, gradients summed once per optimizer step.

`DataParallelStrategy` is Lightning's DDP strategy (process launch, the NCCL or gloo process
group, ranks, metric reduction, rank-0 checkpoints) without the `DistributedDataParallel`
wrapper. Each rank runs the module exactly as one device does, through its recorders (replayed
or eager); then, after the backward of every batch that steps the optimizer and before
GradScaler unscales:

1. `sum_gradients`: every ``.grad`` is **summed** across ranks (not averaged), in fixed buckets
   of the optimizer's parameter order, one eager collective per bucket;
2. `broadcast_buffers`: rank 0's buffers (BatchNorm statistics) replace every rank's.

Why not DDP's reducer (assumptions.md T85): a replayed backward is one autograd node, so the
reducer's per-parameter hooks would fire only after it anyway (no overlap to win); the reducer
holds the parameters' AccumulateGrad nodes from its construction, which Lightning runs on a
stream of its own, so they would never be on a recorder's capture stream (docs/capture.md,
"Streams"); and it reduces at every backward unless each accumulating batch runs under
``no_sync``, which the module's own accumulation (T44) does not go through Lightning for. Here
eager and replayed fits take the same reduction path, so they stay bitwise equal, and batches
that only accumulate never communicate. A sum keeps one global batch's gradient whatever the
split (T86): with two ranks it is one IEEE addition, the same bits as one device accumulating
the two halves.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
import torch.distributed as dist
from lightning.pytorch.overrides.distributed import _sync_module_states
from lightning.pytorch.strategies import DDPStrategy
from torch import Tensor, nn

from lucid_train.errors import LucidError

__all__ = [
    "BUCKET_BYTES",
    "DataParallelStrategy",
    "broadcast_buffers",
    "check_rank_environment",
    "device_batch_size",
    "device_count",
    "fit_strategy",
    "shared_run_dir",
    "sum_gradients",
    "sum_over_ranks",
]

BUCKET_BYTES = 25 * 1024 * 1024  # DDP's default bucket size: one collective per ~25 MiB
RUN_DIR_ENV = "LUCID_RUN_DIR"  # the run folder, named by rank 0 for the ranks it launches


def device_batch_size(batch_size: int, world_size: int) -> int:
    """Images per device of a global ``batch_size`` (the authors' ``batch``, assumptions.md T86).

    Raises ValueError unless ``world_size`` divides ``batch_size``: every rank trains the same
    number of images, so the global batch is exactly ``batch_size``."""
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    if batch_size % world_size:
        raise ValueError(
            f"--data.batch_size {batch_size} is the global batch (all devices together) and must "
            f"be a multiple of the {world_size} devices; try {batch_size - batch_size % world_size}"
            f" or {batch_size + world_size - batch_size % world_size}"
        )
    return batch_size // world_size


def _buckets(tensors: Sequence[Tensor], limit: int) -> Iterator[list[Tensor]]:
    """Consecutive runs of ``tensors`` of one dtype and device, each up to ``limit`` bytes (a
    larger tensor is a bucket of its own). The order is the caller's, so it is every rank's."""
    bucket: list[Tensor] = []
    size = 0
    for t in tensors:
        nbytes = t.numel() * t.element_size()
        if bucket and (
            t.dtype != bucket[0].dtype or t.device != bucket[0].device or size + nbytes > limit
        ):
            yield bucket
            bucket, size = [], 0
        bucket.append(t)
        size += nbytes
    if bucket:
        yield bucket


def _coalesced(
    tensors: Sequence[Tensor], collective: Callable[[Tensor], object], limit: int
) -> None:
    """Run ``collective`` in place on each bucket of ``tensors`` flattened, and copy back."""
    for bucket in _buckets(tensors, limit):
        flat = torch.cat([t.reshape(-1) for t in bucket])
        collective(flat)
        pieces, offset = [], 0
        for t in bucket:
            pieces.append(flat[offset : offset + t.numel()].view(t.shape))
            offset += t.numel()
        torch._foreach_copy_(bucket, pieces)  # elementwise: a channels-last grad keeps its layout


def sum_gradients(parameters: Sequence[Tensor], *, bucket_bytes: int = BUCKET_BYTES) -> None:
    """Sum each parameter's ``.grad`` over all ranks in place (parameters without one are
    skipped; every rank must hold gradients for the same parameters, in the same order)."""
    if not (dist.is_available() and dist.is_initialized()):
        return  # (at world size 1 the collectives still run: the path is the same)
    grads = [p.grad for p in parameters if p.grad is not None]
    _coalesced(grads, lambda flat: dist.all_reduce(flat, op=dist.ReduceOp.SUM), bucket_bytes)


def sum_over_ranks(tensor: Tensor) -> None:
    """Sum ``tensor`` over all ranks in place (a no-op in one process). No barrier and no host
    read: on NCCL the sum is queued on the current stream."""
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)


def broadcast_buffers(module: nn.Module, *, bucket_bytes: int = BUCKET_BYTES) -> None:
    """Give every rank rank 0's buffers (BatchNorm running statistics and counters)."""
    if not (dist.is_available() and dist.is_initialized()):
        return
    buffers = [b for b in module.buffers() if b.numel()]
    _coalesced(buffers, lambda flat: dist.broadcast(flat, src=0), bucket_bytes)


class DataParallelStrategy(DDPStrategy):
    """Lightning DDP without the `DistributedDataParallel` wrapper (module docstring).

    Accepts `lightning.pytorch.strategies.DDPStrategy`'s arguments (``start_method``,
    ``process_group_backend``, ``timeout``); DDP's own keyword arguments (``bucket_cap_mb``,
    ``find_unused_parameters``, comm hooks) do not apply and are refused.
    """

    strategy_name = "lucid_ddp"

    def __init__(self, *, bucket_bytes: int = BUCKET_BYTES, **kwargs: Any) -> None:
        unknown = set(kwargs) - {
            "accelerator",
            "parallel_devices",
            "cluster_environment",
            "checkpoint_io",
            "precision_plugin",
            "process_group_backend",
            "timeout",
            "start_method",
        }
        if unknown:
            raise TypeError(f"DataParallelStrategy does not wrap DDP; unsupported: {unknown}")
        super().__init__(**kwargs)
        self.bucket_bytes = bucket_bytes

    def configure_ddp(self) -> None:
        # No wrapper: the module keeps its forward, and its parameters' AccumulateGrad nodes are
        # made where the recorders capture. Start every rank from rank 0's parameters and
        # buffers, as DDP's constructor does.
        assert isinstance(self.model, L.LightningModule)
        _sync_module_states(self.model)

    def optimizer_step(
        self,
        optimizer: torch.optim.Optimizer,
        closure: Callable[[], Any],
        model: L.LightningModule | nn.Module | None = None,
        **kwargs: Any,
    ) -> Any:
        # Lightning calls this only for batches that step (an accumulating batch runs its closure
        # directly), so gradients are summed once per optimizer step: DDP's no_sync for free.
        def closure_then_sync() -> Any:
            result = closure()
            self.synchronize(optimizer)
            return result

        return super().optimizer_step(optimizer, closure_then_sync, model, **kwargs)

    def synchronize(self, optimizer: torch.optim.Optimizer) -> None:
        """Sum the optimizer's gradients over ranks and broadcast rank 0's buffers: after the
        backward (a poisoned gradient, `FiniteLossGuard.gate_gradient`, reaches every rank),
        before unscaling, clipping and the step."""
        params = [p for group in optimizer.param_groups for p in group["params"]]
        sum_gradients(params, bucket_bytes=self.bucket_bytes)
        if self.lightning_module is not None:
            broadcast_buffers(self.lightning_module, bucket_bytes=self.bucket_bytes)


def device_count(accelerator: str, devices: int | str | Sequence[int]) -> int:
    """How many devices a Trainer given ``accelerator`` and ``devices`` would train on."""
    if isinstance(devices, Sequence) and not isinstance(devices, str):
        return len(devices)
    if isinstance(devices, int) and devices >= 0:
        return devices
    cuda = accelerator in ("auto", "gpu", "cuda") and torch.cuda.is_available()
    if devices in ("auto", -1, "-1"):
        return torch.cuda.device_count() if cuda else 1
    return len([d for d in str(devices).split(",") if d.strip()])


def fit_strategy(
    accelerator: str, devices: int | str | Sequence[int]
) -> DataParallelStrategy | str:
    """The strategy of a fit: `DataParallelStrategy` over more than one device, else ``auto``."""
    return DataParallelStrategy() if device_count(accelerator, devices) > 1 else "auto"


def shared_run_dir(make: Callable[[], Path]) -> Path:
    """The run folder of this fit, one for all ranks. Lightning's launcher starts ranks 1.. by
    running the command again; rank 0 makes the folder (``make``) and names it in the
    environment they inherit, and they take it instead of making ``<name>2``."""
    if os.environ.get("LOCAL_RANK", "0") != "0" and os.environ.get(RUN_DIR_ENV):
        return Path(os.environ[RUN_DIR_ENV])
    path = make()
    os.environ[RUN_DIR_ENV] = str(path)
    return path


def check_rank_environment() -> None:
    """Refuse a rank variable left in the environment outside a data-parallel launch: Lightning
    reads ``RANK`` or ``LOCAL_RANK`` at import, and a process that takes itself for rank 1 of a
    world of one writes no metrics, logs or run-folder hold, and says nothing.

    Raises:
        LucidError: ``RANK`` or ``LOCAL_RANK`` is set and not 0 while ``WORLD_SIZE`` is unset or 1.
    """
    if os.environ.get("WORLD_SIZE", "1").strip() not in ("", "0", "1"):
        return  # a launcher's rank (Lightning's, torchrun's)
    for key in ("RANK", "LOCAL_RANK"):
        value = os.environ.get(key, "0").strip()
        if value not in ("", "0"):
            raise LucidError(
                f"{key}={value} is set, but this is no data-parallel launch (WORLD_SIZE is "
                f"{os.environ.get('WORLD_SIZE', 'unset')}): this process would take itself for "
                f"rank {value} and write no metrics or logs; unset it (env -u {key} lucid ...)"
            )
