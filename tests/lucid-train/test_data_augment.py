"""Augmentations hold their geometric invariants against stated parameters: labels follow the
pixels through the fused affine, mosaic and flip; the letterbox inverts exactly."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

from lucid_train.data.augment import (
    NO_AUGMENT,
    AffineParams,
    AugmentConfig,
    CopyPasteParams,
    FlipParams,
    GeometryParams,
    HsvParams,
    LetterboxParams,
    MixupParams,
    MosaicParams,
    TrainAugment,
    apply_copy_paste,
    apply_flip,
    apply_hsv,
    apply_mixup,
    jitter_levels,
    letterbox,
    transform_targets,
)
from lucid_train.data.augment.config import HsvRule
from lucid_train.data.masks import instance_map
from lucid_train.data.rotated import rbox_corners
from lucid_train.data.targets import Targets

RED = (230, 20, 20)


def _scene(w: int = 200, h: int = 120, *, rotated: bool = False) -> tuple[Image.Image, Targets]:
    """A grey image with one red 4-point ring; targets hold it as polygon (or rotated box)."""
    img = Image.new("RGB", (w, h), (100, 100, 100))
    ring = np.array([[60, 30], [130, 40], [120, 90], [50, 80]], np.float32)
    if rotated:
        rb = np.array([[90, 60, 80, 30, 0.35]], np.float32)
        ring = rbox_corners(rb)[0].astype(np.float32)
    ImageDraw.Draw(img).polygon([(float(x), float(y)) for x, y in ring], fill=RED)
    box = np.array([[*ring.min(0), *ring.max(0)]], np.float32)
    if rotated:
        return img, Targets(boxes=box, labels=np.array([0]), rboxes=rb)
    return img, Targets(boxes=box, labels=np.array([0]), polygons=(ring,))


def _red_mask(img: Image.Image) -> np.ndarray:
    a = np.asarray(img).astype(int)
    return (a[..., 0] > 160) & (a[..., 1] < 90) & (a[..., 2] < 90)


def _ring_mask(ring: np.ndarray, w: int, h: int) -> np.ndarray:
    return instance_map([ring.astype(np.float32)], h, w, stride=1) > 0


def _iou(a: np.ndarray, b: np.ndarray) -> float:
    return float((a & b).sum() / max((a | b).sum(), 1))


def test_letterbox_inverse_is_exact_for_boxes_points_and_rotated_boxes() -> None:
    """to_source(forward(x)) == x to float64 precision for every geometry."""
    img, t = _scene()
    out, moved, p = letterbox(img, t, 160)
    assert out.size == (160, 160)
    assert p.gain == pytest.approx(0.8)
    assert (p.pad_x, p.pad_y) == (0.0, 32.0)
    np.testing.assert_allclose(p.boxes_to_source(moved.boxes), t.boxes, atol=1e-4)
    assert moved.polygons is not None
    assert t.polygons is not None
    np.testing.assert_allclose(p.to_source(moved.polygons[0]), t.polygons[0], atol=1e-4)
    rb = np.array([[10, 20, 8, 4, 0.3]])
    fwd = rb.copy()
    fwd[:, :2] = fwd[:, :2] * p.gain + [p.pad_x, p.pad_y]
    fwd[:, 2:4] *= p.gain
    np.testing.assert_allclose(p.rboxes_to_source(fwd), rb, atol=1e-12)


def test_letterbox_pixels_follow_the_labels() -> None:
    """The red region of the letterboxed image is the letterboxed ring's raster."""
    img, t = _scene()
    out, moved, _ = letterbox(img, t, 160)
    assert moved.polygons is not None
    assert _iou(_red_mask(out), _ring_mask(moved.polygons[0], 160, 160)) > 0.9


