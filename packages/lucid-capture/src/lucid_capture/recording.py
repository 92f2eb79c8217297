"""Record one call's forward and backward as two CUDA graphs sharing one memory pool.

The procedure holds the capture rules that concern *making* a recording:

- **Precision (rule 4).** The forward is recorded under the live autocast dtype with the autocast
  cache off (a cached cast would be baked into the graph); the backward is recorded with autocast
  off, as eager ``loss.backward()`` runs outside Lightning's autocast context.
- **Warm-up hygiene (rule 5).** Warm-up runs real forwards and backwards (``autograd.grad``, so
  no ``.grad`` is touched); they advance BatchNorm buffers and RNG state. Both are snapshotted
  before and restored after, in place, so the first replay starts where eager would. That covers
  the CUDA generators the graph draws from (the default one and any handed to the recorder) and
  the host ones (torch's CPU generator, ``random``, numpy's) a model may draw from in Python.
- **Randomness.** A CUDA draw inside a graph reads the generator's seed and offset from device
  memory, and each replay advances the offset by the graph's draws: replays draw what eager would.
  A host draw while recording is baked into the graph as one constant (a layer skipped or kept
  for ever), so a recording that moved a host generator is refused (``host RNG``).
- **Generators it was not given.** The first warm-up forward watches the ``generator=`` of every
  torch call; a generator that is neither the device's default nor one handed to the recorder is
  put back to its state before its first draw and the recording is refused (``unregistered
  RNG``), so the eager fit that follows draws what eager would have drawn
  (``randomness.GeneratorWatch``).
- **Inputs written in place.** The first warm-up forward reads each input's version counter
  before and after. A replay writes the recording's copy of an input, so an input the call writes
  is copied back into the caller's tensor after each replay, as eager would have left it; one
  that requires grad refuses the recording (``writes a grad input``), since that write would
  have to enter the caller's autograd graph.
- **Reach (rule 6).** For each differentiable output, the set of gradient targets it reaches is
  measured in warm-up, so a backward in which the loss left an output unread can hand back ``None``
  exactly where eager autograd would, instead of the graph's zeros.
- **Seeds kept on the device.** PyTorch's memory-efficient attention saves its dropout seed and
  offset for the backward as host scalars in eager and as device tensors under capture, and its
  backward dereferences them on the host unless it is itself being captured. A backward run
  eagerly over a captured forward then reads a device address on the host (a SIGSEGV, not an
  error). Such a recording (``randomness.device_seeded_nodes`` finds its nodes) warms each
  backward layout up on a fresh eager forward instead (state restored as in warm-up), and
  refuses to finish a backward eagerly over its graph.
- **Gradient layout (rule 9).** The backward is recorded at the first backward, not with the
  forward, and once per layout of the incoming gradients: a static gradient buffer takes the
  strides of the gradient the consumer actually hands over. Eager autograd passes that gradient on
  as it is, and a reduction over it (a convolution's bias gradient) sums in an order set by those
  strides, so a buffer of another layout may change the bits (docs/capture.md says what the GPU
  suite shows of it).

Graphs are captured on the recorder's own stream (destroying one graph must not clear the cuBLAS
workspace of another captured on a shared stream) in ``thread_local`` error mode (a DataLoader's
pin-memory thread may allocate while we capture), with the cyclic GC held off so that no old graph
is reset mid-capture.
"""

from __future__ import annotations

import contextlib
import gc
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from lucid_capture.failures import (
    GradInputWrittenError,
    HostRandomnessError,
    UnregisteredGeneratorError,
    host_rng_state,
    set_host_rng_state,
)
from lucid_capture.randomness import GeneratorWatch, device_seeded_nodes
from lucid_capture.signature import CallSignature, parameter_identity
from lucid_capture.tree import Rebuild, flatten


@dataclass
class Backward:
    """The backward graph recorded for one layout of the incoming gradients."""

    graph: torch.cuda.CUDAGraph
    # Per differentiable output: the buffer a live gradient is copied into (one slice of it along
    # the dims where the gradient has stride 0; the graph read it expanded) and those dims.
    buffers: list[torch.Tensor]
    zero_strides: list[tuple[int, ...]]
    grads: list[torch.Tensor | None]  # static gradients of the targets, in ``targets`` order


# Per differentiable output: the incoming gradient's strides, or None where none came.
GradLayout = tuple[tuple[int, ...] | None, ...]


