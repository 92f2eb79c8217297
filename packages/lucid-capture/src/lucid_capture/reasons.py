"""Why a call ran eager instead of replaying a recording: one code per cause (DESIGN §3 rule 7)."""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    """A reason code. Each value is stable text, used in warnings, counters and summaries."""

    DISABLED = "disabled"
    NO_CUDA = "no CUDA"
    INFERENCE = "inference"
    PENDING_BACKWARD = "pending backward"
    SHAPE = "shape"
    DTYPE = "dtype"
    LAYOUT = "layout"
    DEVICE = "device"
    REQUIRES_GRAD = "requires_grad"
    AUTOCAST = "autocast"
    ARGUMENTS = "arguments"
    PARAMETERS_SWAPPED = "parameters swapped"
    OVER_CAPACITY = "over capacity"
    UNSUPPORTED_DTYPE = "unsupported dtype"
    CAPTURE_FAILED = "capture failed"
    RECORDING_LIMIT = "recording limit"

    @property
    def explanation(self) -> str:
        return _EXPLANATIONS[self]


_EXPLANATIONS = {
    Reason.DISABLED: "capture is turned off for this recorder",
    Reason.NO_CUDA: "CUDA graphs need CUDA tensors; this call ran on another device",
    Reason.INFERENCE: "grad mode is off or the module is in eval mode (validation, prediction)",
    Reason.PENDING_BACKWARD: "the last replay's backward has not run yet (two forwards before one "
    "backward); replaying now would overwrite the activations it needs",
    Reason.SHAPE: "an input's shape differs from the recording (e.g. a partial batch)",
    Reason.DTYPE: "an input's dtype differs from the recording",
    Reason.LAYOUT: "an input's strides differ from the recording (e.g. channels_last vs NCHW)",
    Reason.DEVICE: "an input lives on another device than the recording",
    Reason.REQUIRES_GRAD: "an input's requires_grad differs from the recording",
    Reason.AUTOCAST: "the autocast state (enabled, dtype) differs from the recording",
    Reason.ARGUMENTS: "a non-tensor argument differs from the value baked into the recording",
    Reason.PARAMETERS_SWAPPED: "the module's parameters are other tensors than at recording "
    "(e.g. load_state_dict(assign=True)); the recording retired and a new one is made",
    Reason.OVER_CAPACITY: "the targets do not fit the recorded capacity; padded to the batch's "
    "own size and run eager, nothing truncated",
    Reason.UNSUPPORTED_DTYPE: "an input's dtype cannot be recorded (complex, sparse or meta)",
    Reason.CAPTURE_FAILED: "recording raised; the recorder retired for the rest of the fit",
    Reason.RECORDING_LIMIT: "this recorder already made its maximum number of recordings",
}

# Reasons that are the normal course of training rather than a lost replay: counted, not warned.
QUIET = frozenset({Reason.INFERENCE, Reason.DISABLED})
