"""lucid_models: the YOLO26 family (detect, segment, pose, obb) in plain PyTorch.

* :func:`build_model` builds ``yolo26{n,s,m,l,x}`` for a task; :class:`YOLO26` is the network and
  :meth:`YOLO26.deploy` its inference-only :class:`DeployView`.
* Forward returns a :class:`ModelOutput` of two :class:`BranchOutput` records.
* :func:`topk_decode` (end-to-end, one-to-one) and :func:`nms_decode` (one-to-many + NMS) give
  fixed-shape :class:`Detections`; :func:`decode_masks` turns them into instance masks, and
  :mod:`lucid_models.postprocessing` maps one image's masks back to its source pixels.
* :func:`export_onnx` writes the deploy view with the top-k decode to ONNX (fixed or dynamic
  batch and image size); :func:`verify_onnx` checks a written file against PyTorch.
* :mod:`lucid_models.counts` counts parameters and FLOPs and writes the golden file.
"""

from lucid_models.anchors import STRIDES, make_anchors
from lucid_models.build import build_model
from lucid_models.decode import (
    assemble_masks,
    decode_boxes,
    decode_keypoints,
    decode_masks,
    decode_rotated,
    nms_decode,
    topk_decode,
)
from lucid_models.deploy import DeployView
from lucid_models.export import ONNX_OPSET, ONNX_OPSETS, OnnxCheck, export_onnx, verify_onnx
from lucid_models.model import YOLO26
from lucid_models.nms import batched_nms, box_iou, rotated_fast_nms
from lucid_models.outputs import BranchOutput, Detections, ModelOutput, Task
from lucid_models.scales import SCALES, Scale

__version__ = "0.1.0"

__all__ = [
    "ONNX_OPSET",
    "ONNX_OPSETS",
    "SCALES",
    "STRIDES",
    "YOLO26",
    "BranchOutput",
    "DeployView",
    "Detections",
    "ModelOutput",
    "OnnxCheck",
    "Scale",
    "Task",
    "__version__",
    "assemble_masks",
    "batched_nms",
    "box_iou",
    "build_model",
    "decode_boxes",
    "decode_keypoints",
    "decode_masks",
    "decode_rotated",
    "export_onnx",
    "make_anchors",
    "nms_decode",
    "rotated_fast_nms",
    "topk_decode",
    "verify_onnx",
]
