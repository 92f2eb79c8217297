"""Rule mutations for the capture suite: ``LUCID_CAPTURE_MUTATION=<rule>`` removes one rule.

Each DESIGN §3 rule must be held by a test that fails without it. Running the GPU suite once per
mutation (``python -m lucid_testing.mutations``) shows which tests do; docs/capture.md records it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

import pytest
import torch

from lucid_capture import network, recorder, recording, replay
from lucid_capture.recorder import Recorder
from lucid_capture.signature import CallSignature
from lucid_capture.stats import CaptureStats
from lucid_testing.mutations import apply_mutation


@contextlib.contextmanager
def _no_restore(
    buffers: Sequence[torch.Tensor],
    device: torch.device,
    generators: Sequence[torch.Generator] = (),
) -> Iterator[None]:
    yield


def _reach_everything(output: torch.Tensor, targets: Sequence[torch.Tensor]) -> frozenset[int]:
    return frozenset(range(len(targets)))


def _output_layout(
    grad: torch.Tensor | None, output: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, tuple[int, ...]]:
    buffer = torch.empty_like(output)  # the layout of the output, not of the gradient
    return buffer, buffer, ()


@contextlib.contextmanager
def _bare_capture(
    graph: torch.cuda.CUDAGraph, pool: object, stream: torch.cuda.Stream
) -> Iterator[None]:
    with torch.cuda.graph(graph, pool=pool, stream=stream, capture_error_mode="thread_local"):
        yield


def _lifecycle(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(Recorder, "reset", lambda self: None)
    mp.setattr(Recorder, "release", lambda self: None)


MUTATIONS: dict[str, Callable[[pytest.MonkeyPatch], None]] = {
    "rule1-live-gradients": lambda mp: mp.setattr(
        replay, "hand_out", lambda statics: [g.detach() for g in statics]
    ),
    "rule2-hold": lambda mp: mp.setattr(Recorder, "_hold", lambda self, hold, output: None),
    "rule3-signatures": lambda mp: (
        mp.setattr(CallSignature, "mismatch", lambda self, live: None),
        mp.setattr(recorder, "parameter_identity", lambda params: ()),
    ),
    "rule4-precision": lambda mp: mp.setattr(
        recording, "backward_context", recording.forward_context
    ),
    "rule5-warmup-hygiene": lambda mp: mp.setattr(recording, "preserved_state", _no_restore),
    "rule6-unread-outputs": lambda mp: mp.setattr(recording, "_reached", _reach_everything),
    "rule7-reasons": lambda mp: mp.setattr(CaptureStats, "count_eager", lambda self, *a: None),
    "rule7-failed-capture-cleanup": lambda mp: mp.setattr(recording, "_captured", _bare_capture),
    "rule8-lifecycle": _lifecycle,
    "rule9-gradient-layout": lambda mp: mp.setattr(recording, "_gradient_buffer", _output_layout),
    # The zoo's refusals (test_zoo_parity_gpu.py): without them the draw or the hook is frozen.
    "host-rng-refusal": lambda mp: (
        mp.setattr(recording, "host_rng_state", lambda: ()),
        mp.setattr(recording, "set_host_rng_state", lambda state: None),
    ),
    "hooks-refusal": lambda mp: mp.setattr(network, "hooked", lambda module: False),
    "accumulator-stream": lambda mp: mp.setattr(Recorder, "_accumulator_stream", lambda s: None),
    "in-place-caller-wait": lambda mp: mp.setattr(replay, "_caller_waits_for", lambda s: None),
    # Inputs the forward writes in place (test_inputs_written_gpu.py): unseen, the caller's
    # tensor keeps its old values and a grad input's write is lost.
    "inputs-written": lambda mp: mp.setattr(recording, "_written", lambda tensors, versions: ()),
}


@pytest.fixture(autouse=True)
def _capture_mutation(monkeypatch: pytest.MonkeyPatch) -> str | None:
    return apply_mutation("LUCID_CAPTURE_MUTATION", MUTATIONS, monkeypatch)
