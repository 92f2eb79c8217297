"""The ``lucid`` parser's errors in one line, and a word on a flag given twice.

jsonargparse answers a bad command line with the verb's whole usage block (about sixty lines of
``[--data.decode {auto,cpu,device}] ...``) before the message, and the message itself can run
over ten lines (a union type lists every member's failure). `LucidArgumentParser.error` prints
``lucid <verb>: error: <line>`` instead, exit status 2 as argparse's: an unknown option with its
nearest known one (`difflib`), a value of the wrong type with the type's reason and an example.
``--help`` is untouched. A parser jsonargparse builds for itself (``exit_on_error=False``, for a
nested type) still raises, as before, and ``JSONARGPARSE_DEBUG`` still shows its traceback.

The parser reads a flag given twice as its last value, silently; `warn_repeated_flags` says so on
the user's own command line, naming both values (the parser's own re-parses, which append
``--config`` or ``--ckpt_path``, are not checked). The last value still wins: later arguments
override earlier ones in LightningCLI, and scripts that append one override to a base list of
flags rely on it. ``--config`` files stack and a flag overrides them, as before.

A ``--seed_everything`` outside numpy's range (`check_seed`) is refused once parsed, naming the
flag; Lightning raised it later as a traceback. So is a fit without a count of epochs
(`check_epochs`: ``--trainer.max_epochs -1``, or ``null`` beside ``max_steps``).
"""

from __future__ import annotations

import difflib
import os
import re
import sys
import types
import typing
from collections.abc import MutableSequence, Sequence
from typing import Any, Literal, NoReturn

from lightning.pytorch.cli import LightningArgumentParser

from lucid_train.cli.config_files import where_set
from lucid_train.errors import LucidError

__all__ = [
    "LucidArgumentParser",
    "check_epochs",
    "check_seed",
    "short_message",
    "warn_repeated_flags",
]

# A type's name -> (what a value of it is, a value it takes); `_describe` and `_example`.
_TYPE_WORDS: dict[str, tuple[str, str]] = {
    "PositiveInt": ("a positive integer", "1"),
    "NonNegativeInt": ("a non-negative integer", "1"),
    "PositiveFloat": ("a positive number", "0.5"),
    "NonNegativeFloat": ("a non-negative number", "0.5"),
    "ClosedUnitInterval": ("a fraction from 0 to 1", "0.5"),
    "OpenUnitInterval": ("a fraction between 0 and 1", "0.5"),
    "ImageSide": ("a canvas side", "320"),
    "int": ("an integer", "1"),
    "float": ("a number", "0.5"),
    "bool": ("true or false", "true"),
    "str": ("a string", ""),
}
_LISTS = (list, Sequence, MutableSequence)  # the types ``--flag+=VALUE`` appends to
# Lines of jsonargparse's type report that only restate the type (said by `_describe`).
_RESTATED = re.compile(
    r"^(Does not validate against any of the Union subtypes|Subtypes:|Errors:|Given value|"
    r"Expected an? <class '[^']*'>(\. Got value: .*)?$|Expected an? typing\.Literal)"
)
_LINK = re.compile(
    r"^Call to compute_fn of link '\w+\((?P<src>[^)]*)\) --> [^']*' "
    r"with args \((?P<args>.*)\) failed: (?P<why>.*)$",
    re.S,
)


SEED_RANGE = (0, 2**32 - 1)  # numpy's, which Lightning's seed_everything enforces


class LucidArgumentParser(LightningArgumentParser):
    """LightningCLI's parser, whose errors are one line (module docstring)."""

    def parse_args(self, *args: Any, **kwargs: Any) -> Any:
        config = super().parse_args(*args, **kwargs)
        check_seed(config)
        check_epochs(config)
        return config

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        if not self.exit_on_error or os.environ.get("JSONARGPARSE_DEBUG"):
            super().error(message, ex)  # raises, as jsonargparse does here
        parser = _verb_parser(self, ex)
        prog = parser.prog.replace(" [options]", "")
        sys.stderr.write(f"{prog}: error: {short_message(parser, message)}\n")
        self.exit(2)


