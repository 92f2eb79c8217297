"""ONNX export of the deploy view (opset 17 by default): TopK and no NMS, fixed or dynamic batch
and image size, and onnxruntime agrees with torch.

Writing the file needs the ``onnx`` package; checking it needs ``onnxruntime``. Neither is a
dependency of lucid-models, so each test skips, with the reason, where they are missing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lucid_models import ONNX_OPSET, YOLO26, build_model, export_onnx, verify_onnx
from lucid_models.counts import TASKS
from lucid_models.export import EndToEndGraph
from lucid_models.outputs import Task

pytest.importorskip("onnx", reason="writing ONNX needs lucid-models[export]")


def _kwargs(task: Task) -> dict[str, int]:
    return {"num_keypoints": 3} if task == "pose" else {}


def _spread_scores(model: YOLO26) -> None:
    """Give BatchNorm one batch's statistics and shrink the output convs: distinct scores.

    With fresh running statistics activations shrink layer by layer until every score equals
    its prior; with calibrated ones the raw outputs saturate. Either way scores tie, and TopK may
    order ties differently in torch and onnxruntime.
    """
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.momentum = 1.0
    with torch.no_grad():
        model.train()(torch.rand(2, 3, 96, 64))
        branch = model.head.one2one
        for stems in (branch.cls, branch.box, branch.mask, branch.angle, branch.keypoints):
            for stem in stems or ():
                conv = stem[-1] if isinstance(stem, torch.nn.Sequential) else stem
                conv.weight.mul_(0.01)


def test_exported_graph_has_topk_and_no_nms_at_the_stated_opset(tmp_path: Path) -> None:
    """The end-to-end graph is NMS-free and declares opset 17."""
    import onnx

    path = tmp_path / "detect.onnx"
    export_onnx(build_model("yolo26n", num_classes=3), path, image_size=(64, 64), max_det=20)
    graph = onnx.load(str(path))
    ops = {node.op_type for node in graph.graph.node}
    assert "TopK" in ops
    assert "NonMaxSuppression" not in ops
    assert ONNX_OPSET == 17
    assert {o.version for o in graph.opset_import if o.domain in ("", "ai.onnx")} == {17}


def test_export_says_nothing_of_the_exporters_own_passes(
    tmp_path: Path, recwarn: pytest.WarningsRecorder
) -> None:
    """torch's "Constant folding - Only steps=1 ..." came twice on every export, with its C++
    source line: nothing a user can act on."""
    export_onnx(build_model("yolo26n", num_classes=3), tmp_path / "d.onnx", image_size=(64, 64))
    assert not [w for w in recwarn if "Constant folding" in str(w.message)]


@pytest.mark.parametrize("task", TASKS)
def test_onnxruntime_matches_pytorch(task: Task, tmp_path: Path, seeded: None) -> None:
    """Labels exactly; boxes, scores and extras to 1e-4 of their scale (float32 sum order)."""
    ort = pytest.importorskip("onnxruntime", reason="comparing needs onnxruntime")
    model = build_model("yolo26n", task=task, num_classes=3, **_kwargs(task))
    _spread_scores(model)
    path = tmp_path / f"{task}.onnx"
    names = export_onnx(model, path, image_size=(96, 64), max_det=50)
    x = torch.rand(1, 3, 96, 64)
    with torch.no_grad():
        expected = EndToEndGraph(model.deploy().eval(), 50)(x)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {"images": x.numpy()})
    assert [o.name for o in session.get_outputs()] == names
    _same_detections(dict(zip(names, expected, strict=True)),
                     {n: torch.from_numpy(g) for n, g in zip(names, got, strict=True)})  # fmt: skip


def _same_detections(expected: dict[str, torch.Tensor], got: dict[str, torch.Tensor]) -> None:
    """Row by row, labels exactly and every other output to 1e-4 of its own scale (float32
    kernels sum in another order). Two rows whose scores agree within that bound may come out
    of TopK in either order (two scores equal in one runtime can differ in their last bits in
    the other), so a row may match any expected row of the same label and such a score."""
    assert got.keys() == expected.keys()
    atol = {n: 1e-4 * (float(t.abs().max()) + 1.0) for n, t in expected.items()}
    lead = expected["scores"].shape  # (B, max_det)
    rows = lead.numel()
    per_row = [n for n, t in expected.items() if t.shape[: len(lead)] == lead]
    for name in expected.keys() - per_row:  # not one row a detection (segment's prototypes)
        torch.testing.assert_close(got[name], expected[name], rtol=0, atol=atol[name], msg=name)
    flat = {n: expected[n].reshape(rows, -1).double() for n in per_row}
    mine = {n: got[n].reshape(rows, -1).double() for n in per_row}
    free = set(range(rows))
    extras = [n for n in flat if n not in ("labels", "scores")]

    def same(j: int, i: int) -> bool:
        return torch.equal(flat["labels"][j], mine["labels"][i]) and all(
            bool(((flat[n][j] - mine[n][i]).abs() <= atol[n]).all()) for n in extras
        )

    for i in range(rows):
        score = float(mine["scores"][i, 0])
        near = [j for j in free if abs(float(flat["scores"][j, 0]) - score) <= atol["scores"]]
        match = next((j for j in sorted(near, key=lambda j: abs(j - i)) if same(j, i)), None)
        assert match is not None, f"row {i} of {rows}: no expected row matches it"
        free.discard(match)


def _opset_of(path: Path) -> set[int]:
    import onnx

    return {o.version for o in onnx.load(str(path)).opset_import if o.domain in ("", "ai.onnx")}


def test_requested_opset_is_the_one_the_file_declares(tmp_path: Path) -> None:
    """``opset`` is written as asked; one outside the supported range is refused by name."""
    path = tmp_path / "o19.onnx"
    export_onnx(
        build_model("yolo26n", num_classes=3), path, image_size=(64, 64), max_det=20, opset=19
    )
    assert _opset_of(path) == {19}
    with pytest.raises(ValueError, match="opset 12 is not one lucid exports"):
        export_onnx(build_model("yolo26n", num_classes=3), path, image_size=(64, 64), opset=12)


def test_dynamic_graph_runs_other_batches_and_sizes_like_pytorch(
    tmp_path: Path, seeded: None
) -> None:
    """Traced at 1x64x64, the dynamic graph runs 2x96x64 and 1x64x128 in onnxruntime with
    PyTorch's results (rows matched: see `verify_onnx`); the input's dims are named. Segment
    holds every kind of output: rows (boxes, coefficients) and a map (prototypes)."""
    task: Task = "segment"
    ort = pytest.importorskip("onnxruntime", reason="comparing needs onnxruntime")
    model = build_model("yolo26n", task=task, num_classes=3)
    _spread_scores(model)
    path = tmp_path / f"{task}-dynamic.onnx"
    export_onnx(model, path, image_size=(64, 64), max_det=20, dynamic=True)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert session.get_inputs()[0].shape == ["batch", 3, "height", "width"]
    inputs = [torch.rand(2, 3, 96, 64), torch.rand(1, 3, 64, 128)]
    check = verify_onnx(model, path, inputs, max_det=20)
    assert check.ok, check.describe()
    assert check.shapes == [(2, 3, 96, 64), (1, 3, 64, 128)]
    other = build_model("yolo26n", task=task, num_classes=3)
    _spread_scores(other)
    assert not verify_onnx(other, path, inputs[:1], max_det=20).ok  # the check can fail


def test_static_graph_refuses_another_size_and_the_check_says_so(
    tmp_path: Path, seeded: None
) -> None:
    """Without ``dynamic`` the input shape is fixed: onnxruntime refuses another batch."""
    pytest.importorskip("onnxruntime", reason="comparing needs onnxruntime")
    model = build_model("yolo26n", num_classes=3)
    path = tmp_path / "static.onnx"
    export_onnx(model, path, image_size=(64, 64), max_det=20)
    with pytest.raises(Exception, match="images"):
        verify_onnx(model, path, [torch.rand(2, 3, 64, 64)], max_det=20)


def test_dynamic_graph_traced_below_max_det_anchors_is_refused(tmp_path: Path) -> None:
    """k = max_det is baked into a dynamic graph: tracing where fewer anchors exist is an error."""
    with pytest.raises(ValueError, match="give only 21 anchors"):
        export_onnx(
            build_model("yolo26n", num_classes=3),
            tmp_path / "x.onnx",
            image_size=(32, 32),
            max_det=300,
            dynamic=True,
        )
