"""The peer comparison's bookkeeping (`benchmarks/peer_seeds.py`, `peer_tables.py`,
`peer_accuracy.merge`) and the held-out sets (`benchmarks/heldout_sets.py`), on the CPU: seed
means and their spread over the seeds that finished, the time to the peer's final score from
each side's per-epoch log, merged rows keyed by task, set and seeds, and sets built the same
from one seed, with every class annotated and each box its polygon's extent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lucid_testing.benchmark_scripts import load_benchmark


def _report(seed: int, ours: float, peer: float, ours_log: list[float]) -> dict[str, Any]:
    """A finished (task, set, seed): ours at ``ours`` with per-epoch ``ours_log`` (10 s apart),
    the peer at ``peer`` whose own curve ends at 0.5 (its metric) after 3 epochs of 20 s."""
    log = [{"epoch": k + 1, "t_s": 10.0 * (k + 1), "nms_box": v, "e2e_box": v}
           for k, v in enumerate(ours_log)]  # fmt: skip
    peer_log = [{"epoch": 0, "t_s": 5.0}] + [
        {"epoch": k + 1, "t_s": 20.0 * (k + 1), "nms_box": v} for k, v in enumerate((0.2, 0.5, 0.5))
    ]
    side = {"pycocotools_mAP50-95": ours, "pycocotools_AP_small": ours / 2}
    return {
        "data": {"task": "detect", "set": "vsynth-small (x)"},
        "settings": {"seed": seed, "epochs": 3},
        "ours_arms": {"auto": {"e2e": side, "nms": side, "epoch_log": log, "wall_s": 40.0}},
        "peer": {"e2e": {"pycocotools_mAP50-95": peer}, "nms": {"pycocotools_mAP50-95": peer,
                 "pycocotools_AP_small": peer / 2}, "epoch_log": peer_log, "wall_s": 70.0},
    }  # fmt: skip


def test_seed_rows_hold_the_seed_means_the_spread_and_each_seeds_time_to_accuracy() -> None:
    tables, seeds = load_benchmark("peer_tables"), load_benchmark("peer_seeds")
    per_seed = tables.accuracy_rows(_report(0, 0.40, 0.50, [0.3, 0.5, 0.4]), "auto")
    per_seed += tables.accuracy_rows(_report(1, 0.60, 0.50, [0.2, 0.3, 0.45]), "auto")
    rows = {r["path"]: r for r in seeds.seed_rows(per_seed)}
    nms = rows["nms"]
    assert nms["seeds"] == [0, 1] and nms["epochs"] == 3
    assert nms["lucid"] == nms["lucid_mean"] == pytest.approx(0.5)
    assert nms["diff_seeds"] == pytest.approx([-0.1, 0.1])
    assert nms["diff_mean"] == pytest.approx(0.0) and nms["diff_std"] == pytest.approx(0.1414, 1e-3)
    assert nms["lucid_AP_small"] == pytest.approx(0.25)
    # seed 0 reached the peer's 0.5 at its 2nd epoch (20 s); seed 1 never did: no mean
    assert nms["lucid_tta_s_seeds"] == [20.0, None] and nms["lucid_tta_s"] is None
    # the peer first reached its own last value (0.5) at its 2nd epoch, 40 s from launch
    assert nms["ultralytics_tta_s_seeds"] == [40.0, 40.0]
    assert "ultralytics_tta_s" not in rows["e2e"]  # it validates NMS only while training
    assert "| detect | vsynth-small | nms |" in seeds.seed_table(list(rows.values()))


def test_merge_keeps_rows_of_other_sets_and_replaces_the_same_task_set_and_seeds(
    tmp_path: Path,
) -> None:
    acc = load_benchmark("peer_accuracy")
    row = {"task": "detect", "path": "e2e", "metric": "mAP50-95"}
    files = []
    for k, rows in enumerate(
        [
            [{**row, "set": "hard", "seed": 0, "lucid": 1.0}],
            [{**row, "set": "vsynth-small", "seeds": [0, 1, 2], "epochs": 20, "lucid": 2.0}],
            [{**row, "set": "vsynth-small", "seeds": [0, 1, 2], "epochs": 20, "lucid": 3.0}],
        ]
    ):
        files.append(tmp_path / f"{k}.json")
        files[-1].write_text(json.dumps({"date": f"2026-12-0{k + 1}", "rows": rows}))
    acc.merge(files, tmp_path / "out.json")
    merged = json.loads((tmp_path / "out.json").read_text())["rows"]
    assert [(r["set"], r["lucid"], r["source"]) for r in merged] == [
        ("hard", 1.0, "0.json"),
        ("vsynth-small", 3.0, "2.json"),
    ]


def test_pool_folds_seeds_of_several_calls_and_takes_a_repeated_seed_from_the_later(
    tmp_path: Path,
) -> None:
    tables, acc = load_benchmark("peer_tables"), load_benchmark("peer_accuracy")
    first = tables.accuracy_rows(_report(0, 0.40, 0.50, [0.3, 0.5, 0.4]), "auto")
    first += tables.accuracy_rows(_report(1, 0.10, 0.50, [0.1, 0.1, 0.1]), "auto")
    later = tables.accuracy_rows(_report(1, 0.60, 0.50, [0.2, 0.3, 0.45]), "auto")
    files = [tmp_path / "a.json", tmp_path / "b.json"]
    for path, seed_rows in zip(files, (first, later), strict=True):
        path.write_text(json.dumps({"date": "2026-12-04", "rows": [], "seed_rows": seed_rows}))
    acc.pool(files, tmp_path / "out" / "peer-accuracy.json")
    doc = json.loads((tmp_path / "out" / "peer-accuracy.json").read_text())
    nms = {r["path"]: r for r in doc["rows"]}["nms"]
    assert nms["seeds"] == [0, 1] and nms["lucid_seeds"] == pytest.approx([0.40, 0.60])
    assert nms["diff_mean"] == pytest.approx(0.0) and nms["diff_std"] == pytest.approx(0.1414, 1e-3)
    assert doc["sources"] == ["a.json", "b.json"]
    assert "| detect | vsynth-small | nms |" in (tmp_path / "out" / "peer-accuracy.md").read_text()


def test_peer_from_pairs_our_arm_with_the_committed_peer_of_the_same_seed(
    tmp_path: Path,
) -> None:
    """``--peer-from``: an arm trained alone is scored against the committed run's peer values
    of the same task, set, path, metric and seed; a seed the committed run lacks is left out."""
    tables, acc = load_benchmark("peer_tables"), load_benchmark("peer_accuracy")
    committed = tables.accuracy_rows(_report(0, 0.40, 0.50, [0.3, 0.5, 0.4]), "auto")
    committed += tables.accuracy_rows(_report(1, 0.40, 0.30, [0.3, 0.5, 0.4]), "auto")
    peer_file = tmp_path / "committed.json"
    peer_file.write_text(json.dumps({"date": "2026-12-06", "rows": [], "seed_rows": committed}))
    out = tmp_path / "out"
    for seed, score in ((0, 0.45), (1, 0.35), (2, 0.9)):
        report = _report(seed, score, 0.0, [0.1, 0.2, score])
        report["ours_arms"] = {"auto+cpu": report["ours_arms"]["auto"]}
        del report["peer"]
        side = out / acc.run_name("detect", "vsynth-small", "accauto+cpu", seed, [0, 1, 2])
        side.mkdir(parents=True)
        (side / "peer_detect.json").write_text(json.dumps(report))
    acc.main(["--out", str(out), "--tables", "--tasks", "detect", "--sets", "vsynth-small",
              "--arms", "auto+cpu", "--seeds", "0,1,2", "--peer-from", str(peer_file)])  # fmt: skip
    doc = json.loads((out / "peer-accuracy.json").read_text())
    nms = {r["path"]: r for r in doc["rows"]}["nms"]
    assert nms["lucid_accumulate"] == "auto+cpu" and nms["seeds"] == [0, 1]
    assert nms["ultralytics_seeds"] == pytest.approx([0.50, 0.30])
    assert nms["diff_seeds"] == pytest.approx([-0.05, 0.05])
    assert {r["peer_source"] for r in doc["seed_rows"]} == {"committed.json"}


@pytest.mark.parametrize("name", ["vsynth-small", "skimage-shapes"])
def test_a_heldout_set_builds_the_same_from_its_seed_with_every_class_annotated(
    name: str, tmp_path: Path
) -> None:
    pytest.importorskip(
        {"vsynth-small": "synth_datasets", "skimage-shapes": "skimage"}[name],
        reason="the dependency group 'heldout' is not installed",
    )
    sets = load_benchmark("heldout_sets")
    first = sets.build(tmp_path / "a", name, seed=3, train=12, val=6)
    again = sets.build(tmp_path / "b", name, seed=3, train=12, val=6)
    for split in ("train", "val"):
        a = (first / "annotations" / f"{split}.json").read_text()
        assert a == (again / "annotations" / f"{split}.json").read_text()
        names = sorted(p.name for p in (first / "images" / split).iterdir())
        assert len(names) == (12 if split == "train" else 6)
        for n in names:
            assert (first / "images" / split / n).read_bytes() == (
                again / "images" / split / n
            ).read_bytes()
        doc = json.loads(a)
        assert {c["id"] for c in doc["categories"]} == {
            x["category_id"] for x in doc["annotations"]
        }
        for ann in doc["annotations"]:
            ring = ann["segmentation"][0]
            xs, ys = ring[0::2], ring[1::2]
            x, y, w, h = ann["bbox"]
            assert (min(xs), min(ys), max(xs), max(ys)) == pytest.approx((x, y, x + w, y + h))
    other = sets.build(tmp_path / "c", name, seed=4, train=12, val=6)
    assert (other / "annotations" / "val.json").read_text() != (
        first / "annotations" / "val.json"
    ).read_text()


def test_ours_time_to_a_score_is_when_its_validation_ended(tmp_path: Path) -> None:
    """An epoch's score is known when its validation ends (the ``validated`` mark, before its
    checkpoint is written, as the peer's is timed); a fit without such marks falls back to the
    next epoch's first batch."""
    peer_ours = load_benchmark("peer_ours")
    csv_path = tmp_path / "metrics.csv"
    paths = ["val/e2e/mAP50-95", "val/nms/mAP50-95"]
    lines = [",".join(["epoch", *paths])] + [f"{e},0.{e + 1},0.{e + 2}" for e in range(3)]
    csv_path.write_text("\n".join(lines) + "\n")
    windows = [{"epoch": e, "start": 100.0 + 10 * e, "end": 105.0 + 10 * e} for e in range(3)]
    stamps = [{"epoch": e, "validated": 107.0 + 10 * e} for e in range(3)]
    marks = tmp_path / "epochs.jsonl"
    marks.write_text("".join(json.dumps(m) + "\n" for m in [*windows, *stamps]))
    log = peer_ours.ours_epoch_log(csv_path, marks, 90.0, "detect")
    assert [(r["epoch"], r["t_s"]) for r in log] == [(0, 10.0), (1, 17.0), (2, 27.0), (3, 37.0)]
    assert log[2]["nms_box"] == pytest.approx(0.3)
    marks.write_text("".join(json.dumps(m) + "\n" for m in windows))
    old = peer_ours.ours_epoch_log(csv_path, marks, 90.0, "detect")
    assert [r["t_s"] for r in old[1:3]] == [20.0, 30.0]


