"""Training augmentation: every stochastic transform is a ``*Params.sample`` and an ``apply``.

Order of the training pipeline (`TrainAugment`): mosaic or single image with the random affine
and letterbox fused (one resample) → mixup → copy-paste → HSV → horizontal flip. Validation uses
`letterbox` only.
"""

from lucid_train.data.augment.affine import AffineParams
from lucid_train.data.augment.config import NO_AUGMENT, AugmentConfig
from lucid_train.data.augment.copy_paste import CopyPasteParams, apply_copy_paste
from lucid_train.data.augment.flip import FlipParams, apply_flip, flip_targets
from lucid_train.data.augment.hsv import HsvParams, apply_hsv, jitter_levels
from lucid_train.data.augment.letterbox import LetterboxParams, letterbox
from lucid_train.data.augment.mixup import MixupParams, apply_mixup
from lucid_train.data.augment.mosaic import MosaicParams, TilePlacement
from lucid_train.data.augment.pipeline import GeometryParams, SampleParams, TrainAugment
from lucid_train.data.augment.warp import transform_targets, warp_image, warp_region_into

__all__ = [
    "NO_AUGMENT",
    "AffineParams",
    "AugmentConfig",
    "CopyPasteParams",
    "FlipParams",
    "GeometryParams",
    "HsvParams",
    "LetterboxParams",
    "MixupParams",
    "MosaicParams",
    "SampleParams",
    "TilePlacement",
    "TrainAugment",
    "apply_copy_paste",
    "apply_flip",
    "apply_hsv",
    "apply_mixup",
    "flip_targets",
    "jitter_levels",
    "letterbox",
    "transform_targets",
    "warp_image",
    "warp_region_into",
]
