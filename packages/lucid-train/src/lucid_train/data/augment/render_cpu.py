"""The CPU renderer: a `PixelPlan` painted with Pillow, in the loader worker.

Resampling is Pillow's bilinear affine without antialiasing (assumptions.md D5), straight from
each decoded source: a letterboxed sample is one warp of the whole image, a mosaic tile is warped
from its source region only. Mixup blends, copy-paste pastes from the mirrored image through the
rings' mask, then the HSV jitter (`hsv.apply_hsv`, by the config's rule) and the flip; every
step rounds to 8 bits as Pillow does.
`lucid_train.data.augment.render_device` paints the same plan on the accelerator.
"""

from __future__ import annotations

from collections.abc import Mapping

from PIL import Image

from lucid_train.data.augment.copy_paste import paste_mirrored
from lucid_train.data.augment.hsv import apply_hsv
from lucid_train.data.augment.plan import PixelPlan, Tile
from lucid_train.data.augment.warp import warp_image, warp_region_into


def render_plane(
    tiles: tuple[Tile, ...], images: Mapping[int, Image.Image], size: int, fill: int
) -> Image.Image:
    """One plane: ``tiles`` painted in order on a ``size`` x ``size`` ``fill`` grey square."""
    if len(tiles) == 1 and tiles[0].region is None:
        return warp_image(images[tiles[0].source], tiles[0].matrix, (size, size), fill)
    canvas = Image.new("RGB", (size, size), (fill,) * 3)
    for tile in tiles:
        image = images[tile.source]
        region = tile.region or (0.0, 0.0, float(image.width), float(image.height))
        warp_region_into(canvas, image, tile.matrix, region, fill)
    return canvas


def render_cpu(plan: PixelPlan, images: Mapping[int, Image.Image]) -> Image.Image:
    """The sample's ``S`` x ``S`` RGB image; ``images`` holds every source in ``plan.sources``."""
    image = render_plane(plan.base, images, plan.size, plan.fill)
    if plan.mixup is not None:
        tiles, ratio = plan.mixup
        other = render_plane(tiles, images, plan.size, plan.fill)
        image = Image.blend(image, other, 1.0 - ratio)
    if plan.paste:
        image = paste_mirrored(image, list(plan.paste))
    image = apply_hsv(image, plan.hsv)
    return image.transpose(Image.Transpose.FLIP_LEFT_RIGHT) if plan.flip else image
