"""The device renderer paints the CPU renderer's pixels from the same plan, and the labels do not
depend on which renders.

Bound (assumptions.md D18): float32 coordinates on the device against Pillow's float64 can move
an interpolation weight across a truncation, and rotated mosaic seams are hard-edged on the
device where Pillow antialiases them. Measured on the hard sets below: about 0.1% of pixels
differ, by at most 2 levels. The tests allow 0.5% and 3 levels; a wrong rule (no edge clamp, the
first instead of the last tile at a seam, rounding where Pillow truncates) moves far more.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image

from lucid_train.data import datamodule, render_choice
from lucid_train.data.augment import AugmentConfig, TrainAugment
from lucid_train.data.augment.plan import SizedImage
from lucid_train.data.augment.render_cpu import render_cpu
from lucid_train.data.augment.render_device import MAX_TILES, PixelBatch, pack_plans
from lucid_train.data.datamodule import LucidDataModule
from lucid_train.data.dataset import TrainDataset
from lucid_train.data.formats.layout import read_split
from lucid_train.data.image_io import CorruptImageError, EncodedImage, open_rgb, read_jpeg
from lucid_train.data.records import DatasetSchema, ImageRecord, Task
from lucid_train.data.targets import Targets
from lucid_train.data.transport import collate

HEAVY = AugmentConfig(mixup=0.5, copy_paste=0.5)
ROTATED = AugmentConfig(mixup=0.3, copy_paste=0.5, degrees=10, shear=2, mosaic=0.7)
SIDE = 96


def _plans(
    ds: TrainDataset, n: int, epoch: int = 1
) -> tuple[list[Image.Image], PixelBatch, list[Targets]]:
    """``n`` samples of ``ds`` rendered on the CPU, and the same plans packed for the device."""
    aug, perm = ds.augment(epoch), ds.permutation(epoch)
    cpu, plans, targets, sources = [], [], [], {}
    for pos in range(n):
        pool, mix_pool = ds.partners(epoch, pos)
        seed = np.random.SeedSequence([ds.seed, epoch, pos])
        params = aug.sample(int(perm[pos]), seed, pool, mix_pool)
        plan, t, images = aug.plan(params)
        cpu.append(render_cpu(plan, images))  # type: ignore[arg-type]
        plans.append(plan)
        targets.append(t)
        sources.update(images)
    return cpu, pack_plans(plans, sources, {}), targets


def _differences(device: np.ndarray, cpu: list[Image.Image]) -> tuple[float, int]:
    d = np.abs(device.astype(np.int64) - np.stack([np.asarray(c) for c in cpu]).astype(np.int64))
    return float((d > 0).mean()), int(d.max())


@pytest.mark.parametrize(
    ("task", "cfg"),
    [
        ("detect", AugmentConfig()),
        ("detect", AugmentConfig(hsv_rule="authors")),
        ("segment", HEAVY),
        ("segment", dataclasses.replace(HEAVY, hsv_rule="authors")),
        ("obb", ROTATED),
        ("pose", ROTATED),
    ],
)
def test_the_device_renderer_paints_the_cpu_renderers_pixels(
    small_synthetic: Callable[[Task], Path], task: Task, cfg: AugmentConfig
) -> None:
    index = read_split(small_synthetic(task), "train", task=task)
    ds = TrainDataset(index.records, index.schema, SIDE, cfg, seed=5, pool_size=4)
    cpu, packed, _ = _plans(ds, 8)
    device = packed.render()
    assert device.dtype == torch.uint8 and tuple(device.shape) == (8, SIDE, SIDE, 3)
    differing, worst = _differences(device.numpy(), cpu)
    # Under the authors' rule a level apart before the colour jitter (float32 coordinates) can
    # move a saturated pixel's 8-bit hue a step of 30 a sector: 255 / 30 levels of its middle one.
    bound = 9 if cfg.hsv_rule == "authors" else 3
    assert differing < 0.005 and worst <= bound, (differing, worst)


def test_a_batch_without_mosaic_paints_one_tile_slot_with_the_same_pixels(
    small_synthetic: Callable[[Task], Path],
) -> None:
    """Slots are as wide as the batch's fullest plane: letterboxed planes pay for one tile, and
    the pixels are those of the four-slot layout (the empty slots paint nothing)."""
    index = read_split(small_synthetic("detect"), "train", task="detect")
    ds = TrainDataset(index.records, index.schema, SIDE, AugmentConfig(mosaic=0.0), seed=5)
    _, packed, _ = _plans(ds, 4)
    assert tuple(packed.slots.shape) == (4, 1)
    padded = torch.full((4, MAX_TILES), -1, dtype=torch.int64)
    padded[:, :1] = packed.slots
    wide = dataclasses.replace(packed, slots=padded)
    assert torch.equal(packed.render(), wide.render())
    mosaic = TrainDataset(index.records, index.schema, SIDE, AugmentConfig(mosaic=1.0), seed=5)
    assert _plans(mosaic, 4)[1].slots.shape[1] == MAX_TILES


@pytest.mark.parametrize(
    "cfg", [AugmentConfig(), AugmentConfig(mosaic=0.0), dataclasses.replace(HEAVY, mosaic=0.5)]
)
def test_axis_aligned_planes_paint_the_per_pixel_geometrys_pixels_by_rows_and_columns(
    small_synthetic: Callable[[Task], Path], cfg: AugmentConfig
) -> None:
    """Without rotation or shear (the default recipe) the geometry is worked out per row and
    per column: the same pixels as the per-pixel path, bit for bit, through mosaic seams,
    mixup, paste, colour and flips (folded into the column order when nothing mixes)."""
    index = read_split(small_synthetic("segment"), "train", task="segment")
    ds = TrainDataset(index.records, index.schema, SIDE, cfg, seed=5, pool_size=4)
    _, packed, _ = _plans(ds, 8)
    assert packed.axis_aligned and bool(packed.flip.any()) and not bool(packed.flip.all())
    per_pixel = dataclasses.replace(packed, axis_aligned=False)
    assert torch.equal(packed.render(), per_pixel.render())
    rotated = TrainDataset(index.records, index.schema, SIDE, ROTATED, seed=5, pool_size=4)
    assert not _plans(rotated, 8)[1].axis_aligned


def test_the_labels_are_the_same_bits_whichever_renders(
    small_synthetic: Callable[[Task], Path],
) -> None:
    index = read_split(small_synthetic("segment"), "train", task="segment")
    common = dict(seed=2, pool_size=4)
    on_cpu = TrainDataset(index.records, index.schema, SIDE, HEAVY, **common)  # type: ignore[arg-type]
    on_device = TrainDataset(
        index.records,
        index.schema,
        SIDE,
        HEAVY,
        render="device",
        **common,  # type: ignore[arg-type]
    )
    keys = [(0, p) for p in range(8)]
    a, b = collate([on_cpu[k] for k in keys]), collate([on_device[k] for k in keys])
    assert a.pixels is None and b.pixels is not None and b.images.shape[1:3] == (0, 0)
    for name in ("batch_idx", "labels", "boxes", "rboxes", "keypoints", "instance_map"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    differing, worst = _differences(b.render().images.numpy(), list(a.images.numpy()))
    assert differing < 0.005 and worst <= 3


def test_an_unrendered_batch_refuses_to_feed_the_network(
    small_synthetic: Callable[[Task], Path],
) -> None:
    index = read_split(small_synthetic("detect"), "train", task="detect")
    ds = TrainDataset(index.records, index.schema, 64, AugmentConfig(), render="device")
    batch = collate([ds[(0, p)] for p in range(2)])
    with pytest.raises(RuntimeError, match=r"call Batch\.render\(\)"):
        batch.float_images()
    assert batch.render().float_images().shape == (2, 3, 64, 64)


def test_the_datamodule_renders_after_the_transfer_and_on_the_cpu_without_cuda(
    small_synthetic: Callable[[Task], Path],
) -> None:
    dm = LucidDataModule("detect", small_synthetic("detect"), img_size=64, batch_size=2,
                         num_workers=0, render="device")  # fmt: skip
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    assert batch.pixels is not None
    shown = dm.on_after_batch_transfer(batch, 0)
    assert shown.pixels is None and tuple(shown.images.shape) == (2, 64, 64, 3)
    auto = LucidDataModule("detect", small_synthetic("detect"), img_size=64, num_workers=0)
    assert auto.render_modes() == ("cpu", "cpu")  # no trainer on CUDA


@pytest.fixture
def info_lines(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The lines the data module says through ``rank_zero_info``, in order."""
    said: list[str] = []
    monkeypatch.setattr(datamodule, "rank_zero_info", said.append)
    return said