def test_keep_trains_only_the_sides_without_a_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    acc = load_benchmark("peer_accuracy")
    for side in ("peer", "accauto"):  # a finished run's seed 0; seed 1 only its peer
        (tmp_path / f"detect-{side}-seed0").mkdir()
        (tmp_path / f"detect-{side}-seed0" / "peer_detect.json").write_text("{}")
    (tmp_path / "detect-peer-seed1").mkdir()
    (tmp_path / "detect-peer-seed1" / "peer_detect.json").write_text("{}")
    queued: list[list[str]] = []
    monkeypatch.setattr(acc, "_run_queue", lambda queue, *a: queued.append([q[0] for q in queue]))
    monkeypatch.setattr(acc, "_write_tables", lambda *a, **k: None)
    argv = ["--out", str(tmp_path), "--tasks", "detect", "--seeds", "0,1"]
    acc.main([*argv, "--arms", "auto+resize,auto", "--keep"])
    assert queued[-1] == [
        "detect-accauto+resize-seed0", "detect-accauto+resize-seed1", "detect-accauto-seed1"
    ]  # fmt: skip
    acc.main([*argv, "--arms", "auto"])  # without --keep every side trains again
    assert queued[-1] == [f"detect-{s}-seed{k}" for k in (0, 1) for s in ("peer", "accauto")]


