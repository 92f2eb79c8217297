"""Argument types with their ranges, so the ``lucid`` parser refuses a bad value before setup.

jsonargparse reads each argument's type from the signature (``LucidDataModule``'s, the
re-declared Trainer batch limits) and checks a value against it while parsing: a value out of
range is refused in the usage message, naming the flag and the range, and ``--help`` shows the
type's name (``PositiveInt``, ``ImageSide`` ...). For mypy and for Python callers each type is
its base (an ``int`` passes), so the classes and the code that builds them stay plain.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__all__ = ["BatchLimit", "ImageSide", "NonNegativeInt", "PositiveInt", "check_image_side"]

IMAGE_STRIDE = 32  # the network's largest stride: a canvas side is a multiple of it


def check_image_side(value: int) -> int:
    """``value`` when it is a canvas side the network takes (a multiple of 32, at least 32)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected a whole number of pixels, got {value!r}")
    if value < IMAGE_STRIDE or value % IMAGE_STRIDE:
        raise ValueError(
            f"expected a multiple of {IMAGE_STRIDE} and >= {IMAGE_STRIDE}, got {value}"
        )
    return value


if TYPE_CHECKING:
    PositiveInt = int
    NonNegativeInt = int
    ImageSide = int
    BatchLimit = int | float
else:
    from jsonargparse.typing import ClosedUnitInterval, NonNegativeInt, PositiveInt, register_type

    class ImageSide(int):
        """A canvas side in pixels: a multiple of 32, at least 32."""

        def __new__(cls, value: object) -> ImageSide:
            number = value
            if isinstance(value, str) and value.strip().lstrip("-").isdigit():
                number = int(value)  # "-64" is a whole number, out of range
            return super().__new__(cls, check_image_side(number))  # type: ignore[arg-type]

    register_type(ImageSide, serializer=int, deserializer=ImageSide)
    BatchLimit = NonNegativeInt | ClosedUnitInterval  # a count, or a fraction 0.0-1.0
