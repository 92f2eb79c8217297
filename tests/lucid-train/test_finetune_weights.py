"""Fine-tuning from weights (``--model.weights``): the authors' released ``yolo26*.pt`` layout and
lucid's own files are mapped into our modules without running pickled code; shapes are checked
with the first mismatch named; class branches start fresh when the class count differs; the
mapped weights are kept; and a run started from converted weights starts from a lower loss than
one from scratch.

No authors' file can be downloaded here: files of their layout are written from our own modules
(`lucid_testing.authors_layout`), and their key names and shapes are held against the facts taken
from their build (``facts/ultralytics_weights_layout.json``, written by the script beside it).
"""

from __future__ import annotations

import json
import os
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from lucid_testing.authors_layout import authors_state_dict, write_authors_checkpoint
from lucid_testing.module_checkpoints import write_module_checkpoint
from lucid_train.cli import main
from lucid_train.tasks.module import YOLOModule
from lucid_train.tasks.restore import convert_weights
from lucid_train.tasks.task_modules import module_class
from lucid_train.weights import WeightsError, load_weights, loadable_keys
from lucid_train.weights.authors_names import AUTHORS_ONLY, authors_key
from lucid_train.weights.authors_pickle import read_authors_checkpoint

FACTS = Path(__file__).parent / "facts" / "ultralytics_weights_layout.json"


def _module(model: str = "yolo26n", num_classes: int = 3, **kw: Any) -> YOLOModule:
    from lucid_train.model_spec import parse_model

    task = parse_model(model).task
    if task == "pose":
        kw.setdefault("num_keypoints", 7)
    return module_class(task)(model, num_classes=num_classes, img_size=64, **kw)


def _perturbed(module: YOLOModule) -> YOLOModule:
    """Distinct values everywhere, so a tensor left unloaded cannot pass for a loaded one."""
    with torch.no_grad():
        for value in loadable_keys(module).values():
            if value.is_floating_point():
                value.add_(torch.randn_like(value) * 0.1)
    return module


def _authors_file(path: Path, module: YOLOModule, **kw: Any) -> Path:
    from lucid_train.model_spec import parse_model

    spec = parse_model(module.hparams["model"])
    kpt = module.hparams.get("num_keypoints")
    return write_authors_checkpoint(
        path,
        authors_state_dict(module),
        task=module.task,
        scale=spec.scale[-1],
        num_classes=module.hparams["num_classes"],
        kpt_shape=(kpt, 3) if kpt else None,
        **kw,
    )


def _equal_to_fp16_of(loaded: YOLOModule, source: YOLOModule, keys: Any) -> list[str]:
    ours, theirs = loadable_keys(loaded), loadable_keys(source)
    return [k for k in keys if not torch.equal(ours[k], theirs[k].half().to(ours[k].dtype))]


@pytest.mark.parametrize("model", ["yolo26n", "yolo26n-seg", "yolo26n-pose", "yolo26n-obb"])
def test_key_mapping_gives_the_authors_names_and_shapes(model: str) -> None:
    """Every tensor of our 80-class (17-keypoint) build has the authors' name and shape, and
    every tensor of theirs but the flow's prior constants has one of ours."""
    facts = json.loads(FACTS.read_text())["models"][model]
    theirs = {}
    for line in facts["state_dict"]:
        key, shape = line.split(" ")
        theirs[key] = tuple(int(d) for d in shape.split(",")) if shape else ()
    kw = {"num_keypoints": 17} if facts["task"] == "pose" else {}
    ours = loadable_keys(_module(model, 80, **kw))
    mapped = {authors_key(k): tuple(v.shape) for k, v in ours.items()}
    assert None not in mapped
    assert mapped == {k: v for k, v in theirs.items() if k not in AUTHORS_ONLY}


def test_reader_handles_every_global_their_files_name() -> None:
    """The globals the authors' pickles name (facts) are either the few it rebuilds or inert
    stand-ins: none is imported."""
    from lucid_train.weights.authors_pickle import STORAGE_DTYPES, Inert, InertUnpickler

    facts = json.loads(FACTS.read_text())["models"]
    named = {g for m in facts.values() for g in m["globals"]}
    reader = InertUnpickler(b"", None, "")  # type: ignore[arg-type]
    for qualified in named:
        module, name = qualified.rsplit(".", 1)
        got = reader.find_class(module, name)
        safe = (module, name) in InertUnpickler.SAFE or name in STORAGE_DTYPES
        assert safe or (isinstance(got, type) and issubclass(got, Inert)), qualified