@pytest.mark.parametrize("rotated", [False, True])
def test_fused_affine_moves_pixels_and_labels_together(rotated: bool) -> None:
    """Rotation + scale + shear + shift from stated parameters: red pixels match the moved ring."""
    img, t = _scene(rotated=rotated)
    aug = TrainAugment(NO_AUGMENT, 160, lambda i: (img, t))
    g = GeometryParams(0, None, AffineParams(degrees=25, scale=0.9, shear_x=5, tx=0.55, ty=0.45))
    out, moved = aug.render_geometry(g)
    assert len(moved) == 1
    ring = moved.polygons[0] if moved.polygons is not None else rbox_corners(moved.rboxes)[0]  # type: ignore[arg-type]
    assert _iou(_red_mask(out), _ring_mask(np.asarray(ring), 160, 160)) > (0.85 if rotated else 0.9)
    red = np.argwhere(_red_mask(out))
    x1, y1, x2, y2 = moved.boxes[0]
    assert red[:, 1].min() >= x1 - 1.5
    assert red[:, 1].max() <= x2 + 0.5
    assert red[:, 0].min() >= y1 - 1.5
    assert red[:, 0].max() <= y2 + 0.5


def test_identity_affine_equals_the_letterbox() -> None:
    """Stated identity parameters reproduce the validation letterbox pixel for pixel."""
    img, t = _scene()
    aug = TrainAugment(NO_AUGMENT, 160, lambda i: (img, t))
    out, moved = aug.render_geometry(GeometryParams(0, None, AffineParams()))
    ref, ref_t, _ = letterbox(img, t, 160)
    assert np.array_equal(np.asarray(out), np.asarray(ref))
    assert moved.allclose(ref_t)


def test_a_whole_pixel_shift_is_pasted_with_the_bilinear_resamples_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A warp that only moves by whole pixels (a letterbox at gain 1) gives the bytes of Pillow's
    bilinear affine, on random sizes, shifts in and off the canvas, without resampling."""
    from lucid_train.data.augment.warp import _pil_coeffs, translation, warp_image

    rng = np.random.default_rng(0)
    cases = []
    for _ in range(60):
        h, w = (int(v) for v in rng.integers(1, 90, 2))
        size = (int(rng.integers(1, 100)), int(rng.integers(1, 100)))
        shift = translation(*(int(v) for v in rng.integers(-100, 100, 2)))
        image = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
        resampled = image.transform(size, Image.Transform.AFFINE, _pil_coeffs(shift),
                                    Image.Resampling.BILINEAR, fillcolor=(114,) * 3)  # fmt: skip
        cases.append((image, shift, size, np.asarray(resampled)))

    def refused(*_: object, **__: object) -> None:
        raise AssertionError("resampled")

    monkeypatch.setattr(Image.Image, "transform", refused)
    for image, shift, size, resampled in cases:
        assert np.array_equal(np.asarray(warp_image(image, shift, size)), resampled)
    with pytest.raises(AssertionError, match="resampled"):  # a half pixel still resamples
        warp_image(cases[0][0], translation(0.5, 0), (8, 8))


def test_mosaic_places_four_tiles_and_their_labels_on_the_pixels() -> None:
    """Each tile's ring lands on red pixels; tiles cover the canvas around the centre."""
    img, t = _scene()
    aug = TrainAugment(NO_AUGMENT, 160, lambda i: (img, t))
    params = GeometryParams(0, MosaicParams((1, 2, 3), 0.5, 0.5), AffineParams(scale=0.5))
    out, moved = aug.render_geometry(params)
    assert len(moved) == 4
    assert moved.polygons is not None
    union = np.zeros((160, 160), bool)
    for ring in moved.polygons:
        union |= _ring_mask(ring, 160, 160)
    assert _iou(_red_mask(out), union) > 0.85
    places = params.mosaic.placements([(120, 200)] * 4, 160)  # type: ignore[union-attr]
    assert places[0].rect[2:] == (160.0, 160.0)
    assert places[3].rect[:2] == (160.0, 160.0)


