"""Routing between replay and eager for one recorded callable, and the rules that guard replay.

``Recorder`` is the mechanism behind :class:`~lucid_capture.NetworkRecorder` and
:class:`~lucid_capture.LossRecorder`. Each call goes one of two ways:

- **replay**: the call matches the recording (rule 3) and nothing is pending (rule 2); or
- **eager**: the wrapped callable runs as if there were no recorder, and the reason is counted
  (rule 7).

The recording is made on the first call that could replay, and freed by :meth:`Recorder.reset`
(rule 8). Gradients a replay hands out are copies (rule 1); its outputs are the recording's own
buffers, so an output kept past the next forward must be cloned by whoever keeps it.
"""

from __future__ import annotations

import contextlib
import warnings
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from lucid_capture.failures import caller_line, failure_reason, root_cause
from lucid_capture.reasons import Reason
from lucid_capture.recording import Recording, record
from lucid_capture.replay import Replay, ReplayCall
from lucid_capture.signature import CallSignature, parameter_identity, unsupported
from lucid_capture.stats import CaptureStats, CaptureWarning
from lucid_capture.tree import Rebuild, describe, flatten, unflatten


@contextlib.contextmanager
def on_stream(stream: torch.cuda.Stream | None) -> Iterator[None]:
    """Run the body on ``stream``, ordered after the caller's stream's work so far, with the
    caller's stream ordered after it on exit; ``None`` runs it where it is."""
    if stream is None:
        yield
        return
    caller = torch.cuda.current_stream(stream.device)
    stream.wait_stream(caller)
    try:
        with torch.cuda.stream(stream):
            yield
    finally:
        caller.wait_stream(stream)


def _used_by_caller(out: Any, stream: torch.cuda.Stream) -> None:
    """An eager call's outputs were allocated on ``stream`` and are read on the caller's: tell the
    allocator, so a block the caller frees is not handed to ``stream`` while still in use."""
    caller = torch.cuda.current_stream(stream.device)
    for t in flatten(out)[0]:
        if t.is_cuda:
            t.record_stream(caller)


class _Hold:
    """A token alive while a replay's backward is pending."""


@dataclass(frozen=True)
class Structure:
    """How a call's tensors nest in its arguments, with the constants among them."""

    key: str