def check_seed(config: Any) -> None:
    """Refuse a ``--seed_everything`` outside numpy's range, naming the flag (Lightning raised
    it as a ValueError traceback after parsing: "-1 is not in bounds")."""
    verb = config.get("subcommand") if hasattr(config, "get") else None
    seed = (config.get(verb) or {}).get("seed_everything") if verb else None
    low, high = SEED_RANGE
    if isinstance(seed, int) and not isinstance(seed, bool) and not low <= seed <= high:
        raise LucidError(
            f"--seed_everything {seed}: expected a seed from {low} to {high} (numpy's range), "
            "or true for a random one; pass e.g. --seed_everything 0"
        )


def check_epochs(config: Any) -> None:
    """Refuse a fit without a count of epochs: the schedule and ProgLoss run over
    ``max_epochs``, and Lightning's "unlimited" (-1, or ``null`` beside ``max_steps``) stopped
    the fit at its first epoch with ProgLoss's ValueError traceback."""
    if not hasattr(config, "get") or config.get("subcommand") != "fit" or not config.get("fit"):
        return
    fit = config.get("fit")
    epochs, steps = fit.get("trainer.max_epochs"), fit.get("trainer.max_steps")
    unlimited = epochs is None and steps not in (None, -1)
    if unlimited or (isinstance(epochs, int) and epochs < 0):
        raise LucidError(
            f"--trainer.max_epochs {'null' if epochs is None else epochs}: lucid fit needs the "
            "count of epochs its learning-rate schedule and ProgLoss run over; pass e.g. "
            "--trainer.max_epochs 100 (--trainer.max_steps may still stop it earlier)"
        )


def _verb_parser(parser: Any, ex: Exception | None) -> Any:
    """The parser of the verb at fault: the one the error names, or the verb in the command
    line when the top-level parser reports it (a missing required flag)."""
    named = getattr(ex, "subcommand_parser", None)
    if named is not None:
        return named
    action = getattr(parser, "_subcommands_action", None)
    choices = getattr(action, "choices", None) or {}
    verb = next((a for a in getattr(parser, "args", None) or [] if a in choices), None)
    return choices[verb] if verb else parser


def short_message(parser: LightningArgumentParser, message: str) -> str:
    """jsonargparse's ``message`` as one line naming the option, what is wrong and the fix."""
    prog = parser.prog.replace(" [options]", "")
    known = list(parser._option_string_actions)
    help_hint = f"`{prog} --help` lists every option"
    if message.startswith("unrecognized arguments: "):
        return _unknown(message.split(": ", 1)[1].split(), known, help_hint)
    key_error = re.match(r"^Parser key \"([^\"]+)\":\s*(.*)$", message, re.S)
    if key_error:
        return _bad_value(parser, key_error[1], key_error[2])
    link = _LINK.match(message)
    if link:  # a value a link's function refused (--trainer.accumulate_grad_batches 0)
        flags = " ".join(f"--{s.strip()}" for s in link["src"].split(","))
        return f"{flags} {link['args'].rstrip(',')}: {' '.join(link['why'].split())}"
    setting = re.match(r"^(?:Subcommand|Group) '[^']*' does not accept option '([^']*)'", message)
    if setting:  # a config file's key
        near = _nearest(setting[1], [k[2:] for k in known if k.startswith("--")])
        hint = f"; did you mean {near}?" if near else ""
        where = where_set(getattr(parser, "args", None) or [], setting[1])
        source = f"--config {where}" if where else "a --config file"
        return f"{source} sets {setting[1]}, not a setting of {prog}{hint} ({help_hint})"
    missing = re.match(r"^the following arguments are required: (.*)$", message)
    if missing:
        verb = prog.split()[-1]
        names = [f"--{k.strip().removeprefix(f'{verb}.')}" for k in missing[1].split(",")]
        return f"missing {', '.join(names)} (required; {help_hint})"
    choice = re.match(r"^argument \w+: invalid choice: '([^']*)' \(choose from (.*)\)$", message)
    if choice:  # an unknown verb
        verbs = [v.strip(" '") for v in choice[2].split(",")]
        near = _nearest(choice[1], verbs)
        hint = f"; did you mean {near}?" if near else ""
        return f"unknown command '{choice[1]}'{hint} (commands: {', '.join(verbs)})"
    no_value = re.match(r"^argument (--\S+): expected one argument$", message)
    if no_value:
        example = _example(parser._option_string_actions.get(no_value[1]))
        shown = f", e.g. {no_value[1]} {example}" if example else ""
        return f"{no_value[1]} needs a value{shown}"
    return f"{' '.join(message.split())} ({help_hint})"