@dataclass
class Recording:
    """The static buffers and graphs of one call signature."""

    signature: CallSignature
    identity: tuple[tuple[int, int], ...]
    params: tuple[torch.Tensor, ...]
    static_args: list[Any]
    tensor_positions: list[int]
    forward_graph: torch.cuda.CUDAGraph
    static_outputs: list[torch.Tensor]
    rebuild: Rebuild
    differentiable: list[int]
    # Gradient targets: ("arg", tensor index) or ("param", parameter index), in autograd.grad order.
    targets: list[tuple[str, int]]
    reach: list[frozenset[int]]
    # What a backward recording needs: the captured outputs with their autograd graph (retained),
    # the targets as tensors, and the pool and stream the forward was captured in.
    graph_outputs: list[torch.Tensor]
    target_tensors: list[torch.Tensor]
    pool: Any
    stream: torch.cuda.Stream
    generators: tuple[torch.Generator, ...] = ()
    # Indices into ``tensor_positions`` of the inputs the call writes in place: a replay writes
    # the recording's copies, so it copies them back into the caller's tensors after the graph.
    written: tuple[int, ...] = ()
    # Set when the captured forward holds a kernel whose backward cannot run eagerly over it
    # (device_seeded_nodes): runs one eager forward and backward with the given gradients.
    fresh_warmup: Callable[[Sequence[torch.Tensor]], None] | None = None
    backwards: dict[GradLayout, Backward] = field(default_factory=dict)
    generation: int = 0  # replays so far; a backward must belong to the latest

    def target_slots(self) -> list[int]:
        """Per target, its position among the Function's gradient inputs after the call object:
        the tensor arguments first, then the parameters."""
        n_args = len(self.tensor_positions)
        return [index if kind == "arg" else n_args + index for kind, index in self.targets]

    def release(self) -> None:
        """Drop the graphs and every static buffer so their pool can be freed."""
        self.forward_graph.reset()
        for backward in self.backwards.values():
            backward.graph.reset()
        self.backwards.clear()
        self.static_args.clear()
        self.static_outputs.clear()
        self.graph_outputs.clear()
        self.target_tensors.clear()
        self.params = ()
        self.fresh_warmup = None


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
def _captured(
    graph: torch.cuda.CUDAGraph,
    pool: Any,
    stream: torch.cuda.Stream,
    generators: Sequence[torch.Generator] = (),
) -> Iterator[None]:
    """``torch.cuda.graph`` that leaves the CUDA random generators usable when capture fails,
    with ``generators`` (besides the default one) registered so that replays advance them.

    A capture that raises never reaches the generators' capture epilogue: each stays marked as
    capturing, and the process's next random op outside a graph raises "Offset increment outside
    graph capture". One empty capture runs the prologue/epilogue pair again and clears the mark;
    the eager offset is untouched (a capture counts its draws apart from it)."""
    for generator in generators:
        graph.register_generator_state(generator)
    try:
        with torch.cuda.graph(graph, pool=pool, stream=stream, capture_error_mode="thread_local"):
            yield
    except BaseException:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "The CUDA Graph is empty": on purpose
            with torch.cuda.graph(torch.cuda.CUDAGraph(), stream=stream):
                pass
        raise


def _alias(t: torch.Tensor) -> torch.Tensor:
    # Leaves (parameters, static inputs) keep their identity, as eager's saved_tensors give them
    # back: a Function's backward may look its parameters up by identity.
    return t if t.is_leaf else t.detach()


def _same(t: torch.Tensor) -> torch.Tensor:
    return t


def _saved_by_address() -> contextlib.AbstractContextManager[Any]:
    """Save the captured forward's tensors as aliases, which autograd does not version-check.

    Backward recordings are made later, from this forward's retained autograd graph (rule 9); by
    then the optimizer has updated parameters and replays have refilled the static inputs in
    place, which bumps their version counters. A recorded backward reads addresses, not versions,
    and these addresses hold each replay's values, so the check would only refuse a valid graph.
    """
    return torch.autograd.graph.saved_tensors_hooks(_alias, _same)


