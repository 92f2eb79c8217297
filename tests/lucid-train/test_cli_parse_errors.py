"""A command line the parser refuses is one ``lucid <verb>: error: ...`` line, exit status 2:
an unknown option with its nearest known one, a value of the wrong type with the type's reason
and an example; a flag given twice is named with both values and the one kept, the last (the
parser kept it without a word), while ``--config`` files stack and a flag still overrides them. Was:
jsonargparse's sixty-line usage block, then its message (`lucid_train.cli.parse_errors`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from lucid_train.cli import main

NO_DATA = ["--data.root", "/nonexistent"]  # refused before any data is read


def _refusal(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """The exit status and the one line on stderr (argparse's SystemExit or main's status)."""
    try:
        code = main(argv)
    except SystemExit as stop:
        code = int(stop.code or 0)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert "usage:" not in err and "Traceback" not in err, err[-3000:]
    assert len(lines) <= 3, err[-3000:]  # was: the usage block, ~60 lines
    said = [line for line in lines if line.startswith(f"lucid {argv[0]}: error: ")]
    assert len(said) == 1, err
    return code, said[0]


def _printed_config(
    argv: list[str], capsys: pytest.CaptureFixture[str], keep_err: bool = False
) -> Any:
    """The config ``--print_config`` prints (and stderr, with ``keep_err``)."""
    with pytest.raises(SystemExit) as done:
        main([*argv, "--print_config"])
    assert done.value.code in (0, None)
    said = capsys.readouterr()
    printed: dict[str, Any] = yaml.safe_load(said.out)
    return (printed, said.err) if keep_err else printed


@pytest.mark.parametrize(
    ("given", "says"),
    [
        (["--trainer.max_epoch", "3"],
         "unknown option --trainer.max_epoch; did you mean --trainer.max_epochs? "
         "(`lucid fit --help` lists every option)"),
        (["--data.batchsize", "4"],
         "unknown option --data.batchsize; did you mean --data.batch_size?"),
        (["--bogus", "1"], "unknown option --bogus (`lucid fit --help` lists every option)"),
    ],
    ids=["trainer", "data", "nothing-near"],
)  # fmt: skip
def test_a_misspelt_option_is_named_with_its_nearest_option(
    given: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Was: the usage block, then ``error: unrecognized arguments: --trainer.max_epoch 3``."""
    code, line = _refusal(["fit", *NO_DATA, *given], capsys)
    assert code == 2 and line.startswith("lucid fit: error: unknown option") and says in line, line


