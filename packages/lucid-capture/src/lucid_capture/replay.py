"""The autograd Function that replays a recording inside normal autograd.

Forward copies the live tensors into the static inputs and replays the forward graph; backward
copies the incoming gradients into the static gradient outputs and replays the backward graph.
Parameters are inputs of the Function, so autograd accumulates their gradients as usual.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.autograd.function import FunctionCtx, once_differentiable

from lucid_capture.recording import Recording
from lucid_capture.stats import CaptureStats


class ReplayCall:
    """What one replay needs, handed to the Function (which holds no state of its own)."""

    def __init__(self, recording: Recording, stats: CaptureStats, hold: object) -> None:
        self.recording = recording
        self.stats = stats
        self.hold = hold  # released when the backward node runs or is freed (rule 2)
        self.generation = -1


class Replay(torch.autograd.Function):
    @staticmethod
    def forward(ctx: FunctionCtx, call: ReplayCall, *tensors: torch.Tensor) -> tuple[Any, ...]:
        rec = call.recording
        n_args = len(rec.tensor_positions)
        with torch.no_grad():
            for pos, live in zip(rec.tensor_positions, tensors[:n_args], strict=True):
                static = rec.static_args[pos]
                if static.data_ptr() != live.data_ptr():
                    static.copy_(live)
        rec.forward_graph.replay()
        call.stats.graph_launches += 1
        call.stats.replays += 1
        rec.generation += 1
        call.generation = rec.generation
        ctx.call = call  # type: ignore[attr-defined]
        ctx.set_materialize_grads(False)
        outputs = tuple(o.detach() for o in rec.static_outputs)
        differentiable = set(rec.differentiable)
        ctx.mark_non_differentiable(*(o for i, o in enumerate(outputs) if i not in differentiable))
        return outputs

    @staticmethod
    @once_differentiable
    def backward(ctx: FunctionCtx, *grad_outputs: torch.Tensor | None) -> tuple[Any, ...]:
        call: ReplayCall = ctx.call  # type: ignore[attr-defined]
        rec = call.recording
        if rec.generation != call.generation:
            raise RuntimeError(
                "lucid-capture: this output's recording was replayed again before its backward "
                "ran, so the activations it needs are overwritten (backward with "
                "retain_graph=True after a later forward?). Run that backward before the next "
                "forward, or turn capture off for this recorder."
            )
        read: set[int] = set()
        with torch.no_grad():
            for k, (i, static) in enumerate(
                zip(rec.differentiable, rec.static_grad_outputs, strict=True)
            ):
                grad = grad_outputs[i]
                if grad is None:
                    static.zero_()
                else:
                    static.copy_(grad)
                    read.add(k)
        assert rec.backward_graph is not None
        rec.backward_graph.replay()
        call.stats.graph_launches += 1
        # Rule 6: a target reached only through outputs the loss left unread gets None, as in
        # eager autograd, not the graph's zeros (zeros would still feel weight decay and momentum).
        reached = frozenset().union(*(rec.reach[k] for k in read))
        n_args = len(rec.tensor_positions)
        grads: list[torch.Tensor | None] = [None] * (n_args + len(rec.params))
        for t, ((kind, index), static_grad) in enumerate(
            zip(rec.targets, rec.static_grads, strict=True)
        ):
            if static_grad is not None and t in reached:
                grads[index if kind == "arg" else n_args + index] = static_grad.detach()
        return (None, *grads)
