"""lucid_kernels: ragged per-image tensors and float32 autocast islands.

* :func:`host_split` moves per-image tensors to the host in one transfer.
* :func:`pad_to_capacity` / :func:`unpad` lay ragged targets out at a fixed capacity with a
  validity mask, reporting (never truncating) what does not fit; :func:`pad_positions` lays out
  flat row positions from the per-image counts alone.
* :func:`attention_weights`: attention logits and softmax in at least float32 under autocast.
* :func:`rle_negative_log_likelihood`: the keypoint RLE density in at least float32 under
  autocast.
* :func:`ciou_kernel`: the assigner's pairwise Complete IoU in one pass on CUDA (Triton), bit for
  bit the elementwise form; :func:`ciou_kernel_applies` says when it may stand in.
* :func:`batch_norm_silu`: training-mode BatchNorm and SiLU fused on channels-last CUDA tensors
  (Triton), deterministic; :func:`batch_norm_silu_applies` says when it may stand in.
"""

from lucid_kernels.attention import attention_weights
from lucid_kernels.batch_norm_act import batch_norm_silu, batch_norm_silu_applies
from lucid_kernels.box_overlap import ciou_kernel, ciou_kernel_applies
from lucid_kernels.density import rle_negative_log_likelihood, standard_normal_log_prob
from lucid_kernels.host_split import host_split
from lucid_kernels.padding import (
    CapacityExceededError,
    CapacityReport,
    Padded,
    capacity_report,
    pad_positions,
    pad_to_capacity,
    unpad,
)

__version__ = "0.1.0"

__all__ = [
    "CapacityExceededError",
    "CapacityReport",
    "Padded",
    "__version__",
    "attention_weights",
    "batch_norm_silu",
    "batch_norm_silu_applies",
    "capacity_report",
    "ciou_kernel",
    "ciou_kernel_applies",
    "host_split",
    "pad_positions",
    "pad_to_capacity",
    "rle_negative_log_likelihood",
    "standard_normal_log_prob",
    "unpad",
]