def test_authors_file_loads_every_tensor_without_running_its_code(tmp_path: Path) -> None:
    """An authors' layout file carrying a payload that would run ``os.system`` when unpickled:
    torch's weights-only loader refuses it, ours loads every tensor (equal to the file's fp16
    values) and the payload never runs."""
    marker = tmp_path / "payload-ran"

    class Payload:
        def __reduce__(self) -> Any:
            return (os.system, (f"touch {marker}",))

    source = _perturbed(_module("yolo26n-seg"))
    path = _authors_file(tmp_path / "yolo26n-seg.pt", source, extra={"payload": Payload()})
    with pytest.raises(Exception, match="Weights only load failed"):
        torch.load(path, weights_only=True)
    target = _module("yolo26n-seg")
    report = load_weights(target, path)
    assert not marker.exists()
    assert report.fresh == () and report.ignored == ()
    assert len(report.loaded) == len(loadable_keys(target))
    assert _equal_to_fp16_of(target, source, report.loaded) == []
    assert report.summary().startswith(
        f"weights: loaded {len(report.loaded)}/{len(report.loaded)} tensors"
    )
    assert "Ultralytics 8.4.190 yolo26n-seg" in report.summary()
    assert "posix.system" in read_authors_checkpoint(path).globals_named or (
        "nt.system" in read_authors_checkpoint(path).globals_named
    )