def test_instances_pushed_off_canvas_are_dropped_and_clipped_ones_kept() -> None:
    """min_visible drops an instance left with too little area; rings are clipped to the canvas."""
    t = Targets(
        boxes=np.array([[0, 0, 10, 10], [95, 0, 105, 10]], np.float32),
        labels=np.array([0, 1]),
        polygons=(
            np.array([[0, 0], [10, 0], [10, 10], [0, 10]], np.float32),
            np.array([[95, 0], [105, 0], [105, 10], [95, 10]], np.float32),
        ),
    )
    moved = transform_targets(t, np.eye(3), (0, 0, 100, 100), min_visible=0.6)
    assert moved.labels.tolist() == [0]
    kept = transform_targets(t, np.eye(3), (0, 0, 100, 100), min_visible=0.4)
    assert kept.polygons is not None
    assert kept.polygons[1][:, 0].max() == pytest.approx(100)
    np.testing.assert_allclose(kept.boxes[1], [95, 0, 100, 10])


def test_instances_with_polygons_keep_down_to_one_percent_visible_as_the_authors() -> None:
    """The authors' warp filter keeps a box whose area ratio exceeds 0.01 where the image has
    segments and 0.1 otherwise; ours keeps the same floors (polygon area for rings)."""
    cfg = AugmentConfig()
    assert (cfg.min_visible_for(True), cfg.min_visible_for(False)) == (0.01, 0.1)
    square = np.array([[60, 0], [160, 0], [160, 10], [60, 10]], np.float32)  # 5 % inside 0..65
    rings = Targets(
        boxes=np.array([[60, 0, 160, 10]], np.float32), labels=np.array([0]), polygons=(square,)
    )
    boxes = Targets(boxes=np.array([[60, 0, 160, 10]], np.float32), labels=np.array([0]))
    clip = (0, 0, 65, 100)
    kept = transform_targets(rings, np.eye(3), clip, min_visible=cfg.min_visible_for(True))
    dropped = transform_targets(boxes, np.eye(3), clip, min_visible=cfg.min_visible_for(False))
    assert len(kept) == 1 and len(dropped) == 0
    sliver = (0, 0, 60.5, 100)  # 0.5 %: under both floors
    assert len(transform_targets(rings, np.eye(3), sliver, min_visible=0.01)) == 0


def test_keypoints_outside_the_canvas_lose_visibility_but_keep_coordinates() -> None:
    """Off-canvas keypoints get visibility 0; their coordinates are carried unchanged."""
    t = Targets(
        boxes=np.array([[10, 10, 60, 60]], np.float32),
        labels=np.array([0]),
        keypoints=np.array([[[20, 20], [120, 30]]], np.float32),
        keypoint_vis=np.array([[2, 2]], np.uint8),
    )
    moved = transform_targets(t, np.eye(3), (0, 0, 100, 100))
    assert moved.keypoint_vis is not None
    assert moved.keypoints is not None
    assert moved.keypoint_vis.tolist() == [[2, 0]]
    assert moved.keypoints[0, 1].tolist() == [120, 30]


def test_flip_mirrors_labels_permutes_keypoints_and_recanonicalises_rotated_boxes() -> None:
    """x -> W - x; left/right keypoints swap with vis; theta -> -theta; 2 flips: identity."""
    t = Targets(
        boxes=np.array([[10, 5, 30, 25]], np.float32),
        labels=np.array([0]),
        keypoints=np.array([[[12, 6], [28, 20], [20, 10]]], np.float32),
        keypoint_vis=np.array([[2, 1, 0]], np.uint8),
    )
    img = Image.new("RGB", (100, 50))
    _, f = apply_flip(img, t, FlipParams(True), flip_index=(1, 0, 2))
    np.testing.assert_allclose(f.boxes, [[70, 5, 90, 25]])
    assert f.keypoints is not None
    assert f.keypoint_vis is not None
    np.testing.assert_allclose(f.keypoints[0], [[72, 20], [88, 6], [80, 10]])
    assert f.keypoint_vis[0].tolist() == [1, 2, 0]
    _, back = apply_flip(img, f, FlipParams(True), flip_index=(1, 0, 2))
    assert back.allclose(t)

    r = Targets(
        boxes=np.zeros((1, 4), np.float32),
        labels=np.array([0]),
        rboxes=np.array([[20, 10, 8, 2, 0.4]], np.float32),
    )
    _, fr = apply_flip(img, r, FlipParams(True))
    assert fr.rboxes is not None
    np.testing.assert_allclose(fr.rboxes, [[80, 10, 8, 2, -0.4]], atol=1e-6)
    r2 = r.replace(rboxes=np.array([[20, 10, 8, 2, -math.pi / 2]], np.float32))
    _, fr2 = apply_flip(img, r2, FlipParams(True))
    assert fr2.rboxes is not None
    assert -math.pi / 2 <= float(fr2.rboxes[0, 4]) < math.pi / 2