# Lightning's checkpoint flag of each verb against lucid's, too far apart for difflib's cutoff:
# the flag that must be known, and what to say.
_SAME_FLAG = {
    "--ckpt_path": ("--ckpt", "--ckpt"),  # lucid validate --ckpt_path (Lightning's spelling)
    "--ckpt": ("--ckpt_path", "--ckpt_path (to resume) or --model.weights (to train from it)"),
}


def _nearest(name: str, known: Sequence[str]) -> str | None:
    flag, said = _SAME_FLAG.get(name, ("", ""))
    if flag in known:
        return said
    found = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
    return found[0] if found else None


def _unknown(tokens: list[str], known: list[str], help_hint: str) -> str:
    """Each unknown option with its nearest known one; a stray word (no option before it)."""
    options = [t.partition("=")[0] for t in tokens if re.match(r"^--?[A-Za-z]", t)]
    if not options:
        return f"unexpected argument '{tokens[0]}': an option is --name VALUE ({help_hint})"
    nearest = [_nearest(option, known) for option in options]
    if len(options) == 1:
        hint = f"; did you mean {nearest[0]}?" if nearest[0] else ""
        return f"unknown option {options[0]}{hint} ({help_hint})"
    said = [f"{o} (did you mean {n}?)" if n else o for o, n in zip(options, nearest, strict=True)]
    return f"unknown options {', '.join(said)}; {help_hint}"


def _bad_value(parser: LightningArgumentParser, key: str, report: str) -> str:
    """``--key 'value' is not <what the type takes> (<the type's reason>); pass e.g. ...``."""
    flag = f"--{key}"
    action = parser._option_string_actions.get(flag)
    hint = getattr(action, "_typehint", None)
    lines = [line.strip().removeprefix("- ").strip() for line in report.splitlines()]
    reasons = [line.rstrip(":") for line in lines if line and not _RESTATED.match(line)]
    reasons = [re.sub(r"^Not of type (\w+): ", r"\1: ", line) for line in reasons]
    argv = getattr(parser, "args", None) or []
    spelt = (f"{flag}=", f"{flag}+", f"{flag}.")  # --f=v, --f+=v, --f.sub v
    at = [i for i, t in enumerate(argv) if t == flag or t.startswith(spelt)]
    given = _given_value(argv, flag)
    # The parser checks each source as it reads it, in order, and a --config file's value is
    # refused even where a later flag would override it: the file is named where it comes after
    # the flag, or before it with a refusal that does not quote the flag's value.
    from_file = bool(at) and (
        where_set(argv[max(at) :], key) is not None
        or (where_set(argv[: min(at)], key) is not None and f"'{given}'" not in report)
    )
    given = None if from_file else given
    if given is None:  # a config file's, or a list built with --flag+=
        found = re.search(r"(?:Given|Got) value: (.*)$", report, re.M)
        given = found[1].strip() if found else None
    value = f" {given!r}" if given is not None and len(given) <= 40 else ""  # not a whole list
    if at and not from_file:
        shown = f"{flag}{value}"
    else:  # the key as a config file spells it
        where = where_set(argv, key)
        shown = f"{key}{value} (from --config {where or 'a file'})"
    what = f"is not {_describe(hint)}" if hint is not None else "is refused"
    why = f" ({'; '.join(dict.fromkeys(reasons))})" if reasons else ""
    example = _example(action)
    fix = f"; pass e.g. {flag} {example}" if example else ""
    return f"{shown} {what}{why}{fix}"


