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
    HOST_SYNC = "host sync"
    CPU_TENSOR = "CPU tensor"
    HOST_RNG = "host RNG"
    UNREGISTERED_RNG = "unregistered RNG"
    HOOKS = "hooks"
    WRITES_GRAD_INPUT = "writes a grad input"

    @property
    def explanation(self) -> str:
        return _EXPLANATIONS[self]

    @property
    def fix(self) -> str:
        """One line on how to make the call replay, or ``""`` where eager is the intended route."""
        return _FIXES.get(self, "")


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
    Reason.HOST_SYNC: "recording raised: the call waits on the device or reads a device value "
    "on the host (.item(), `if tensor:`, nonzero, boolean indexing), which a CUDA graph cannot "
    "hold; the recorder runs eager for the rest of the fit",
    Reason.CPU_TENSOR: "a tensor lives on the CPU: an argument beside CUDA ones, or one the call "
    "copies to the GPU while recorded (a graph would replay the first copy's values)",
    Reason.HOST_RNG: "the recorded call drew from a host generator (torch's CPU generator, "
    "`random` or numpy): the graph would replay that one draw every step; eager for the fit",
    Reason.UNREGISTERED_RNG: "the call draws from a CUDA generator other than the default one, "
    "which the recording was not told about; eager for the fit",
    Reason.HOOKS: "a submodule (or a global module hook) has Python forward or backward hooks, "
    "which run once at recording and never on replay",
    Reason.WRITES_GRAD_INPUT: "the call writes in place into an input that requires grad; a "
    "replay cannot put that write into the caller's autograd graph; eager for the fit",
}

_FIXES = {
    Reason.NO_CUDA: "move the module and its inputs to a CUDA device",
    Reason.PENDING_BACKWARD: "run each forward's backward before the next forward through the same "
    "recorder",
    Reason.SHAPE: "keep batches one shape (drop_last=True, pad to a fixed size); a partial last "
    "batch running eager is expected",
    Reason.DTYPE: "cast inputs to one dtype before the call",
    Reason.LAYOUT: "give inputs one memory layout every call (.contiguous() or channels_last)",
    Reason.DEVICE: "keep every input on one device",
    Reason.REQUIRES_GRAD: "set requires_grad the same way on every call",
    Reason.AUTOCAST: "call under one autocast state, or use one recorder per precision",
    Reason.ARGUMENTS: "pass values that change between calls as tensors, not Python values",
    Reason.PARAMETERS_SWAPPED: "load weights in place: load_state_dict without assign=True",
    Reason.OVER_CAPACITY: "raise capacity to the largest padded row count you expect",
    Reason.CAPTURE_FAILED: "read the warning's error and the source line it names",
    Reason.RECORDING_LIMIT: "remove what changes the call signature, or raise max_recordings",
    Reason.HOST_SYNC: "keep values on the device: torch.where for `if tensor:`, masks for boolean "
    "indexing and nonzero, no .item()/.cpu()/.tolist() inside the call",
    Reason.CPU_TENSOR: "move it to the GPU before the call; a tensor made from Python values "
    "inside the call (torch.tensor(values, device=...)) is a host copy too: make it once, as a "
    "buffer",
    Reason.HOST_RNG: "draw on the device (torch.rand(..., device=x.device)); CUDA draws advance "
    "with every replay as in eager",
    Reason.UNREGISTERED_RNG: "hand the generator to the recorder: NetworkRecorder(net, "
    "generators=[g])",
    Reason.HOOKS: "remove the hooks while training, or pass allow_hooks=True if they only do "
    "tensor work (no Python state, no side effects)",
    Reason.WRITES_GRAD_INPUT: "write into a copy (x = x.clone()) or return a new tensor",
}

# Reasons that are the normal course of training rather than a lost replay: counted, not warned.
QUIET = frozenset({Reason.INFERENCE, Reason.DISABLED})