def test_epoch_overhead_splits_each_epoch_into_training_validation_and_the_rest() -> None:
    overhead = load_benchmark("epoch_overhead")
    marks = [{"epoch": 0, "start": 10.0, "end": 19.0}, {"epoch": 0, "validated": 21.0},
             {"epoch": 1, "start": 21.5, "end": 22.0}, {"epoch": 1, "validated": 23.5},
             {"epoch": 2, "start": 24.5, "end": 25.0}, {"epoch": 2, "validated": 27.5}]  # fmt: skip
    rows = overhead.phases(marks)
    assert rows[0] == {"epoch": 0, "train_s": 9.0, "validate_s": 2.0, "between_s": 0.5}
    assert rows[1] == {"epoch": 1, "train_s": 0.5, "validate_s": 1.5, "between_s": 1.0}
    assert "between_s" not in rows[2]  # the last epoch has no next one
    # the first epoch (recording, the loader's start) is left out of the medians
    assert overhead.medians(rows) == {"train_s": 0.5, "validate_s": 2.0, "between_s": 1.0}


def test_the_allcats_arm_trains_every_category_of_the_coco_file(tmp_path: Path) -> None:
    """``+allcats`` passes every category id of the set, one without annotations too (the class
    rule before D22), so an A/B beside the default measures what an empty class costs."""
    ours = load_benchmark("peer_ours")
    (tmp_path / "annotations").mkdir()
    cats = [{"id": 10, "name": "hexagon"}, {"id": 1, "name": "circle"}, {"id": 4, "name": "square"}]
    doc = {"images": [], "annotations": [], "categories": cats}
    (tmp_path / "annotations" / "train.json").write_text(json.dumps(doc))
    assert ours.arm_flags("auto+allcats+once", str(tmp_path)) == (
        "auto",
        ["--data.classes", "[1, 4, 10]", "--data.load_resize", "false"],
    )
    assert ours.arm_flags("4+batch") == ("4", ["--data.mosaic_pool", "batch"])
    with pytest.raises(SystemExit, match=r"\+allcats needs a COCO set"):
        ours.arm_flags("auto+allcats")