def _given_value(argv: Sequence[str], flag: str) -> str | None:
    """The value of the last ``flag`` on the command line (``--f v`` or ``--f=v``), if any."""
    value = None
    for token, after in zip(argv, [*argv[1:], None], strict=True):
        if token == flag and after is not None:
            value = after
        elif token.startswith(f"{flag}="):
            value = token.partition("=")[2]
    return value


def _union_members(hint: Any) -> list[Any]:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return [m for arg in typing.get_args(hint) for m in _union_members(arg)]
    return [] if hint is type(None) else [hint]


def _describe(hint: Any) -> str:
    """What a value of ``hint`` is, in words: ``a positive integer``, ``one of auto, cpu``."""
    said = []
    for member in _union_members(hint):
        origin = typing.get_origin(member)
        if origin is Literal:
            said.append("one of " + ", ".join(str(a) for a in typing.get_args(member)))
        elif origin in _LISTS:
            said.append("a list")
        elif origin is not None:  # dict[...], tuple[...]
            said.append(f"a {getattr(origin, '__name__', 'collection')}")
        else:
            name = getattr(member, "__name__", str(member))
            said.append(_TYPE_WORDS.get(name, (f"a {name} class path", ""))[0])
    return " or ".join(dict.fromkeys(said)) or "a value of its type"


def _example(action: Any) -> str:
    """A value ``action`` takes: its default when that is a plain value, else one of its type."""
    default = getattr(action, "default", None)
    if isinstance(default, bool):
        return str(default).lower()
    if isinstance(default, int | float) or (isinstance(default, str) and default):
        return str(default)
    for member in _union_members(getattr(action, "_typehint", None)):
        if typing.get_origin(member) is Literal:
            return str(typing.get_args(member)[0])
        if typing.get_origin(member) in _LISTS:  # a list in the YAML the parser reads
            of = {getattr(a, "__name__", "") for a in typing.get_args(member)}
            if of & {"int", "float", "str"}:  # not a list of classes: no short example
                return "'[a, b]'" if of == {"str"} else "'[1, 2]'"
        example = _TYPE_WORDS.get(getattr(member, "__name__", ""), ("", ""))[1]
        if example:
            return example
    return ""


def warn_repeated_flags(parser: LightningArgumentParser, argv: Sequence[str]) -> list[str]:
    """Say on stderr which typed flags ``argv`` gives twice (the flags after the verb, each
    boolean one already ``=true``), with both values and the one kept (the last); the lines
    said are returned. ``--config`` and the group files (``--trainer FILE``) stack, as before;
    a mapping given after a class (``--trainer.callbacks '{"init_args": ...}'``) is merged into
    it by the parser, so not a repeat; neither is ``--flag+=VALUE``."""
    seen: dict[str, str] = {}
    said: list[str] = []
    i = 0
    while i < len(argv):
        name, eq, value = argv[i].partition("=")
        action = parser._option_string_actions.get(name) if name.startswith("-") else None
        if action is None or not hasattr(action, "_typehint") or name.endswith("+"):
            # not a typed flag, or ``--flag+=VALUE``: appending is what repeating is for
            i += 1
            continue
        if not eq:  # --flag VALUE (a following option is no value: the parser says so)
            after = argv[i + 1] if i + 1 < len(argv) else ""
            value = "" if after.startswith("--") else after
            i += 0 if after.startswith("--") else 1
        i += 1
        if action.dest in seen and not value.lstrip().startswith("{"):
            more = f"; to add to its list, give {name}+=VALUE" if _takes_list(action) else ""
            said.append(
                f"{name} given twice ({seen[action.dest]!r}, then {value!r}); the last, "
                f"{value!r}, is used{more}"
            )
        seen[action.dest] = value
    if os.environ.get("LOCAL_RANK", "0") == "0":  # a data-parallel launch parses on every rank
        for line in said:
            print(f"{parser.prog.replace(' [options]', '')}: warning: {line}", file=sys.stderr)
    return said


def _takes_list(action: Any) -> bool:
    """Whether the flag's type admits a list, which ``--flag+=VALUE`` appends to."""
    return any(typing.get_origin(m) in _LISTS for m in _union_members(action._typehint))