@contextlib.contextmanager
def preserved_state(
    buffers: Sequence[torch.Tensor],
    device: torch.device,
    generators: Sequence[torch.Generator] = (),
) -> Iterator[None]:
    """Restore ``buffers`` (in place: graphs hold their addresses) and RNG state on exit: the
    host generators, the device's default CUDA generator and ``generators``."""
    saved = [b.detach().clone() for b in buffers]
    host_rng = host_rng_state()
    cuda_rng = torch.cuda.get_rng_state(device)
    own_rng = [g.get_state() for g in generators]
    try:
        yield
    finally:
        with torch.no_grad():
            for buf, value in zip(buffers, saved, strict=True):
                buf.copy_(value)
        set_host_rng_state(host_rng)
        torch.cuda.set_rng_state(cuda_rng, device)
        for generator, state in zip(generators, own_rng, strict=True):
            generator.set_state(state)


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
    generators: Sequence[torch.Generator] = (),
) -> Recording:
    """Warm up, then record ``fn(*args)``'s forward; state is left as it was found.

    Warm-up runs backwards too (cuDNN and allocator), but the backward graph is recorded later,
    by :func:`record_backward` at the first backward, in the layout its gradients arrive in."""
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

    generators = tuple(generators)
    with preserved_state(buffers, device, generators), torch.cuda.device(device):
        stream.wait_stream(torch.cuda.current_stream())
        reach: list[frozenset[int]] = []
        index = device.index if device.index is not None else torch.cuda.current_device()
        known = [torch.cuda.default_generators[index], torch.default_generator]
        watch = GeneratorWatch([*known, *generators])
        try:  # a refusal mid warm-up must not skip the join: the restore would race it
            with torch.cuda.stream(stream):
                written: tuple[int, ...] = ()
                for step in range(warmup_iters):
                    if step == 0:  # watched once: the mode may steer modules off their fast paths
                        versions = [t._version for t in static_tensors]
                        with watch:
                            outs, _ = run_forward()
                        written = _written(static_tensors, versions)
                        if watch.first:
                            watch.restore()
                            raise UnregisteredGeneratorError(
                                f"the call draws from {len(watch.first)} generator(s) the recorder "
                                f"was not given (first at {watch.where or 'an unknown line'}); "
                                "each is left as warm-up found it"
                            )
                        grad_written = [i for i in written if static_tensors[i].requires_grad]
                        if grad_written:
                            raise GradInputWrittenError(
                                "the call writes in place into an input that requires grad "
                                f"(tensor arguments {grad_written})"
                            )
                    else:
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
        finally:
            torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize(device)

        pool = torch.cuda.graph_pool_handle()
        forward_graph = torch.cuda.CUDAGraph()
        with _gc_held():
            host_rng = host_rng_state()
            with _captured(forward_graph, pool, stream, generators), _saved_by_address():
                outs, rebuild = run_forward()
            if host_rng_state() != host_rng:
                forward_graph.reset()
                raise HostRandomnessError(
                    "the recorded call drew from a host random generator (torch's CPU "
                    "generator, random or numpy); a replay would repeat that draw"
                )
            differentiable = [i for i, o in enumerate(outs) if o.requires_grad]
            if not target_tensors:
                differentiable = []
        torch.cuda.synchronize(device)

    def warm_on_a_fresh_forward(grads: Sequence[torch.Tensor]) -> None:
        # Called from inside a replayed backward, where grad mode is off.
        with (
            preserved_state(buffers, device, generators),
            torch.cuda.stream(stream),
            torch.enable_grad(),
        ):
            fresh, _ = run_forward()
            with backward_context(signature):
                torch.autograd.grad(
                    [fresh[i] for i in differentiable], target_tensors, list(grads),
                    allow_unused=True,
                )  # fmt: skip

    seeded = device_seeded_nodes([outs[i] for i in differentiable])

    if differentiable and len(reach) != len(differentiable):
        reach = [frozenset(range(len(targets)))] * len(differentiable)
    return Recording(
        signature=signature,
        identity=parameter_identity(params),
        params=params,
        static_args=static_args,
        tensor_positions=tensor_positions,
        forward_graph=forward_graph,
        static_outputs=[o.detach() for o in outs],
        rebuild=rebuild,
        differentiable=differentiable,
        targets=targets,
        reach=reach,
        graph_outputs=[outs[i] for i in differentiable],
        target_tensors=target_tensors,
        pool=pool,
        stream=stream,
        generators=generators,
        fresh_warmup=warm_on_a_fresh_forward if seeded else None,
        written=written,
    )


def _written(tensors: Sequence[torch.Tensor], versions: Sequence[int]) -> tuple[int, ...]:
    """The indices of ``tensors`` whose version counter moved since ``versions`` was read."""
    moved = zip(tensors, versions, strict=True)
    return tuple(i for i, (t, v) in enumerate(moved) if t._version != v)


def gradient_layout(grads: Sequence[torch.Tensor | None]) -> GradLayout:
    """The key of the backward recording that ``grads`` replay (rule 9)."""
    return tuple(None if g is None else tuple(g.stride()) for g in grads)