def test_an_environment_arm_sets_the_switch_the_loss_reads() -> None:
    """``+losshalf`` is an environment switch, no flag: the variable it sets is the one
    `lucid_train.losses.detection` reads at import (a renamed variable would train the default),
    and a misspelt value builds no loss."""
    ours = load_benchmark("peer_ours")
    assert ours.arm_flags("auto+losshalf+cpu") == ("auto", ["--data.render", "cpu"])
    env = ours.arm_env("auto+losshalf+cpu")
    assert env == {"LUCID_LOSS_ARITHMETIC": "authors"}
    code = "import lucid_train.losses.detection as d; print(d.AUTHORS_ARITHMETIC)"
    root = Path(__file__).resolve().parents[2]
    paths = os.pathsep.join(str(p) for p in sorted((root / "packages").glob("*/src")))
    said = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **env, "PYTHONPATH": paths},
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert said.strip() == "True"
    build = "from lucid_train.losses.detection import DetectionLoss; DetectionLoss(4)"
    misspelt = subprocess.run(
        [sys.executable, "-c", build],
        env={**os.environ, "LUCID_LOSS_ARITHMETIC": "author", "PYTHONPATH": paths},
        capture_output=True, text=True,
    )  # fmt: skip
    assert misspelt.returncode != 0
    assert "LUCID_LOSS_ARITHMETIC='author': expected 'float32'" in misspelt.stderr


def test_every_arm_option_is_a_flag_lucid_fit_takes() -> None:
    """Each ``+option`` of an arm (`peer_ours.ARM_OPTIONS`) is parsed by ``lucid fit`` into the
    value it names, so an A/B arm cannot silently train the default (options that set the same
    key are parsed in separate runs)."""
    ours = load_benchmark("peer_ours")
    groups: list[dict[str, list[str]]] = []
    for flags in ours.ARM_OPTIONS.values():
        free = next((g for g in groups if flags[0] not in g), None)
        if free is None:
            groups.append(free := {})
        free[flags[0]] = flags
    for group in groups:
        flags = [f for pair in group.values() for f in pair]
        run = subprocess.run(
            [sys.executable, "-m", "lucid_train", "fit", *flags, "--print_config"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr[-1500:]
        for flag, value in group.values():
            assert f"{flag.split('.')[-1]}: {value}" in run.stdout, (flag, value)
