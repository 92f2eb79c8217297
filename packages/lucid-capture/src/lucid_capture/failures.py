"""Why a recording raised, as a reason code, and where in the caller's code it happened.

A capture refuses some work outright: a host sync, a copy from pageable CPU memory, a draw from a
CUDA generator the graph does not know. Each has its own code (and fix) instead of the catch-all
``capture failed``; a host generator drawn from while recording is caught after the capture by
comparing its state (:func:`host_rng_state`), because a capture does not refuse it.
"""

from __future__ import annotations

import os
import random
import sys
import traceback
from pathlib import Path
from typing import Any

import torch

from lucid_capture.reasons import Reason


class HostRandomnessError(RuntimeError):
    """The recorded call drew from a host random generator: its draw would be baked in."""


class UnregisteredGeneratorError(RuntimeError):
    """The call drew from a generator the recording was not given (``generator=g``): a graph
    would not advance it. Raised after warm-up, which put that generator back as it found it."""


class GradInputWrittenError(RuntimeError):
    """The call wrote in place into an input that requires grad: a replay writes the recording's
    copy, and the write cannot be handed back through the caller's autograd graph."""


# Substrings of the errors torch and the CUDA runtime raise for work a capture cannot hold.
_CPU_COPY = "Cannot copy between CPU and CUDA tensors during CUDA graph capture"
_UNREGISTERED = "CUDA generator not in capture mode"
_SYNC = (
    "operation not permitted when stream is capturing",
    "during CUDA graph capture",
    "cudaErrorStreamCapture",
    "would make the legacy stream depend on a capturing",
    "operation failed due to a previous error during capture",
)


def _chain(error: BaseException) -> list[BaseException]:
    """``error`` and the errors it was raised during, the original last: a capture that a CUDA
    call invalidated raises again at its end, over the error that named the cause."""
    chain: list[BaseException] = []
    while error is not None and error not in chain:
        chain.append(error)
        error = error.__cause__ or error.__context__  # type: ignore[assignment]
    return chain


def failure_reason(error: BaseException) -> Reason:
    """The reason code of an exception raised while recording."""
    chain = _chain(error)
    if any(isinstance(e, HostRandomnessError) for e in chain):
        return Reason.HOST_RNG
    if any(isinstance(e, UnregisteredGeneratorError) for e in chain):
        return Reason.UNREGISTERED_RNG
    if any(isinstance(e, GradInputWrittenError) for e in chain):
        return Reason.WRITES_GRAD_INPUT
    texts = [str(e) for e in chain]
    if any(_CPU_COPY in text for text in texts):
        return Reason.CPU_TENSOR
    if any(_UNREGISTERED in text for text in texts):
        return Reason.UNREGISTERED_RNG
    if any(mark in text for text in texts for mark in _SYNC):
        return Reason.HOST_SYNC
    return Reason.CAPTURE_FAILED


# Folders whose frames are not the user's (with the separator: torchvision is not torch).
_OURS = tuple(str(Path(m).parent) + os.sep for m in (torch.__file__, __file__))


def internal(filename: str) -> bool:
    """Whether a frame of ``filename`` is torch's or lucid-capture's (not the user's model)."""
    return filename.startswith(_OURS)


def root_cause(error: BaseException) -> BaseException:
    """The error that started ``error``'s chain: the one naming what the capture refused."""
    return _chain(error)[-1]


def caller_line(error: BaseException) -> str:
    """``file:line in function`` of the innermost frame outside torch and lucid-capture, or ``""``.

    That is the line of the user's model that did what the capture refused."""
    frames = traceback.extract_tb(root_cause(error).__traceback__)
    for frame in reversed(frames):
        if not internal(frame.filename):
            return f"{frame.filename}:{frame.lineno} in {frame.name}"
    return ""


def host_rng_state() -> tuple[Any, ...]:
    """The state of every host generator a model might draw from: torch's CPU generator,
    Python's ``random`` and, where numpy is already imported, numpy's global generator."""
    numpy = sys.modules.get("numpy")
    np_state = None
    if numpy is not None:
        name, keys, pos, has_gauss, cached = numpy.random.get_state()
        np_state = (name, keys.tobytes(), pos, has_gauss, cached)
    return (bytes(torch.get_rng_state().numpy()), random.getstate(), np_state)


def set_host_rng_state(state: tuple[Any, ...]) -> None:
    cpu, py, np_state = state
    torch.set_rng_state(torch.frombuffer(bytearray(cpu), dtype=torch.uint8))
    random.setstate(py)
    numpy = sys.modules.get("numpy")
    if numpy is not None and np_state is not None:
        name, keys, pos, has_gauss, cached = np_state
        array = numpy.frombuffer(keys, dtype=numpy.uint32).copy()
        numpy.random.set_state((name, array, pos, has_gauss, cached))
