"""Training augmentation settings and the per-scale policy.

`AugmentConfig()` holds the authors' defaults of record (Ultralytics 8.4 ``default.yaml``: hsv
0.015 / 0.7 / 0.4, translate 0.1, scale 0.5, fliplr 0.5, mosaic 1.0, mixup 0, copy-paste 0 in
``flip`` mode, close-mosaic 10 epochs, no rotation, shear or vertical flip). `for_variant` applies
the YOLO26 per-scale policy from the recipe (scale / mixup / copy-paste by model size; see
``shared/reference/yolo26-recipe-facts.md`` §4.3 and assumptions.md D1).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal, get_args

from lucid_train.errors import SettingError, check_range

HsvRule = Literal["matrix", "authors"]

_SCALE_POLICY: dict[str, tuple[float, float, float]] = {
    # variant: (scale, mixup, copy_paste)
    "n": (0.5, 0.0, 0.1),
    "s": (0.9, 0.05, 0.15),
    "m": (0.9, 0.1, 0.4),
    "l": (0.9, 0.1, 0.5),
    "x": (0.9, 0.2, 0.6),
}


def _flag(name: str) -> str:
    return f"--data.augment.{name}"


def _spelled(name: str) -> str:
    """``mosaic (--data.augment.mosaic)``: the field and its flag, as `check_range` names them."""
    return f"{name} ({_flag(name)})"


@dataclass(frozen=True)
class AugmentConfig:
    """Probabilities and ranges of the training augmentation.

    Attributes:
        hsv_h, hsv_s, hsv_v: hue shift (fraction of the colour circle) and saturation / value gain
            ranges, each drawn uniformly in ``[-x, x]``.
        degrees, translate, scale, shear: random affine ranges (rotation degrees, translation as a
            fraction of the canvas, scale gain ``1 ± scale``, shear degrees).
        fliplr: probability of a horizontal flip.
        mosaic, mixup: probabilities of a 4-image mosaic and of blending a second sample.
        copy_paste: fraction of eligible polygon instances pasted mirrored (``flip`` mode).
        close_mosaic: number of final epochs trained without mosaic, mixup and copy-paste.
        min_size: instances narrower or lower than this many pixels after the warp are dropped.
        min_visible: instances keeping less than this fraction of their warped area are dropped.
        min_visible_polygons: the same for instances with polygons (segmentation). The authors
            filter at 0.01 where an image has segments and at 0.1 otherwise (assumptions D6).
        fill: the grey value of padding.
        hsv_rule: how the HSV draws are applied (assumptions D13): ``matrix``, one colour matrix
            (the default: faster, and on the held-out ``skimage-shapes`` set no worse), or
            ``authors``, their 8-bit HSV round trip pixel for pixel.
    """

    hsv_h: float = 0.015
    hsv_s: float = 0.7
    hsv_v: float = 0.4
    degrees: float = 0.0
    translate: float = 0.1
    scale: float = 0.5
    shear: float = 0.0
    fliplr: float = 0.5
    mosaic: float = 1.0
    mixup: float = 0.0
    copy_paste: float = 0.0
    close_mosaic: int = 10
    min_size: float = 2.0
    min_visible: float = 0.1
    min_visible_polygons: float = 0.01
    fill: int = 114
    hsv_rule: HsvRule = "matrix"

    def __post_init__(self) -> None:
        # each refused naming its flag (`SettingError`, a ValueError): the command line gives
        # one ``lucid fit: error:`` line, not jsonargparse's "Union subtypes" traceback
        for name in (
            "fliplr",
            "mosaic",
            "mixup",
            "copy_paste",
            "min_visible",
            "min_visible_polygons",
        ):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise SettingError(f"{_spelled(name)}: expected a probability in [0, 1], got {v:g}")
        for name in (
            "hsv_h",
            "hsv_s",
            "hsv_v",
            "degrees",
            "translate",
            "scale",
            "shear",
            "min_size",
            "close_mosaic",
        ):
            check_range(name, getattr(self, name), low=0.0, flag=_flag(name))
        check_range("fill", self.fill, low=0.0, high=255.0, flag=_flag("fill"))
        if self.scale >= 1.0:
            raise SettingError(
                f"{_spelled('scale')}: expected >= 0 and < 1 (the gain 1 ± scale must stay "
                f"positive), got {self.scale:g}"
            )
        rules = get_args(HsvRule)
        if self.hsv_rule not in rules:
            raise SettingError(
                f"{_spelled('hsv_rule')}: expected one of {rules}, got {self.hsv_rule!r}"
            )

    def min_visible_for(self, polygons: bool) -> float:
        """The visible-area floor of a sample's instances: ``min_visible_polygons`` when they
        carry polygons, else ``min_visible``."""
        return self.min_visible_polygons if polygons else self.min_visible

    @classmethod
    def for_variant(cls, variant: str, **overrides: Any) -> AugmentConfig:
        """Defaults with the per-scale policy of ``variant`` (``n s m l x``) applied."""
        if variant not in _SCALE_POLICY:
            raise ValueError(
                f"unknown model variant {variant!r}; expected one of {sorted(_SCALE_POLICY)}"
            )
        scale, mixup, copy_paste = _SCALE_POLICY[variant]
        return replace(cls(scale=scale, mixup=mixup, copy_paste=copy_paste), **overrides)

    def without_mosaic(self) -> AugmentConfig:
        """The close-mosaic phase: no mosaic, mixup or copy-paste, everything else unchanged."""
        return replace(self, mosaic=0.0, mixup=0.0, copy_paste=0.0)


NO_AUGMENT = AugmentConfig(
    hsv_h=0.0,
    hsv_s=0.0,
    hsv_v=0.0,
    translate=0.0,
    scale=0.0,
    fliplr=0.0,
    mosaic=0.0,
    close_mosaic=0,
)
"""Letterbox only; useful for tests and for overfitting checks."""