class Recorder:
    """Record ``fn`` as CUDA graphs on first use and replay it while calls match.

    Args:
        fn: the callable to record; its tensor arguments are copied into static buffers, its
            non-tensor arguments are baked into the recording as constants.
        params: returns the tensors ``fn`` reads besides its arguments (a module's parameters);
            gradients flow to them through autograd as in eager.
        buffers: returns the tensors ``fn`` updates in place (BatchNorm running statistics);
            warm-up's changes to them are undone.
        training: returns whether ``fn`` is in training mode; otherwise calls run eager.
        name: how this recorder is named in warnings and summaries.
        warmup_iters: forward/backward passes before capture (cuDNN and allocator warm-up).
        max_recordings: recordings allowed per fit (a retirement makes the next one).
        enabled: ``False`` runs every call eager with reason ``disabled``.
        grads_in_place: a replayed backward writes the parameters' gradients into ``.grad``
            with one multi-tensor add or copy instead of one autograd accumulator each (the
            same bits, less host work per backward). Turn it on only where this recorder is
            the parameters' only source of gradient in a backward and no C++ hook watches
            their accumulation (``DistributedDataParallel``); parameters with Python hooks
            keep autograd's path (``replay.write_grads``).
        generators: CUDA generators ``fn`` draws from besides the device's default one (which
            every graph knows); registered with each recording so replays advance them as eager
            draws would. A draw from one not listed refuses the recording (``unregistered RNG``).
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        params: Callable[[], Sequence[torch.Tensor]] = tuple,
        buffers: Callable[[], Sequence[torch.Tensor]] = tuple,
        training: Callable[[], bool] = lambda: True,
        name: str = "recorder",
        warmup_iters: int = 3,
        max_recordings: int = 4,
        enabled: bool = True,
        grads_in_place: bool = False,
        generators: Sequence[torch.Generator] = (),
    ) -> None:
        if not callable(fn):
            raise TypeError(f"lucid-capture [{name}]: records a callable, got {fn!r:.60}")
        check_count(name, "warmup_iters", warmup_iters, least=1)
        check_count(name, "max_recordings", max_recordings, least=1)
        self.fn = fn
        self._params = params
        self._buffers = buffers
        self._training = training
        self.name = name
        self.warmup_iters = warmup_iters
        self.max_recordings = max_recordings
        self.enabled = enabled
        self.grads_in_place = grads_in_place
        self.generators = _cuda_generators(name, generators)
        self.stats = CaptureStats(name)
        self._recording: Recording | None = None
        self._stream: torch.cuda.Stream | None = None
        self._pending: int | None = None
        self._failed: Reason | None = None  # why recording raised, for the rest of the fit

    # -- public ---------------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        # Arguments may nest tensors in tuples, dicts or dataclasses: the recording sees their
        # tensors, and their structure (constants and keyword names included) as one baked-in
        # argument.
        self._check_call(args)
        tree: Any = (args, dict(sorted(kwargs.items()))) if kwargs else args  # any order
        leaves, rebuild = flatten(tree)
        flat = (Structure(describe(tree)), *leaves)
        reason = self._route(flat, args, rebuild, keywords=bool(kwargs))
        stream = self._accumulator_stream()
        with on_stream(stream):
            if reason is None:
                return self._replay(flat)  # outputs are the recording's buffers: never freed
            self.stats.count_eager(reason, self._detail(reason, flat))
            out = self.fn(*args, **kwargs)
        if stream is not None:
            _used_by_caller(out, stream)
        return out

    @property
    def recorded(self) -> bool:
        return self._recording is not None

    @property
    def pending_backward(self) -> bool:
        return self._pending is not None

    def reset(self) -> None:
        """Free the recording and its memory pool and zero the counters (a new fit starts here)."""
        self.release()
        self.stats.reset()
        self._failed = None

    def release(self) -> None:
        """Free the recording and its memory pool, keeping the counters. Waits for the device
        first: a replay still queued reads the buffers freed here."""
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()  # type: ignore[no-untyped-call]
        if cuda:
            torch.cuda.synchronize()
        if self._recording is not None:
            self._recording.release()
            self._recording = None
        self._pending = None
        self._stream = None
        if cuda:
            torch.cuda.empty_cache()

    def summary(self) -> str:
        return self.stats.summary()

    def parameters(self) -> Sequence[torch.Tensor]:
        """The tensors ``fn`` reads besides its arguments."""
        return self._params()

    def buffers(self) -> Sequence[torch.Tensor]:
        """The tensors ``fn`` updates in place."""
        return self._buffers()

    def is_training(self) -> bool:
        return self._training()

    # -- routing --------------------------------------------------------------------------

    def _route(
        self, args: Sequence[Any], call: Sequence[Any], rebuild: Rebuild, *, keywords: bool
    ) -> Reason | None:
        """``None`` to replay (recording first if needed), else why this call runs eager.

        ``args`` is the flat call (structure, then tensors); ``call`` the positional arguments as
        given; ``keywords`` whether ``rebuild`` makes ``(args, kwargs)`` rather than ``args``."""
        if not self.enabled:
            return Reason.DISABLED
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        cuda = [t for t in tensors if t.is_cuda]
        if not torch.cuda.is_available() or not cuda:
            return Reason.NO_CUDA
        if any(t.device.type == "cpu" for t in tensors):
            return Reason.CPU_TENSOR
        if any(t.device != cuda[0].device for t in tensors):
            return Reason.DEVICE
        if not torch.is_grad_enabled() or not self.is_training():
            return Reason.INFERENCE
        if self._pending is not None:  # rule 2: the hold
            return Reason.PENDING_BACKWARD
        if self._failed is not None:
            return self._failed
        if unsupported(args):
            return Reason.UNSUPPORTED_DTYPE
        reason = self._early_mismatch(call)
        if reason is not None:
            return reason
        params = tuple(self.parameters())
        if self._recording is not None and self._recording.identity != parameter_identity(params):
            self._retire(Reason.PARAMETERS_SWAPPED)
        if self._recording is not None:
            return self._recording.signature.mismatch(CallSignature.of(args))
        if self.stats.recordings >= self.max_recordings:
            return Reason.RECORDING_LIMIT
        return self._record(args, params, rebuild, keywords)

    def _accumulator_stream(self) -> torch.cuda.Stream | None:
        """The stream this recorder's calls run on: its capture stream while a recording is alive.

        Capture makes the parameters' AccumulateGrad nodes on the capture stream, and the
        recording's retained autograd graph keeps them alive for the fit. A node that hands those
        accumulators a gradient from another stream makes autograd warn ("The AccumulateGrad
        node's stream does not match...") and pay an event, a stream wait and a ``record_stream``
        per parameter per backward. Running every later call (replay or eager) on the capture
        stream too puts the producer of the parameters' gradients on their accumulators' stream;
        the caller's stream is joined before and after (docs/capture.md, "Streams")."""
        return self._stream if self._recording is not None else None

    def _early_mismatch(self, args: Sequence[Any]) -> Reason | None:
        """A subclass's own check, ahead of the signature (e.g. target capacity)."""
        return None

    def _check_call(self, args: Sequence[Any]) -> None:
        """A subclass's check of the call's arguments against its own settings, on every call
        and every device, so a misconfiguration fails on the CPU as it would on the GPU."""

    def _detail(self, reason: Reason, args: Sequence[Any]) -> str:
        if self._recording is None or reason not in (Reason.SHAPE, Reason.LAYOUT, Reason.DTYPE):
            return ""
        now = [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]
        was = [
            tuple(self._recording.static_args[i].shape) for i in self._recording.tensor_positions
        ]
        return f"recorded shapes {was}, called with {now}"

    def _record(
        self,
        args: Sequence[Any],
        params: tuple[torch.Tensor, ...],
        rebuild: Rebuild,
        keywords: bool = False,
    ) -> Reason | None:
        device = next(a for a in args if isinstance(a, torch.Tensor)).device
        if self._stream is None or self._stream.device != device:
            self._stream = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
        try:
            self._recording = record(
                lambda _, *leaves: _invoke(self.fn, unflatten(rebuild, list(leaves)), keywords),
                args,
                params,
                tuple(self.buffers()),
                stream=self._stream,
                warmup_iters=self.warmup_iters,
                generators=self.generators,
            )
        except Exception as error:  # a failed capture can leave the context unusable: stop here
            reason = self._failed = failure_reason(error)
            self._recording = None
            torch.cuda.synchronize()
            where, cause = caller_line(error), root_cause(error)
            warnings.warn(
                f"lucid-capture [{self.name}]: recording failed ({reason.value}), running eager "
                f"for the rest of the fit: {type(cause).__name__}: {cause}"
                + (f" [at {where}]" if where else ""),
                CaptureWarning,
                stacklevel=4,
            )
            return reason
        self.stats.recordings += 1
        return None

    def _backward_failed(self, error: Exception) -> None:
        """A backward recording raised (inside a replayed backward, which then finishes eagerly):
        every later call of this fit runs eager, as after a failed forward recording."""
        reason = self._failed = failure_reason(error)
        torch.cuda.synchronize()
        where, cause = caller_line(error), root_cause(error)
        detail = f"recording a backward raised {type(cause).__name__}: {cause}"
        self.stats.count_eager(reason, detail + (f" at {where}" if where else ""))

    def _retire(self, reason: Reason) -> None:
        assert self._recording is not None
        self._recording.release()
        self._recording = None
        self.stats.retire(reason)

    # -- replay ---------------------------------------------------------------------------

    def _replay(self, args: Sequence[Any]) -> Any:
        rec = self._recording
        assert rec is not None
        live = [args[i] for i in rec.tensor_positions]
        hold = _Hold()
        call = ReplayCall(rec, self.stats, hold, self._backward_failed, self.grads_in_place)
        outputs = Replay.apply(call, *live, *rec.params)  # type: ignore[no-untyped-call]
        if rec.differentiable and any(outputs[i].requires_grad for i in rec.differentiable):
            self._hold(hold, outputs[rec.differentiable[0]])
        return unflatten(rec.rebuild, list(outputs))

    def _hold(self, hold: _Hold, output: torch.Tensor) -> None:
        """Rule 2: later forwards run eager until this replay's backward has run."""
        self._pending = token = id(hold)

        def release(*_: object) -> None:
            if self._pending == token:
                self._pending = None

        node = output.grad_fn
        assert node is not None
        node.register_hook(release)
        # An output dropped without a backward frees the node, its call and the hold with it.
        weakref.finalize(hold, release)

    # -- copies ---------------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError(
            f"lucid-capture [{self.name}]: a recorder holds CUDA graphs and cannot be pickled; "
            "keep it out of what you save (state_dict keys are the module's own)"
        )

    def __deepcopy__(self, memo: dict[int, Any]) -> Recorder:
        """A copy (e.g. an EMA model's) starts unrecorded, around copies of what it wraps."""
        import copy

        clone = object.__new__(type(self))
        for key, value in self.__dict__.items():
            if key in ("_recording", "_stream", "_pending"):
                clone.__dict__[key] = None
            elif key == "stats":
                clone.__dict__[key] = CaptureStats(self.name)
            else:
                clone.__dict__[key] = copy.deepcopy(value, memo)
        clone._failed = None
        return clone