def test_the_fit_log_says_once_where_the_samples_are_made(
    small_synthetic: Callable[[Task], Path], info_lines: list[str]
) -> None:
    said = info_lines
    dm = LucidDataModule("detect", small_synthetic("detect"), img_size=64, num_workers=0)
    dm.setup("fit")
    dm.train_dataloader(), dm.train_dataloader()  # Lightning builds it more than once
    assert said == [
        "lucid data: training samples painted in the loader workers (--data.render auto: no "
        "CUDA device; --data.decode auto); each source resized to the long side 64 as loaded "
        "(the authors' rule); mosaic partners from the authors' buffer of recent images"
    ]
    dm.mosaic_pool = "batch"
    assert dm.pipeline_line().endswith(
        "mosaic partners from the sample's own batch (--data.mosaic_pool batch)"
    )
    dm.render = "device"  # with a decode of JPEGs at their size where it is asked for
    assert "the GPU after the transfer, JPEGs already at their load size decoded by nvJPEG" in (
        dm.pipeline_line()
    )


@pytest.mark.parametrize(
    ("epochs", "close", "said"),
    [
        (20, 10, "; mosaic, mixup and copy-paste off for the last 10 of 20 epochs "
                 "(--data.augment.close_mosaic 10)"),
        (6, 10, "; no mosaic, mixup or copy-paste in any of the 6 epochs "
                "(--data.augment.close_mosaic 10)"),
        (20, 0, ""),
    ],
)  # fmt: skip
def test_the_fit_log_says_when_mosaic_closes(
    small_synthetic: Callable[[Task], Path], epochs: int, close: int, said: str
) -> None:
    """A run no longer than ``close_mosaic`` trains without mosaic throughout (the authors'
    rule), which the log says up front rather than leaving it to be found."""
    dm = LucidDataModule("detect", small_synthetic("detect"), img_size=64, num_workers=0)
    dm.augment = dataclasses.replace(dm.augment, close_mosaic=close)
    dm.trainer = SimpleNamespace(max_epochs=epochs)  # type: ignore[assignment]
    dm.setup("fit")
    assert dm.pipeline_line().endswith(
        "mosaic partners from the authors' buffer of recent images" + said
    )