def test_flip_mirrors_pixels_like_the_labels() -> None:
    """The flipped image's red region is the flipped ring's raster."""
    img, t = _scene()
    out, f = apply_flip(img, t, FlipParams(True))
    assert f.polygons is not None
    assert _iou(_red_mask(out), _ring_mask(f.polygons[0], 200, 120)) > 0.9


@pytest.mark.parametrize("rule", ["matrix", "authors"])
def test_hsv_identity_is_a_no_op_and_value_gain_darkens(rule: HsvRule) -> None:
    """Zero gains leave the image untouched; value -0.5 halves the brightest channel; a third of
    the circle turns red green; grey has no hue or saturation to move; under either rule."""
    img, _ = _scene()
    assert apply_hsv(img, HsvParams(rule=rule)) is img
    dark = np.asarray(apply_hsv(img, HsvParams(value=-0.5, rule=rule))).astype(int)
    assert abs(dark[0, 0].max() - 50) <= 1
    hue = np.asarray(apply_hsv(img, HsvParams(hue=1 / 3, rule=rule))).astype(int)
    red_px = hue[60, 90]
    assert red_px[1] > red_px[0]
    grey = np.asarray(apply_hsv(img, HsvParams(hue=0.2, saturation=0.5, rule=rule)))
    assert np.abs(grey[0, 0].astype(int) - 100).max() <= 1


def test_hsv_tables_truncate_each_level_as_the_authors_tables() -> None:
    """Hue is added modulo 180 (OpenCV's 8-bit hue), saturation and value scaled and clipped,
    every entry truncated to a level."""
    h, s, v = HsvParams(hue=0.5, saturation=0.7, value=-0.3).tables().astype(int)
    assert (h[0], h[89], h[90], h[179]) == (90, 179, 0, 89)
    assert (s[0], s[100], s[150], s[255]) == (0, 170, 255, 255)
    assert (v[1], v[10], v[255]) == (0, 7, 178)


def test_hsv_jitter_of_a_batch_is_each_images_jitter_alone() -> None:
    """Under the authors' rule the device renderer jitters a batch with a table set per image:
    each image comes out as the CPU renderer's `apply_hsv` paints it alone."""
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, (3, 24, 32, 3), dtype=np.uint8)
    params = [
        HsvParams(0.01, 0.6, -0.2, "authors"),
        HsvParams(-0.015, -0.7, 0.4, "authors"),
        HsvParams(0.0, 0.3, 0.0, "authors"),
    ]
    tables = torch.from_numpy(np.stack([p.tables() for p in params]))
    planes = jitter_levels(torch.from_numpy(images).float().permute(3, 0, 1, 2), tables)
    for k, p in enumerate(params):
        alone = np.asarray(apply_hsv(Image.fromarray(images[k]), p))
        assert np.array_equal(planes[:, k].permute(1, 2, 0).numpy(), alone)


def test_mixup_blends_by_the_stated_ratio_and_keeps_both_targets() -> None:
    """ratio 0.25: 0.25 * a + 0.75 * b; targets of both kept in order."""
    a, ta = (
        Image.new("RGB", (8, 8), (200, 0, 0)),
        Targets(boxes=np.array([[0, 0, 1, 1]], np.float32), labels=np.array([0])),
    )
    b, tb = (
        Image.new("RGB", (8, 8), (0, 0, 200)),
        Targets(boxes=np.array([[2, 2, 3, 3]], np.float32), labels=np.array([1])),
    )
    out, t = apply_mixup(a, ta, b, tb, MixupParams(partner=1, ratio=0.25))
    assert np.asarray(out)[0, 0].tolist() == [50, 0, 150]
    assert t.labels.tolist() == [0, 1]


