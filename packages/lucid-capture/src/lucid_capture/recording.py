"""Record one call's forward and backward as two CUDA graphs sharing one memory pool.

The procedure holds the capture rules that concern *making* a recording:

- **Precision (rule 4).** The forward is recorded under the live autocast dtype with the autocast
  cache off (a cached cast would be baked into the graph); the backward is recorded with autocast
  off, as eager ``loss.backward()`` runs outside Lightning's autocast context.
- **Warm-up hygiene (rule 5).** Warm-up runs real forwards and backwards (``autograd.grad``, so
  no ``.grad`` is touched); they advance BatchNorm buffers and RNG state. Both are snapshotted
  before and restored after, in place, so the first replay starts where eager would.
- **Reach (rule 6).** For each differentiable output, the set of gradient targets it reaches is
  measured in warm-up, so a backward in which the loss left an output unread can hand back ``None``
  exactly where eager autograd would, instead of the graph's zeros.

Graphs are captured on the recorder's own stream (destroying one graph must not clear the cuBLAS
workspace of another captured on a shared stream) in ``thread_local`` error mode (a DataLoader's
pin-memory thread may allocate while we capture), with the cyclic GC held off so that no old graph
is reset mid-capture.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from lucid_capture.signature import CallSignature, parameter_identity
from lucid_capture.tree import Rebuild, flatten


@dataclass
class Recording:
    """The static buffers and graphs of one call signature."""

    signature: CallSignature
    identity: tuple[tuple[int, int], ...]
    params: tuple[torch.Tensor, ...]
    static_args: list[Any]
    tensor_positions: list[int]
    forward_graph: torch.cuda.CUDAGraph
    backward_graph: torch.cuda.CUDAGraph | None
    static_outputs: list[torch.Tensor]
    rebuild: Rebuild
    differentiable: list[int]
    static_grad_outputs: list[torch.Tensor]
    # Gradient targets: ("arg", tensor index) or ("param", parameter index), in autograd.grad order.
    targets: list[tuple[str, int]]
    static_grads: list[torch.Tensor | None]
    reach: list[frozenset[int]]
    generation: int = 0  # replays so far; a backward must belong to the latest

    def release(self) -> None:
        """Drop the graphs and every static buffer so their pool can be freed."""
        for graph in (self.forward_graph, self.backward_graph):
            if graph is not None:
                graph.reset()
        self.static_args.clear()
        self.static_outputs.clear()
        self.static_grad_outputs.clear()
        self.static_grads.clear()
        self.params = ()


def forward_context(signature: CallSignature) -> contextlib.AbstractContextManager[Any]:
    enabled, dtype = signature.autocast
    if not enabled:
        return contextlib.nullcontext()
    return torch.autocast("cuda", dtype=dtype, cache_enabled=False)


def backward_context(signature: CallSignature) -> contextlib.AbstractContextManager[Any]:
    """Eager ``loss.backward()`` runs outside autocast, so the recorded backward does too."""
    return torch.autocast("cuda", enabled=False)


@contextlib.contextmanager
def _gc_held() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@contextlib.contextmanager
def preserved_state(buffers: Sequence[torch.Tensor], device: torch.device) -> Iterator[None]:
    """Restore ``buffers`` (in place: graphs hold their addresses) and RNG state on exit."""
    saved = [b.detach().clone() for b in buffers]
    cpu_rng = torch.get_rng_state()
    cuda_rng = torch.cuda.get_rng_state(device)
    try:
        yield
    finally:
        with torch.no_grad():
            for buf, value in zip(buffers, saved, strict=True):
                buf.copy_(value)
        torch.set_rng_state(cpu_rng)
        torch.cuda.set_rng_state(cuda_rng, device)


def _static_copy(t: torch.Tensor) -> torch.Tensor:
    out = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
    out.copy_(t.detach())
    return out.requires_grad_(t.requires_grad)


def record(
    fn: Callable[..., Any],
    args: Sequence[Any],
    params: Sequence[torch.Tensor],
    buffers: Sequence[torch.Tensor],
    *,
    stream: torch.cuda.Stream,
    warmup_iters: int,
) -> Recording:
    """Warm up, then record ``fn(*args)`` forward and backward; state is left as it was found."""
    signature = CallSignature.of(args)
    tensor_positions = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
    static_args = [_static_copy(a) if isinstance(a, torch.Tensor) else a for a in args]
    static_tensors = [static_args[i] for i in tensor_positions]
    params = tuple(params)
    targets = [("arg", i) for i, t in enumerate(static_tensors) if t.requires_grad]
    targets += [("param", j) for j, p in enumerate(params) if p.requires_grad]
    target_tensors = [static_tensors[i] if k == "arg" else params[i] for k, i in targets]
    device = static_tensors[0].device

    def run_forward() -> tuple[list[torch.Tensor], Rebuild]:
        with forward_context(signature):
            return flatten(fn(*static_args))

    with preserved_state(buffers, device), torch.cuda.device(device):
        stream.wait_stream(torch.cuda.current_stream())
        reach: list[frozenset[int]] = []
        with torch.cuda.stream(stream):
            for step in range(warmup_iters):
                outs, _ = run_forward()
                diff = [o for o in outs if o.requires_grad]
                if not diff or not target_tensors:
                    continue
                if step == warmup_iters - 1:
                    reach = [_reached(o, target_tensors) for o in diff]
                torch.autograd.grad(
                    diff, target_tensors, [torch.ones_like(o) for o in diff], allow_unused=True
                )
                del outs, diff
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize(device)

        pool = torch.cuda.graph_pool_handle()
        forward_graph = torch.cuda.CUDAGraph()
        with _gc_held():
            with torch.cuda.graph(
                forward_graph, pool=pool, stream=stream, capture_error_mode="thread_local"
            ):
                outs, rebuild = run_forward()
            differentiable = [i for i, o in enumerate(outs) if o.requires_grad]
            if not target_tensors:
                differentiable = []
            static_grad_outputs = [torch.empty_like(outs[i]) for i in differentiable]
            backward_graph: torch.cuda.CUDAGraph | None = None
            static_grads: list[torch.Tensor | None] = []
            if differentiable:
                backward_graph = torch.cuda.CUDAGraph()
                with (
                    torch.cuda.graph(
                        backward_graph, pool=pool, stream=stream, capture_error_mode="thread_local"
                    ),
                    backward_context(signature),
                ):
                    static_grads = list(
                        torch.autograd.grad(
                            [outs[i] for i in differentiable],
                            target_tensors,
                            static_grad_outputs,
                            allow_unused=True,
                        )
                    )
        torch.cuda.synchronize(device)

    if differentiable and len(reach) != len(differentiable):
        reach = [frozenset(range(len(targets)))] * len(differentiable)
    return Recording(
        signature=signature,
        identity=parameter_identity(params),
        params=params,
        static_args=static_args,
        tensor_positions=tensor_positions,
        forward_graph=forward_graph,
        backward_graph=backward_graph,
        static_outputs=[o.detach() for o in outs],
        rebuild=rebuild,
        differentiable=differentiable,
        static_grad_outputs=static_grad_outputs,
        targets=targets,
        static_grads=static_grads,
        reach=reach,
    )


def _reached(output: torch.Tensor, targets: Sequence[torch.Tensor]) -> frozenset[int]:
    """Indices of ``targets`` that autograd reaches from ``output`` (eager gives None elsewhere)."""
    grads = torch.autograd.grad(
        output, list(targets), torch.ones_like(output), allow_unused=True, retain_graph=True
    )
    return frozenset(i for i, g in enumerate(grads) if g is not None)