def test_writing_the_authors_layout_leaves_an_imported_ultralytics_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The peer lane imports the real Ultralytics: the stand-in classes the layout file is
    pickled with are its classes only while the file is written (left in place, its own models
    no longer pickled for the rest of the process, and the ladder's step tests failed)."""
    kept = {"ultralytics.nn.tasks": "DetectionModel", "ultralytics.nn.modules.conv": "Conv"}
    for name in ("ultralytics", "ultralytics.nn", "ultralytics.nn.modules", *kept):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    theirs = {m: type(c, (), {}) for m, c in kept.items()}
    for module, cls in theirs.items():
        setattr(sys.modules[module], kept[module], cls)
    write_authors_checkpoint(
        tmp_path / "w.pt", {"model.0.conv.weight": torch.ones(1)}, task="detect"
    )
    assert {m: getattr(sys.modules[m], c) for m, c in kept.items()} == theirs


def test_class_branches_start_fresh_when_the_class_count_differs(tmp_path: Path) -> None:
    """80 classes in the file, 3 in the run: both heads' class branches keep the run's own
    initialisation, every other tensor is the file's; the summary says which and why."""
    source = _perturbed(_module("yolo26n", 80))
    path = _authors_file(tmp_path / "yolo26n.pt", source)
    torch.manual_seed(1)
    target = _module("yolo26n", 3)
    before = {k: v.clone() for k, v in loadable_keys(target).items()}
    report = load_weights(target, path)
    after = loadable_keys(target)
    assert report.fresh and all(".cls." in k for k in report.fresh)
    assert {k for k in after if ".cls." in k} == set(report.fresh)
    assert all(torch.equal(after[k], before[k]) for k in report.fresh)
    assert _equal_to_fp16_of(target, source, report.loaded) == []
    assert f"fresh: {len(report.fresh)} (the class branches: 3 classes here, 80 in the file)" in (
        report.summary()
    )


def test_first_mismatch_is_named_in_both_spellings(tmp_path: Path) -> None:
    """A tensor of another shape: the error names it in our and the file's spelling, both
    shapes and the fix; another scale or task is refused by name before any shape."""
    source = _module("yolo26n")
    state = authors_state_dict(source)
    state["model.9.cv2.conv.weight"] = state["model.9.cv2.conv.weight"][:, :-1]
    path = write_authors_checkpoint(tmp_path / "bad.pt", state, task="detect", num_classes=3)
    with pytest.raises(WeightsError) as err:
        load_weights(_module("yolo26n"), path)
    text = str(err.value)
    assert "model.backbone.sppf.cv2.conv.weight (model.9.cv2.conv.weight in the file)" in text
    assert "is 256x511x1x1 in the file but 256x512x1x1 in yolo26n (first mismatch)" in text
    other = write_authors_checkpoint(tmp_path / "s.pt", state, task="detect", scale="s")
    with pytest.raises(WeightsError, match="are yolo26s, but this run builds yolo26n"):
        load_weights(_module("yolo26n"), other)
    with pytest.raises(WeightsError, match=r"are a detect model .* trains segment"):
        load_weights(_module("yolo26n-seg"), path)


def test_a_file_that_is_no_weights_is_refused_with_the_weights_fix(tmp_path: Path) -> None:
    """A text file: the reader's finding (named by its kind, not called a damaged checkpoint)
    and what to pass instead, not the resume's advice (the last good checkpoint beside it, or to
    start the run again)."""
    path = tmp_path / "notes.txt"
    path.write_text("not a checkpoint\n")
    with pytest.raises(WeightsError) as err:
        load_weights(_module("yolo26n"), path)
    text = str(err.value)
    assert text.startswith(f"weights {path}: neither a lucid checkpoint")
    assert "(is not a checkpoint (a .txt file))" in text
    assert text.endswith("pass a last.ckpt/best.ckpt of `lucid fit`, a converted file "
                         "(python -m lucid_train.weights) or a yolo26*.pt")  # fmt: skip
    assert "start the run again" not in text and "checkpoint there is" not in text


def test_converted_file_and_lucid_checkpoint_keep_the_mapped_weights(tmp_path: Path) -> None:
    """The one-time conversion writes a file ``torch.load(weights_only=True)`` reads; it and a
    lucid checkpoint both load the same values (pose: its flow too)."""
    source = _perturbed(_module("yolo26n-pose"))
    authors = _authors_file(tmp_path / "yolo26n-pose.pt", source)
    converted = tmp_path / "yolo26n-pose.lucid.pt"
    convert_weights(authors, converted)
    assert torch.load(converted, weights_only=True)["lucid_weights"]["model"] == "yolo26n-pose"
    target = _module("yolo26n-pose")
    report = load_weights(target, converted)
    assert any(k.startswith("flow.") for k in report.loaded)
    assert _equal_to_fp16_of(target, source, report.loaded) == []
    assert "converted from yolo26n-pose.pt (Ultralytics 8.4.190)" in report.summary()
    ckpt = tmp_path / "last.ckpt"  # a class name that mentions them: still a lucid file
    written = write_module_checkpoint(ckpt, "yolo26n-pose", class_names=("ultralytics.a", "b", "c"))
    again = _module("yolo26n-pose")
    assert load_weights(again, ckpt).fresh == ()
    assert all(torch.equal(v, loadable_keys(written)[k]) for k, v in loadable_keys(again).items())


def _batch_loss(module: YOLOModule, batch: Any) -> float:
    module.train()
    images = batch.float_images()
    targets = module.prepare_targets(batch)
    terms = module.compute_loss(module.forward_network(images), targets, tuple(images.shape[-2:]))
    return float(terms.total)


def test_fine_tuning_from_converted_weights_starts_below_scratch(
    small_synthetic: Callable[[str], Path], tmp_path: Path
) -> None:
    """On the built-in set: a model trained for 5 steps on one batch, written in the authors'
    layout and converted, starts a new run (its module built from the file) at a lower loss on
    that batch than a module from scratch."""
    from lucid_train.data import LucidDataModule

    torch.manual_seed(0)
    dm = LucidDataModule("detect", small_synthetic("detect"), img_size=64, batch_size=2,
                         num_workers=0)  # fmt: skip
    dm.setup("fit")
    batch = next(iter(dm.val_dataloader()))
    trained = _module("yolo26n", dm.schema.num_classes)
    optimizer = torch.optim.AdamW(trained.parameters(), lr=0.005)
    for _ in range(5):
        trained.train()
        images = batch.float_images()
        terms = trained.compute_loss(
            trained.forward_network(images), trained.prepare_targets(batch), (64, 64)
        )
        optimizer.zero_grad()
        terms.total.backward()
        optimizer.step()
    converted = tmp_path / "converted.pt"
    convert_weights(_authors_file(tmp_path / "yolo26n.pt", trained), converted)
    scratch = _batch_loss(_module("yolo26n", dm.schema.num_classes), batch)
    tuned = _batch_loss(_module("yolo26n", dm.schema.num_classes, weights=str(converted)), batch)
    assert tuned < 0.85 * scratch, (tuned, scratch)  # measured: 0.69


@pytest.mark.slow
def test_fit_prints_the_summary_and_refuses_weights_with_resume(
    small_synthetic: Callable[[str], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``lucid fit --model.weights``: the one summary line; other weights given to a resume one
    error line; an unreadable file one error line naming it."""
    authors = _authors_file(tmp_path / "yolo26n.pt", _module("yolo26n", 80))
    code = main(["fit", "--model.weights", str(authors), "--data.root",
                 str(small_synthetic("detect")), "--data.img_size", "64", "--data.batch_size",
                 "4", "--data.num_workers", "0", "--trainer.max_epochs", "1",
                 "--trainer.limit_train_batches", "1", "--trainer.limit_val_batches", "1",
                 "--run.root", str(tmp_path / "runs")])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    lines = [line for line in out.splitlines() if line.startswith("weights: ")]
    assert len(lines) == 1 and "(the class branches: 3 classes here, 80 in the file)" in lines[0]
    # a resume continues from its checkpoint's weights: other weights contradict the run's
    # config.yaml and are refused in one line
    last = tmp_path / "runs" / "detect" / "train" / "checkpoints" / "last.ckpt"
    other = _authors_file(tmp_path / "other.pt", _module("yolo26n", 80))
    code = main(["fit", "--model.weights", str(other), "--ckpt_path", str(last)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--model.weights" in err[0], err
    assert "contradicts" in err[0]
    junk = tmp_path / "junk.pt"
    junk.write_text("not weights")
    code = main(["fit", "--model.weights", str(junk), "--data.root",
                 str(small_synthetic("detect")), "--data.num_workers", "0",
                 "--run.root", str(tmp_path / "runs")])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and f"weights {junk}" in err[0]


def test_the_conversion_command_refuses_an_unreadable_authors_file_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`python -m lucid_train.weights` on a file of the authors' layout whose model holds no
    tensors: exit 2 and one line naming the file, the finding and what lucid reads; no
    traceback, nothing written."""
    from lucid_train.weights.__main__ import main as convert_main

    src = write_authors_checkpoint(
        tmp_path / "yolo26n.pt", {}, task="detect", scale="n", num_classes=3
    )
    dst = tmp_path / "out.pt"
    assert convert_main([str(src), str(dst)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"lucid weights: error: weights {src}: an Ultralytics checkpoint, but")
    assert "holds no tensors" in err and err.endswith("or YOLO.save)")
    assert "\n" not in err and not dst.exists()


def test_the_conversion_command_given_a_folder_asks_for_the_file_inside(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Was "no such file" for a folder that exists."""
    from lucid_train.weights.__main__ import main as convert_main

    assert convert_main([str(tmp_path), str(tmp_path / "out.pt")]) == 2
    err = capsys.readouterr().err.strip()
    assert f"weights {tmp_path}: a folder; pass the authors' .pt file inside it" in err


def test_the_conversion_command_keeps_the_authors_file_and_names_an_unwritable_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Was: ``SRC SRC`` replaced the authors' file with the converted one (exit 0), and an
    output under /sys a PermissionError traceback."""
    from lucid_train.weights.__main__ import main as convert_main

    src = _authors_file(tmp_path / "yolo26n.pt", _module("yolo26n", 3))
    before = src.read_bytes()
    assert convert_main([str(src), str(tmp_path / "." / "yolo26n.pt")]) == 2
    err = capsys.readouterr().err.strip()
    assert "the output is the file itself" in err and "\n" not in err
    assert src.read_bytes() == before
    assert convert_main([str(src), "/sys/lucid-x.pt"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("lucid weights: error: cannot write /sys/") and "\n" not in err


def test_the_conversion_command_names_an_empty_file_and_a_file_already_lucids(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Was "not an Ultralytics checkpoint" for both."""
    from lucid_train.weights.__main__ import main as convert_main

    empty = tmp_path / "yolo26n.pt"
    empty.touch()
    assert convert_main([str(empty), str(tmp_path / "out.pt")]) == 2
    assert "an empty file (0 bytes)" in capsys.readouterr().err
    ours = tmp_path / "last.ckpt"
    hp = {"task": "detect", "model": "yolo26n", "class_names": ("a",)}
    torch.save({"hyper_parameters": hp, "state_dict": {}}, ours)
    assert convert_main([str(ours), str(tmp_path / "out.pt")]) == 2
    err = capsys.readouterr().err
    assert "a lucid checkpoint of yolo26n already" in err and "--model.weights" in err


def test_the_conversion_command_names_a_file_cut_short_as_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Was "not an Ultralytics checkpoint (nothing to convert)" for an authors' .pt cut short
    by a download (or a lucid one by a copy): no longer a zip archive, it is said to be cut
    short, with the fix; a whole archive that is neither keeps the old line."""
    from lucid_train.weights.__main__ import main as convert_main

    whole = tmp_path / "whole.pt"
    torch.save({"model": "x", "epoch": 3}, whole)
    cut = tmp_path / "yolo26n.pt"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    assert convert_main([str(cut), str(tmp_path / "out.pt")]) == 2
    err = capsys.readouterr().err.strip()
    assert f"weights {cut}: not a torch zip archive" in err and "cut short" in err
    assert "download or copy it again" in err and "\n" not in err
    assert convert_main([str(whole), str(tmp_path / "out.pt")]) == 2
    assert "not an Ultralytics checkpoint" in capsys.readouterr().err
