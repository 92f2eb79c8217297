"""The peer-speed benchmark's bookkeeping on the CPU (`benchmarks/speed_rows.py`,
`peer_speed.parse_args` / `write_results`, `step_trace.account`): rows merged by (task, scale,
batch) into an existing file, the batch fallback's rule and its log readings, and a profiled
step's kernels put in the innermost part range open when their launch ran."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lucid_testing.benchmark_scripts import load_benchmark


def _row(task: str, batch: int, lucid: float, peer: float, scale: str | None = None) -> dict:
    row: dict[str, Any] = {"task": task, "batch": batch, "lucid": {"img_s": lucid, "gpu_util": 90},
                           "peer": {"img_s": peer, "gpu_util": 40}}  # fmt: skip
    if scale is not None:
        row["scale"] = scale
    return row


def test_rows_merge_by_task_scale_and_batch_and_old_rows_read_as_scale_n() -> None:
    rows = load_benchmark("speed_rows")
    old = [rows.summarise_row(_row("detect", 64, 1200, 600)),
           rows.summarise_row(_row("detect", 16, 680, 170))]  # fmt: skip
    new = [rows.summarise_row(_row("detect", 64, 900, 700, "m")),
           rows.summarise_row(_row("detect", 16, 700, 175, "n"))]  # fmt: skip
    merged = rows.merge_rows(old, new)
    keys = [rows.row_key(r) for r in merged]
    assert keys == [("detect", "n", 64), ("detect", "n", 16), ("detect", "m", 64)]
    assert merged[1]["lucid_img_s"] == 700  # replaced, in its old place
    assert merged[0]["scale"] == "n" and merged[0]["ratio"] == 2.0
    assert merged[2]["ratio"] == round(900 / 700, 2)
    table = rows.table(merged).splitlines()
    assert table[2].startswith("| detect | n | 16 |") and table[4].startswith("| detect | m | 64 |")


def test_a_row_without_a_side_has_no_ratio() -> None:
    rows = load_benchmark("speed_rows")
    row = rows.summarise_row({"task": "obb", "scale": "s", "batch": 16, "lucid": {"img_s": 5.0}})
    assert row["ratio"] is None and row["ultralytics_img_s"] is None
    assert row["gpu_util"] == {"peer": None, "lucid": None, "lucid_eager": None}


def test_the_fallback_halves_the_batch_after_an_out_of_memory_log(tmp_path: Path) -> None:
    rows = load_benchmark("speed_rows")
    log = tmp_path / "side.log"
    assert not rows.ran_out_of_memory(log)
    log.write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    assert rows.ran_out_of_memory(log)
    assert [rows.next_batch(b) for b in (64, 32, 16, 8)] == [32, 16, 8, None]
    log.write_text("WARNING CUDA out of memory with batch=64. Reducing to batch=32 and retrying\n")
    assert rows.peer_reduced_batch(log) == 32
    assert rows.peer_reduced_batch(tmp_path / "none.log") is None


def test_a_row_keeps_where_our_samples_were_made_as_the_fit_said_it(tmp_path: Path) -> None:
    rows = load_benchmark("speed_rows")
    log = tmp_path / "ours.log"
    assert rows.pipeline_line(log) is None
    said = ("training samples painted in the loader workers (--data.render auto: 14 workers "
            "paint about 504 images/s, a yolo26m step takes 491: the GPU keeps its time for the "
            "step; --data.decode auto); mosaic partners from the authors' buffer")  # fmt: skip
    log.write_text(
        f"GPU available: True\nlucid data: 'x' (id 3) without annotations\nlucid data: {said}\n"
    )
    assert rows.pipeline_line(log) == said


def test_write_results_merges_into_the_file_already_there(tmp_path: Path) -> None:
    speed = load_benchmark("peer_speed")
    rows = load_benchmark("speed_rows")
    old = {"date": "then", "command": "old", "versions": {}, "runs": [_row("detect", 64, 1, 1)]}
    (tmp_path / "peer-speed.json").write_text(json.dumps(old))
    args = speed.parse_args(["--out", str(tmp_path), "--tasks", "detect,pose", "--scales", "s,m"])
    assert args.tasks == ["detect", "pose"] and args.scales == ["s", "m"]
    assert args.batches == [16, 64] and not args.fresh
    previous = speed.read_rows(tmp_path / "peer-speed.json")
    assert previous[0]["measured"]["date"] == "then"
    fake = rows.summarise_row(_row("pose", 64, 300, 150, "s"))
    speed.write_results(tmp_path, rows.merge_rows(previous, [fake]), partial=True)
    doc = json.loads((tmp_path / "peer-speed.json").read_text())
    assert [rows.row_key(r) for r in doc["runs"]] == [("detect", "n", 64), ("pose", "s", 64)]
    assert "| pose | s | 64 | 150 | 300 |" in (tmp_path / "peer-speed.md").read_text()
    with pytest.raises(SystemExit):
        speed.parse_args(["--out", str(tmp_path), "--scales", "q"])


def test_step_efficiencies_attach_beside_the_runs_and_stay_when_rows_are_written(
    tmp_path: Path,
) -> None:
    """`--step-profile` puts each (task, scale)'s efficiencies into peer-speed.json, the runs
    untouched; a later row written keeps them; a side without an efficiency adds no row."""
    speed = load_benchmark("peer_speed")
    rows = load_benchmark("speed_rows")
    old = {"date": "then", "command": "old", "versions": {}, "runs": [_row("detect", 64, 1, 1)]}
    (tmp_path / "peer-speed.json").write_text(json.dumps(old))
    side = {"efficiency": 0.93, "replays": [23, 23]}
    profile = {"date": "now", "device": "GPU", "settings": {"batch": 64, "size": 640}, "rows": [
        {"task": "detect", "scale": "n", "ours_capture": side,
         "ours_eager": {"efficiency": 0.9}, "peer": {"efficiency": 0.84}},
        {"task": "segment", "scale": "m", "ours_capture": {"error": "OOM"}},
    ]}  # fmt: skip
    (tmp_path / "step.json").write_text(json.dumps(profile))
    speed.main(["--out", str(tmp_path), "--step-profile", str(tmp_path / "step.json")])
    doc = json.loads((tmp_path / "peer-speed.json").read_text())
    assert doc["runs"] == old["runs"]
    (entry,) = doc["step_efficiency"]
    assert (entry["task"], entry["scale"], entry["lucid"], entry["ultralytics"]) == (
        "detect", "n", 0.93, 0.84,
    )  # fmt: skip
    assert entry["lucid_replays"] == [23, 23] and entry["source"] == "step.json"
    fake = rows.summarise_row(_row("pose", 64, 300, 150, "s"))
    speed.write_results(tmp_path, rows.merge_rows(speed.read_rows(tmp_path / "peer-speed.json"),
                                                  [fake]), partial=False)  # fmt: skip
    assert json.loads((tmp_path / "peer-speed.json").read_text())["step_efficiency"] == [entry]


def _ev(cat: str, name: str, ts: float, dur: float, corr: int | None = None) -> dict:
    event = {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "args": {}}
    if corr is not None:
        event["args"]["correlation"] = corr
    return event


def test_kernels_go_to_the_innermost_part_open_at_their_launch() -> None:
    trace = {"traceEvents": [
        _ev("user_annotation", "part:loss", 0, 100),
        _ev("user_annotation", "part:assigner", 10, 20),
        _ev("user_annotation", "part:backward", 200, 100),
        _ev("cuda_runtime", "cudaLaunchKernel", 5, 1, 1),
        _ev("cuda_runtime", "cudaLaunchKernel", 15, 1, 2),
        _ev("cuda_runtime", "cudaGraphLaunch", 250, 1, 3),
        _ev("cuda_runtime", "cudaLaunchKernel", 400, 1, 4),
        _ev("kernel", "elementwise_add", 500, 30, 1),
        _ev("kernel", "topk_kernel", 530, 10, 2),
        _ev("kernel", "conv_dgrad", 600, 50, 3),  # a graph's kernels share its launch's id
        _ev("kernel", "nchwToNhwcKernel", 650, 10, 3),
        _ev("gpu_memcpy", "Memcpy HtoD", 700, 10, 4),
    ]}  # fmt: skip
    tally = load_benchmark("step_trace").account(trace, steps=2)
    assert tally["parts_ms"] == {"backward": 0.03, "loss": 0.015, "other": 0.005, "assigner": 0.005}
    assert tally["device_ms"] == 0.055 and tally["graph_kernels_per_step"] == 1.0
    assert tally["moves"] == {"per_step": 1.0, "ms": 0.01}
    assert tally["top_kernels"][0] == {"name": "conv_dgrad", "ms": 0.025, "calls": 0.5}
    assert tally["ranges_per_step"]["assigner"] == 0.5


def test_the_host_side_counts_each_parts_span_and_launches_triton_kernels_included() -> None:
    trace = {"traceEvents": [
        _ev("user_annotation", "part:backbone", 0, 100),
        _ev("user_annotation", "part:loss", 200, 50),
        _ev("cuda_runtime", "cudaLaunchKernel", 5, 2, 1),
        _ev("cuda_driver", "cuLaunchKernelEx", 10, 6, 2),  # a Triton kernel's launch
        _ev("cuda_runtime", "cudaMemcpyAsync", 210, 4, 3),
        _ev("cuda_runtime", "cudaStreamSynchronize", 220, 30),  # a wait, not a launch
        _ev("kernel", "conv", 20, 10, 1),
        _ev("kernel", "triton_bn_silu", 30, 10, 2),
        _ev("gpu_memcpy", "Memcpy DtoH", 215, 2, 3),
    ]}  # fmt: skip
    tally = load_benchmark("step_trace").account(trace, steps=1)
    assert tally["parts_ms"] == {"backbone": 0.02, "loss": 0.002}  # the driver's launch placed
    host = tally["host"]
    assert host["span_ms"] == {"backbone": 0.1, "loss": 0.05}
    assert host["launches"] == {"backbone": 2, "loss": 1}
    assert host["launch_api"]["cuLaunchKernelEx"] == {"calls": 1, "host_ms": 0.006}
    assert "cudaStreamSynchronize" not in host["launch_api"]
    doc = {"rows": [{"ours_eager": tally, "peer": tally}]}
    lines = load_benchmark("step_report").host_lines(doc["rows"][0], ["ours_eager", "peer"])
    assert "| backbone | 0.10 / 2 | 0.10 / 2 |" in lines


def test_a_repeated_row_reads_each_sides_median_and_keeps_each_pairs_ratio() -> None:
    rows = load_benchmark("speed_rows")
    peer = [{"img_s": 800.0, "gpu_util": 50.0}, {"img_s": 980.0, "gpu_util": 57.0},
            {"img_s": 900.0, "gpu_util": 55.0}]  # fmt: skip
    ours = [{"img_s": 1300.0, "gpu_util": 80.0}, {"img_s": 1310.0, "gpu_util": 82.0},
            {"img_s": 1320.0, "gpu_util": 81.0}]  # fmt: skip
    row = {"task": "detect", "scale": "n", "batch": 64, "peer": peer[0], "lucid": ours[0]}
    row = rows.summarise_row({**row, "repeats": {"peer": peer, "lucid": ours}})
    assert (row["ultralytics_img_s"], row["lucid_img_s"]) == (900.0, 1310.0)
    assert row["ratio"] == round(1310 / 900, 2)
    assert row["ratio_runs"] == [round(1300 / 800, 2), round(1310 / 980, 2), round(1320 / 900, 2)]
    assert row["gpu_util"] == {"peer": 55.0, "lucid": 81.0, "lucid_eager": None}
    assert "| 1.46 (1.34-1.62, 3 pairs) |" in rows.table([row])


def test_repeats_run_the_sides_in_turn_at_the_batch_that_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    speed = load_benchmark("peer_speed")
    calls: list[tuple[str, int, int]] = []

    def peer(args: Any, task: str, scale: str, batch: int, data: Any, out: Path,
             repeat: int = 0) -> dict:  # fmt: skip
        calls.append(("peer", batch, repeat))
        oom = batch == 64  # the first try runs out of memory: the row falls back to 32
        return {"img_s": None if oom else 100.0 + repeat, "out_of_memory": oom}

    def ours(args: Any, task: str, scale: str, batch: int, data: Any, capture: str, out: Path,
             repeat: int = 0) -> dict:  # fmt: skip
        calls.append((capture, batch, repeat))
        return {"img_s": 300.0, "out_of_memory": False}

    monkeypatch.setattr(speed, "run_peer", peer)
    monkeypatch.setattr(speed, "run_ours", ours)
    args = speed.parse_args(["--out", str(tmp_path), "--sides", "peer,capture", "--repeats", "3"])
    row = speed.run_row(args, "detect", "s", 64, {"train_images": 8})
    assert calls == [("peer", 64, 0), ("on", 64, 0), ("peer", 32, 0), ("on", 32, 0),
                     ("peer", 32, 1), ("on", 32, 1), ("peer", 32, 2), ("on", 32, 2)]  # fmt: skip
    assert row["batch_used"] == 32 and row["ultralytics_img_s"] == 101.0
    assert row["ratio_runs"] == [3.0, round(300 / 101, 2), round(300 / 102, 2)]
    with pytest.raises(SystemExit):
        speed.parse_args(["--out", str(tmp_path), "--repeats", "0"])