def _gradient_buffer(
    grad: torch.Tensor | None, output: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, tuple[int, ...]]:
    """``(buffer, view, zero-stride dims)`` for one output's incoming gradient (rule 9).

    The view has the gradient's strides, so the recorded backward reads it as eager autograd
    reads the live one. A stride-0 (expanded) gradient, such as the one ``out.sum()`` hands over,
    is held as its one real slice and expanded."""
    if grad is None:
        buffer = torch.empty_like(output)
        return buffer, buffer, ()
    zero = tuple(d for d, st in enumerate(grad.stride()) if st == 0 and grad.shape[d] > 1)
    shape = [1 if d in zero else n for d, n in enumerate(grad.shape)]
    buffer = torch.empty_strided(shape, grad.stride(), dtype=grad.dtype, device=grad.device)
    return buffer, buffer.expand(grad.shape), zero


def record_backward(rec: Recording, grads: Sequence[torch.Tensor | None]) -> Backward:
    """Record the backward for the layout of ``grads`` (one per differentiable output).

    Runs inside the replayed backward: the forward graph's outputs kept their autograd graph, whose
    saved tensors are the recording's own buffers, so each capture reuses it (retain_graph)."""
    buffers: list[torch.Tensor] = []
    views: list[torch.Tensor] = []
    zeros: list[tuple[int, ...]] = []
    for grad, output in zip(grads, rec.graph_outputs, strict=True):
        buffer, view, zero = _gradient_buffer(grad, output)
        buffers.append(buffer)
        views.append(view)
        zeros.append(zero)
    graph = torch.cuda.CUDAGraph()
    device = rec.graph_outputs[0].device
    rec.stream.wait_stream(torch.cuda.current_stream(device))
    with _gc_held(), torch.cuda.device(device):
        # One eager pass in this layout first: kernels that pick an algorithm or allocate a
        # workspace on first use (cuDNN, cuBLAS) must not do so under capture.
        if rec.fresh_warmup is not None:
            rec.fresh_warmup(views)
        else:
            with torch.cuda.stream(rec.stream), backward_context(rec.signature):
                _retained_grad(rec, rec.graph_outputs, views)
        torch.cuda.synchronize(device)
        with (
            _captured(graph, rec.pool, rec.stream, rec.generators),
            backward_context(rec.signature),
        ):
            static_grads = _retained_grad(rec, rec.graph_outputs, views)
        torch.cuda.synchronize(device)
    return Backward(graph, buffers, zeros, static_grads)


def eager_backward(
    rec: Recording, grads: Sequence[torch.Tensor | None]
) -> list[torch.Tensor | None]:
    """This replay's backward without a graph, when recording one failed: autograd over the
    captured forward's retained graph, whose saved tensors hold this replay's activations.

    Returns one gradient per Function input after the call object: the tensor arguments, then
    the parameters (``None`` where eager gives none: outputs without a gradient are left out)."""
    read = [(out, g) for out, g in zip(rec.graph_outputs, grads, strict=True) if g is not None]
    result: list[torch.Tensor | None] = [None] * (len(rec.tensor_positions) + len(rec.params))
    if not read:
        return result
    if rec.fresh_warmup is not None:
        raise RuntimeError(
            "lucid-capture: this backward could not be recorded and cannot finish eagerly: the "
            "recorded forward runs PyTorch's memory-efficient attention with dropout, whose "
            "backward reads the dropout seed the graph kept on the device as a host value "
            f"(nodes: {', '.join(device_seeded_nodes(rec.graph_outputs))}). Read the warning "
            "above for why recording failed, or turn capture off for this recorder"
        )
    with backward_context(rec.signature):
        got = _retained_grad(rec, [o for o, _ in read], [g for _, g in read])
    for slot, grad in zip(rec.target_slots(), got, strict=True):
        result[slot] = grad
    return result


def _retained_grad(
    rec: Recording, outputs: Sequence[torch.Tensor], grads: Sequence[torch.Tensor]
) -> list[torch.Tensor | None]:
    """Gradients of the targets through the captured forward's graph, which is kept for the
    next backward recording."""
    return list(
        torch.autograd.grad(
            outputs, rec.target_tensors, grads, allow_unused=True, retain_graph=True
        )
    )


def _reached(output: torch.Tensor, targets: Sequence[torch.Tensor]) -> frozenset[int]:
    """Indices of ``targets`` that autograd reaches from ``output`` (eager gives None elsewhere)."""
    grads = torch.autograd.grad(
        output, list(targets), torch.ones_like(output), allow_unused=True, retain_graph=True
    )
    return frozenset(i for i, g in enumerate(grads) if g is not None)