def test_copy_paste_adds_mirrored_instances_where_there_is_room() -> None:
    """The chosen ring is pasted mirrored with its pixels; overlapping candidates are ineligible."""
    img, t = _scene(w=300)  # the ring sits left of centre, so its mirror lands on free ground
    params = CopyPasteParams.sample(t, img.width, p=1.0)
    assert params.chosen == (0,)
    out, pasted = apply_copy_paste(img, t, params)
    assert len(pasted) == 2
    assert pasted.polygons is not None
    union = _ring_mask(pasted.polygons[0], 300, 120) | _ring_mask(pasted.polygons[1], 300, 120)
    assert _iou(_red_mask(out), union) > 0.9
    centred = Targets(
        boxes=np.array([[90, 10, 110, 30]], np.float32),
        labels=np.array([0]),
        polygons=(np.array([[90, 10], [110, 10], [110, 30]], np.float32),),
    )
    assert CopyPasteParams.sample(centred, 200, p=1.0).chosen == ()


def test_sample_is_deterministic_per_seed_and_stages_draw_independently() -> None:
    """Same seed → same parameters; switching mixup off leaves the other draws unchanged."""
    img, t = _scene()
    cfg = AugmentConfig(mixup=0.5, degrees=10)
    aug = TrainAugment(cfg, 64, lambda i: (img, t))
    seed = np.random.SeedSequence([1, 2, 3])
    p1, p2 = (
        aug.sample(0, seed, [0, 1, 2]),
        aug.sample(0, np.random.SeedSequence([1, 2, 3]), [0, 1, 2]),
    )
    assert p1.geometry == p2.geometry
    assert p1.hsv == p2.hsv
    assert p1.flip == p2.flip
    off = TrainAugment(AugmentConfig(mixup=0.0, degrees=10), 64, lambda i: (img, t)).sample(
        0, np.random.SeedSequence([1, 2, 3]), [0, 1, 2]
    )
    assert off.mixup is None
    assert off.geometry == p1.geometry
    assert off.hsv == p1.hsv
    other = aug.sample(0, np.random.SeedSequence([1, 2, 4]), [0, 1, 2])
    assert other.geometry != p1.geometry


def test_per_scale_policy_and_close_mosaic_settings() -> None:
    """Variant n: scale 0.5, mixup 0, copy-paste 0.1; x: 0.9 / 0.2 / 0.6; close-mosaic: all off."""
    n, x = AugmentConfig.for_variant("n"), AugmentConfig.for_variant("x")
    assert (n.scale, n.mixup, n.copy_paste) == (0.5, 0.0, 0.1)
    assert (x.scale, x.mixup, x.copy_paste) == (0.9, 0.2, 0.6)
    closed = x.without_mosaic()
    assert (closed.mosaic, closed.mixup, closed.copy_paste, closed.hsv_s) == (
        0.0,
        0.0,
        0.0,
        x.hsv_s,
    )
    with pytest.raises(ValueError, match="unknown model variant 'q'"):
        AugmentConfig.for_variant("q")
    with pytest.raises(ValueError, match=r"fliplr \(--data.augment.fliplr\): expected a prob"):
        AugmentConfig(fliplr=2.0)


def test_letterbox_params_fit_tall_and_wide_images() -> None:
    """Long side fills the canvas; padding centres the short side in whole pixels."""
    wide, tall = LetterboxParams.fit(100, 200, 64), LetterboxParams.fit(200, 100, 64)
    assert (wide.gain, wide.pad_x, wide.pad_y) == (0.32, 0.0, 16.0)
    assert (tall.gain, tall.pad_x, tall.pad_y) == (0.32, 16.0, 0.0)