def _invoke(fn: Callable[..., Any], call: Any, keywords: bool) -> Any:
    """``fn`` applied to a rebuilt call: ``(args, kwargs)`` where ``keywords``, else ``args``."""
    if keywords:
        args, kwargs = call
        return fn(*args, **kwargs)
    return fn(*call)


def check_count(name: str, what: str, value: object, *, least: int) -> None:
    """Refuse a setting that is not an integer of at least ``least``, naming it."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"lucid-capture [{name}]: {what} must be an integer, got {value!r:.40}")
    if value < least:
        raise ValueError(f"lucid-capture [{name}]: {what} must be at least {least}, got {value}")


def _cuda_generators(name: str, generators: object) -> tuple[torch.Generator, ...]:
    """``generators`` as a tuple, refusing anything but CUDA generators: a graph draws on the
    device, and a CPU generator in a recording crashes the process rather than raising."""
    if isinstance(generators, torch.Generator) or not isinstance(generators, (list, tuple)):
        raise TypeError(
            f"lucid-capture [{name}]: generators is a list of CUDA generators, got "
            f"{generators!r:.60}; pass [g] for one"
        )
    for g in generators:
        if not isinstance(g, torch.Generator) or g.device.type != "cuda":
            raise ValueError(
                f"lucid-capture [{name}]: generators holds {g!r:.60}; only CUDA generators "
                "(torch.Generator(device='cuda')) can be drawn from inside a recording"
            )
    return tuple(generators)