def test_a_test_run_without_a_test_split_says_it_scores_the_val_split(
    small_synthetic: Callable[[Task], Path], info_lines: list[str]
) -> None:
    said = info_lines
    dm = LucidDataModule("detect", small_synthetic("detect"), img_size=64, num_workers=0)
    dm.setup("test")
    assert said == [
        "lucid data: no --data.test_split given; testing on the 'val' split (the test/ metrics "
        "are that split's)"
    ]
    said.clear()
    named = LucidDataModule(
        "detect", small_synthetic("detect"), img_size=64, num_workers=0, test_split="val"
    )
    named.setup("test")
    assert said == []


@pytest.mark.parametrize(
    ("task", "variant", "workers", "render"),
    [
        ("detect", "m", 14, "cpu"),  # 14 x 36 = 504 images/s >= the m step's 491: measured 4 % up
        ("detect", "m", 12, "device"),  # 432 < 491
        ("detect", "l", 11, "cpu"),
        ("detect", "n", 15, "device"),  # the n step takes 1,190 a second
        ("detect", "s", 15, "device"),
        ("detect", "x", 15, "device"),  # not measured
        ("detect", None, 15, "device"),
        ("segment", "m", 15, "device"),  # its CPU render not measured
    ],
)
def test_auto_paints_in_the_workers_where_they_keep_up_with_the_step_and_says_why(
    task: str, variant: str | None, workers: int, render: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(render_choice, "usable_cpus", lambda: 16)
    card = "NVIDIA H100 80GB HBM3"
    chosen, why = render_choice.auto_render(task, variant, workers, card=card)
    assert chosen == render
    assert why and (variant is None or task != "detect" or f"yolo26{variant}" in why)
    assert render_choice.auto_render(task, variant, workers, card=None)[0] == "cpu"
    # a card whose step rates are not measured keeps the device, saying so
    assert render_choice.auto_render(task, variant, workers, card="NVIDIA H200") == (
        "device",
        "no step rates measured on the NVIDIA H200",
    )
    monkeypatch.setattr(render_choice, "usable_cpus", lambda: 8)  # workers beyond the cores
    assert render_choice.auto_render(task, variant, workers, card=card)[0] == "device"


def test_the_fit_log_says_which_renderer_auto_took_and_why(
    small_synthetic: Callable[[Task], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    dm = LucidDataModule("detect", small_synthetic("detect"), img_size=64, num_workers=14,
                         variant="m")  # fmt: skip
    monkeypatch.setattr(render_choice, "usable_cpus", lambda: 16)
    monkeypatch.setattr(LucidDataModule, "_card", lambda self: "NVIDIA H100 80GB HBM3")
    assert dm.render_modes() == ("cpu", "cpu")
    assert "painted in the loader workers (--data.render auto: 14 workers paint about 504 " in (
        dm.pipeline_line()
    )
    dm.variant = "n"
    assert dm.render_modes() == ("device", "device")
    assert "under a yolo26n step's 1190" in dm.pipeline_line()


def _jpeg_scene(root: Path, n: int) -> list[Path]:
    rng = np.random.default_rng(0)
    paths = []
    for i in range(n):
        h, w = (96, 160) if i % 2 else (150, 90)
        y, x = np.mgrid[0:h, 0:w]
        pixels = np.stack([x * 255 // w, y * 255 // h, (x + y) % 256], -1).astype(np.uint8)
        pixels[rng.random((h, w)) < 0.05] = 255
        paths.append(root / f"{i}.jpg")
        Image.fromarray(pixels).save(paths[-1], quality=90)
    return paths


def test_jpeg_files_decoded_where_the_batch_renders_match_pillows_decode(tmp_path: Path) -> None:
    paths = _jpeg_scene(tmp_path, 4)
    targets = Targets(boxes=np.zeros((0, 4), np.float32), labels=np.zeros(0, np.int64))
    decoded = {i: open_rgb(p) for i, p in enumerate(paths)}
    encoded: dict[int, SizedImage] = {}
    for i, p in enumerate(paths):
        file = read_jpeg(p)
        assert isinstance(file, EncodedImage) and (file.width, file.height) == decoded[i].size
        encoded[i] = file
    aug_cpu = TrainAugment(AugmentConfig(), 96, lambda i: (decoded[i], targets))
    aug_file = TrainAugment(AugmentConfig(), 96, lambda i: (encoded[i], targets))
    cpu, plans, sources = [], [], {}
    for k in range(4):
        params = aug_cpu.sample(k, np.random.SeedSequence([k]), [0, 1, 2, 3])
        plan, _, images = aug_file.plan(params)
        cpu.append(render_cpu(aug_cpu.plan(params)[0], decoded))
        plans.append(plan)
        sources.update(images)
    packed = pack_plans(plans, sources, {i: str(p) for i, p in enumerate(paths)})
    assert packed.rows.shape[0] == 0 and len(packed.jpeg_paths) == 4
    differing, worst = _differences(packed.render().numpy(), cpu)
    # Two JPEG decoders agree to a level or two on smooth content, more on the sharp speckle.
    assert differing < 0.2 and worst <= 40, (differing, worst)


def test_with_the_load_resize_only_a_source_already_at_its_load_size_is_left_to_nvjpeg(
    tmp_path: Path,
) -> None:
    paths = _jpeg_scene(tmp_path, 2)  # 150 x 90 (to be resized to 160 x 96), then 96 x 160
    boxes = np.array([[10.0, 20.0, 50.0, 60.0]], np.float32)
    targets = Targets(boxes=boxes, labels=np.zeros(1, np.int64))
    records = [ImageRecord(i, p, *Image.open(p).size[::-1], targets) for i, p in enumerate(paths)]
    schema = DatasetSchema("detect", ("a",), (0,))
    kw = {"render": "device", "decode": "device"}
    ds = TrainDataset(records, schema, 160, AugmentConfig(), load_resize=True, **kw)  # type: ignore[arg-type]
    resized, moved = ds.cache(0)
    assert isinstance(resized, Image.Image) and resized.size == (96, 160)
    np.testing.assert_allclose(moved.boxes, boxes * np.tile([96 / 90, 160 / 150], 2), rtol=1e-6)
    assert isinstance(ds.cache(1)[0], EncodedImage)  # already 160 long: the device decodes it
    once = TrainDataset(records, schema, 160, AugmentConfig(), load_resize=False, **kw)  # type: ignore[arg-type]
    assert all(isinstance(once.cache(i)[0], EncodedImage) for i in (0, 1))
    assert LucidDataModule("detect", tmp_path).load_resize  # the authors' rule by default


def test_a_truncated_jpeg_is_left_to_pillow_which_names_it(tmp_path: Path) -> None:
    (good,) = _jpeg_scene(tmp_path, 1)
    bad = tmp_path / "truncated.jpg"
    bad.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    assert read_jpeg(bad) is None
    png = tmp_path / "image.png"
    Image.open(good).save(png)
    assert read_jpeg(png) is None
    with pytest.raises(CorruptImageError, match=r"truncated\.jpg"):
        open_rgb(bad)


def test_a_worker_that_fails_names_the_sample_it_was_preparing(
    small_synthetic: Callable[[Task], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    index = read_split(small_synthetic("detect"), "train", task="detect")
    ds = TrainDataset(index.records, index.schema, 64, AugmentConfig(), render="device")

    def broken(self: TrainAugment, params: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(TrainAugment, "plan", broken)
    with pytest.raises(RuntimeError, match="boom") as err:
        ds[(0, 3)]
    note = "\n".join(getattr(err.value, "__notes__", []))
    assert "epoch 0, position 3" in note and str(ds.records[int(ds.permutation(0)[3])].path) in note