@pytest.mark.parametrize(
    ("verb", "given", "says"),
    [
        ("validate", "--ckpt_path", "unknown option --ckpt_path; did you mean --ckpt?"),
        ("predict", "--ckpt_path", "unknown option --ckpt_path; did you mean --ckpt?"),
        ("fit", "--ckpt", "did you mean --ckpt_path (to resume) or --model.weights (to train"),
    ],
)
def test_lightnings_checkpoint_flag_is_named_with_lucids(
    verb: str, given: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Lightning's ``validate --ckpt_path`` was "unknown option --ckpt_path", nothing offered
    (too far from ``--ckpt`` for the nearest-option match)."""
    code, line = _refusal([verb, given, "x.ckpt"], capsys)
    assert code == 2 and says in line, line


@pytest.mark.parametrize(
    ("given", "says"),
    [
        (["--data.batch_size", "abc"],
         "--data.batch_size 'abc' is not a positive integer (PositiveInt: invalid literal for "
         "int() with base 10: 'abc'); pass e.g. --data.batch_size 16"),
        (["--data.decode", "gpu"],
         "--data.decode 'gpu' is not one of auto, cpu, device; pass e.g. --data.decode auto"),
        (["--trainer.max_epochs", "x"],
         "--trainer.max_epochs 'x' is not an integer; pass e.g. --trainer.max_epochs 6"),
        (["--data.load_resize", "maybe"],
         "--data.load_resize 'maybe' is not true or false; pass e.g. --data.load_resize true"),
        (["--data.img_size", "33"],
         "--data.img_size '33' is not a canvas side (ImageSide: expected a multiple of 32 and "
         ">= 32, got 33); pass e.g. --data.img_size 320"),
        (["--data.classes", "1,3"],
         "--data.classes '1,3' is not a list; pass e.g. --data.classes '[1, 2]'"),
    ],
    ids=["positive-int", "choice", "int", "switch", "canvas-side", "list"],
)  # fmt: skip
def test_a_value_of_the_wrong_type_names_the_option_and_an_example(
    given: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Was: the usage block, then ``Parser key "data.batch_size": Not of type PositiveInt ...``
    over two lines."""
    code, line = _refusal(["fit", *NO_DATA, *given], capsys)
    assert code == 2 and line == f"lucid fit: error: {says}", line


def test_a_config_files_bad_key_or_value_is_named_with_its_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The key as the file spells it, at the file and line of the last ``--config`` that sets it
    (later files override earlier ones). Was: the usage block, then "Group 'trainer' does not
    accept ..." or "Parser key ...", naming no file."""
    key, value, earlier = tmp_path / "key.yaml", tmp_path / "value.yaml", tmp_path / "early.yaml"
    key.write_text("data:\n  batch_size: 4\ntrainer:\n  max_epoch: 3\n")
    earlier.write_text("data:\n  batch_size: 8\n")
    value.write_text("# the batch\ndata:\n  batch_size: abc\n")
    code, line = _refusal(["fit", *NO_DATA, "-c", str(key)], capsys)
    assert code == 2, line
    assert f"--config {key}:4 sets trainer.max_epoch, not a setting of lucid fit" in line, line
    assert "did you mean trainer.max_epochs?" in line, line
    code, line = _refusal(["fit", *NO_DATA, "-c", str(earlier), "--config", str(value)], capsys)
    assert code == 2, line
    assert f"data.batch_size (from --config {value}:3) is not a positive integer" in line, line
    assert "invalid literal for int() with base 10: 'abc'" in line, line
    assert line.endswith("pass e.g. --data.batch_size 16"), line


def test_a_missing_option_and_an_unknown_command_are_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, line = _refusal(["validate"], capsys)
    assert code == 2 and line.startswith("lucid validate: error: missing --ckpt (required"), line
    try:
        code = main(["fitt"])
    except SystemExit as stop:
        code = int(stop.code or 0)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "usage:" not in err, err
    assert "lucid: error: unknown command 'fitt'; did you mean fit? (commands: fit," in err, err


@pytest.mark.parametrize(
    ("given", "says", "kept"),
    [
        (["--trainer.max_epochs", "3", "--data.batch_size", "4", "--trainer.max_epochs", "5"],
         "--trainer.max_epochs given twice ('3', then '5'); the last, '5', is used", 5),
        (["--trainer.deterministic", "--trainer.deterministic=false"],  # a switch: =true
         "--trainer.deterministic given twice ('true', then 'false')", False),
        (["--data.batch_size=4", "--data.batch_size", "4"],  # the same value: still said
         "--data.batch_size given twice ('4', then '4')", 4),
        (["--trainer.callbacks=EarlyStopping", "--trainer.callbacks=LearningRateMonitor"],
         "--trainer.callbacks given twice ('EarlyStopping', then 'LearningRateMonitor'); the "
         "last, 'LearningRateMonitor', is used; to add to its list, give --trainer.callbacks+=",
         "lightning.pytorch.callbacks.LearningRateMonitor"),
    ],
    ids=["value", "switch", "same-value", "class-path"],
)  # fmt: skip
def test_a_flag_given_twice_is_named_and_the_last_value_kept(
    given: list[str], says: str, kept: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Was: the last value, without a word (the first callback dropped). The last still wins, as
    LightningCLI's later arguments override earlier ones, so a base list plus one override runs."""
    printed = _printed_config(["fit", *NO_DATA, *given], capsys, keep_err=True)
    config, err = printed
    flag = [t for t in given if t.startswith("--")][-1]
    key = flag.partition("=")[0].removeprefix("--").split(".")
    value = config[key[0]][key[1]]
    assert (value["class_path"] if isinstance(value, dict) else value) == kept
    assert f"lucid fit: warning: {says}" in err, err


def test_a_config_value_overridden_by_a_flag_is_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A flag over a ``--config`` file's value, and stacked files (``-c`` then ``--config``), as
    before, without a word; only the flag repeated on the command line is named."""
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text("trainer:\n  max_epochs: 3\ndata:\n  batch_size: 8\n")
    second.write_text("data:\n  batch_size: 4\n")
    argv = ["fit", *NO_DATA, "-c", str(first), "--config", str(second), "--trainer.max_epochs"]
    printed, err = _printed_config([*argv, "5"], capsys, keep_err=True)
    assert printed["trainer"]["max_epochs"] == 5
    assert printed["data"]["batch_size"] == 4
    assert "given twice" not in err, err
    printed, err = _printed_config([*argv, "5", "--trainer.max_epochs", "7"], capsys, keep_err=True)
    assert printed["trainer"]["max_epochs"] == 7
    assert "--trainer.max_epochs given twice ('5', then '7')" in err, err


def test_flags_that_add_to_a_list_or_to_a_class_may_repeat(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--trainer.callbacks+=`` appends (each followed by its own arguments), and a mapping after
    a class path sets that class's arguments: the parser merges both, so neither is refused."""
    callbacks = ["--trainer.callbacks+=EarlyStopping", "--trainer.callbacks.monitor=a",
                 "--trainer.callbacks+=EarlyStopping", "--trainer.callbacks.monitor=b"]  # fmt: skip
    printed = _printed_config(["fit", *NO_DATA, *callbacks], capsys)
    given = printed["trainer"]["callbacks"]
    assert [c["init_args"]["monitor"] for c in given] == ["a", "b"]
    init_args = '{"init_args": {"monitor": "c"}}'
    merged = ["--trainer.callbacks=EarlyStopping", "--trainer.callbacks", init_args]
    printed = _printed_config(["fit", *NO_DATA, *merged], capsys)
    assert printed["trainer"]["callbacks"]["init_args"]["monitor"] == "c"


def test_a_config_key_given_twice_is_refused_naming_its_second_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Was: YAML kept the second ``model:`` section, dropping the first's settings unsaid."""
    config = tmp_path / "run.yaml"
    config.write_text("model:\n  model: yolo26s\ntrainer:\n  max_epochs: 3\nmodel:\n  lr0: 0.1\n")
    code, line = _refusal(["fit", *NO_DATA, "--config", str(config)], capsys)
    assert code == 2, line
    assert f"--config {config}:5: key 'model' appears twice in one mapping" in line, line


@pytest.mark.parametrize("order", ["flag-then-config", "config-then-flag"])
def test_a_config_files_bad_value_is_named_with_its_file_beside_a_flag_for_the_same_key(
    order: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The parser refuses the file's value, read before or after the flag: the file and line are
    named. Was: ``--data.batch_size '4' is not a positive integer (...: 'many')``, quoting the
    flag's good value with the file's bad one."""
    config = tmp_path / "run.yaml"
    config.write_text("data:\n  batch_size: many\n")
    flag, file = ["--data.batch_size", "4"], ["--config", str(config)]
    given = [*flag, *file] if order == "flag-then-config" else [*file, *flag]
    code, line = _refusal(["fit", *NO_DATA, *given], capsys)
    assert code == 2, line
    assert f"data.batch_size (from --config {config}:2) is not a positive integer" in line, line
    assert "'4'" not in line, line
