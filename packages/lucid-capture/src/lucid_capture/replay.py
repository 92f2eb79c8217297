"""The autograd Function that replays a recording inside normal autograd.

Forward copies the live tensors into the static inputs and replays the forward graph (and copies
back the inputs the call writes in place); backward
copies the incoming gradients into the static gradient outputs of the backward recorded for their
layout (recording it on first use) and replays that graph.
Parameters are inputs of the Function, so autograd accumulates their gradients as usual, unless
the recorder was told to write them into ``.grad`` itself (``grads_in_place``, see
:func:`write_grads`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.autograd.function import FunctionCtx, once_differentiable

from lucid_capture.recording import Recording, eager_backward, gradient_layout, record_backward
from lucid_capture.stats import CaptureStats


class ReplayCall:
    """What one replay needs, handed to the Function (which holds no state of its own)."""

    def __init__(
        self,
        recording: Recording,
        stats: CaptureStats,
        hold: object,
        on_failure: Callable[[Exception], None],
        grads_in_place: bool = False,
    ) -> None:
        self.recording = recording
        self.stats = stats
        self.hold = hold  # released when the backward node runs or is freed (rule 2)
        self.on_failure = on_failure  # a backward recording raised: the recorder stops replaying
        self.generation = -1
        self.grads_in_place = grads_in_place  # see write_grads


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
        if rec.written:  # the call writes these inputs in place: leave them as eager would
            with torch.no_grad():
                for k in rec.written:
                    static, live = rec.static_args[rec.tensor_positions[k]], tensors[k]
                    if static.data_ptr() != live.data_ptr():
                        live.copy_(static)
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
        grads_in = [grad_outputs[i] for i in rec.differentiable]
        # Rule 9: one backward recording per layout of the incoming gradients, made on first use.
        layout = gradient_layout(grads_in)
        backward = rec.backwards.get(layout)
        if backward is None:
            try:
                backward = rec.backwards[layout] = record_backward(rec, grads_in)
            except Exception as error:  # rule 7: say why, and finish this backward eagerly
                call.on_failure(error)
                return (None, *eager_backward(rec, grads_in))
            call.stats.backward_recordings += 1
        read: set[int] = set()
        with torch.no_grad():
            for k, (grad, buffer, zero) in enumerate(
                zip(grads_in, backward.buffers, backward.zero_strides, strict=True)
            ):
                if grad is None:
                    buffer.zero_()
                    continue
                for d in zero:  # an expanded gradient: its one real slice
                    grad = grad.narrow(d, 0, 1)
                buffer.copy_(grad)
                read.add(k)
        backward.graph.replay()
        call.stats.graph_launches += 1
        # Rule 6: a target reached only through outputs the loss left unread gets None, as in
        # eager autograd, not the graph's zeros (zeros would still feel weight decay and momentum).
        reached = frozenset().union(*(rec.reach[k] for k in read))
        slots: list[int] = []
        statics: list[torch.Tensor] = []
        for t, (slot, static_grad) in enumerate(
            zip(rec.target_slots(), backward.grads, strict=True)
        ):
            if static_grad is not None and t in reached:
                slots.append(slot)
                statics.append(static_grad)
        if call.grads_in_place and not torch.is_grad_enabled():
            before = len(slots)
            slots, statics = write_grads(rec.params, len(rec.tensor_positions), slots, statics)
            call.stats.grads_in_place += before - len(slots)
        grads: list[torch.Tensor | None] = [None] * (len(rec.tensor_positions) + len(rec.params))
        for slot, grad in zip(slots, hand_out(statics), strict=True):
            grads[slot] = grad
        return (None, *grads)


def hand_out(statics: list[torch.Tensor]) -> list[torch.Tensor]:
    """Rule 1: the gradients a replay hands autograd are copies, never the recording's buffers.

    AccumulateGrad adopts a gradient it is handed as ``.grad``, and a callback may keep one past
    the step; a buffer handed out would be overwritten under them by the next replay (seed 000).
    One multi-tensor copy into fresh tensors of the same layout costs a pass over the gradients.
    """
    if not statics:
        return []
    with torch.no_grad():
        fresh = [torch.empty_like(g) for g in statics]
        torch._foreach_copy_(fresh, statics)
    return fresh


def write_grads(
    params: tuple[torch.Tensor, ...], first: int, slots: list[int], statics: list[torch.Tensor]
) -> tuple[list[int], list[torch.Tensor]]:
    """Write the replayed gradients of plain parameters into their ``.grad``; return the rest.

    Autograd accumulates a handed-out gradient through one AccumulateGrad node per parameter: a
    few microseconds of host work each, hundreds per backward on a detector, which bound a small
    batch's step. Here one multi-tensor add updates every existing ``.grad`` (``grad += new``, as
    AccumulateGrad does when grad mode is off: the same bits) and one multi-tensor copy fills
    fresh ones in the parameter's own layout (AccumulateGrad's layout contract), which rule 1
    needs anyway. A parameter with Python hooks, a non-leaf, or a ``.grad`` that autograd would
    treat otherwise (sparse, or itself requiring grad) goes through autograd.

    Only correct when this backward is the parameters' only source of gradient (else eager sums
    the sources before adding them to ``.grad``, in another order) and nothing observes their
    accumulation from C++ (``DistributedDataParallel``'s reducer): the recorder's caller opts in.
    The adds run on this backward's stream; the autograd engine is asked to make the stream that
    called ``backward()`` wait for it, as it does for the AccumulateGrad nodes' streams.
    """
    rest_slots: list[int] = []
    rest: list[torch.Tensor] = []
    add_to: list[torch.Tensor] = []
    added: list[torch.Tensor] = []
    fill: list[torch.Tensor] = []
    filled: list[torch.Tensor] = []
    for slot, static in zip(slots, statics, strict=True):
        index = slot - first
        if index >= 0:
            p = params[index]
            if p.is_leaf and not p._backward_hooks and not p._post_accumulate_grad_hooks:
                grad = p.grad
                if grad is None:
                    fill.append(p)
                    filled.append(static)
                    continue
                if grad.layout == torch.strided and not grad.requires_grad:
                    add_to.append(grad)
                    added.append(static)
                    continue
        rest_slots.append(slot)
        rest.append(static)
    if add_to:
        torch._foreach_add_(add_to, added)
    if fill:
        fresh = [torch.empty_like(p) for p in fill]  # the parameter's strides, as autograd's
        torch._foreach_copy_(fresh, filled)
        for p, g in zip(fill, fresh, strict=True):
            p.grad = g
    if (add_to or fill) and statics[0].is_cuda:
        _caller_waits_for(torch.cuda.current_stream(statics[0].device))
    return rest_slots, rest


def _caller_waits_for(stream: torch.cuda.Stream) -> None:
    """At the end of this backward, order the stream ``backward()`` was called on after ``stream``.

    The engine does this for the streams of the AccumulateGrad nodes it ran; gradients written
    here bypass those nodes, so a final callback (run on the caller's stream) does it for them.
    """

    def wait() -> None:
        torch.cuda.current_stream(stream.device).wait_stream(stream)

    torch.autograd.Variable._execution_engine.queue_callback(wait)
