"""lucid-capture: record a model's forward, backward and loss as CUDA graphs and replay them,
so training ends bit for bit where eager training would.

The recorders run anywhere: without CUDA every call runs eager with reason ``no CUDA``. The
Lightning integration lives in :mod:`lucid_capture.lightning` (``lucid-capture[lightning]``).
"""

from lucid_capture.loss import LossRecorder
from lucid_capture.network import NetworkRecorder
from lucid_capture.reasons import Reason
from lucid_capture.recorder import Recorder
from lucid_capture.stats import CaptureStats, CaptureWarning

__version__ = "0.1.0"

__all__ = [
    "CaptureStats",
    "CaptureWarning",
    "LossRecorder",
    "NetworkRecorder",
    "Reason",
    "Recorder",
    "__version__",
]
