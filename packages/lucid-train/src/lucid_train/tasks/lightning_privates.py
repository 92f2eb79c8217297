"""Every private attribute of Lightning (and of the libraries beneath it) that lucid touches.

A private name may change in any release without notice, so each one lucid overrides, calls,
reads or sets is listed here with where it is used and the versions it was checked on
(`CHECKED_ON`). ``tests/lucid-train/test_lightning_privates.py`` fails, naming the attribute,
when the installed versions lack one, and when a lucid class overrides or reads a private of its
Lightning base that is not listed. Where a use tolerates absence (``getattr`` with a default),
the entry says what is lost without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["CHECKED_ON", "PRIVATES", "Private"]

# The versions every entry was checked on (uv.lock; torch: both lanes).
CHECKED_ON: dict[str, tuple[str, ...]] = {
    "lightning": ("2.6.6",),
    "jsonargparse": ("4.53.0",),
    "torch": ("2.9.1", "2.11.0"),
}


@dataclass(frozen=True)
class Private:
    """One private attribute.

    Attributes:
        owner: the class that defines it, as ``module:Class``.
        name: the attribute.
        use: ``override`` (lucid redefines it), ``call``, ``read`` or ``set``.
        where: the lucid module that uses it.
        why: what lucid needs it for (and, for a tolerant read, what is lost without it).
        on_instance: set on instances by the owner's own code (``self.<name> = ...``), so it is
            looked for in the owner's source rather than on the class.
    """

    owner: str
    name: str
    use: Literal["override", "call", "read", "set"]
    where: str
    why: str
    on_instance: bool = False


_CLI = "lightning.pytorch.cli:LightningCLI"
PRIVATES: tuple[Private, ...] = (
    Private(
        _CLI,
        "_add_subcommands",
        "override",
        "lucid_train.cli.app",
        "adds predict and export, verbs that are methods of LucidCLI, not of the Trainer",
    ),
    Private(
        _CLI,
        "_subcommand_parsers",
        "set",
        "lucid_train.cli.app",
        "the verbs' parsers, which LightningCLI's `_parser` reads; set by the override above",
        on_instance=True,
    ),
    Private(
        _CLI,
        "_subcommand_method_arguments",
        "set",
        "lucid_train.cli.app",
        "the verbs' method arguments, which `_run_subcommand` passes on",
        on_instance=True,
    ),
    Private(
        _CLI,
        "_run_subcommand",
        "override",
        "lucid_train.cli.app",
        "runs predict and export itself, the Trainer verbs through LightningCLI's",
    ),
    Private(
        _CLI,
        "_parse_ckpt_path",
        "override",
        "lucid_train.cli.app",
        "turned off: a resumed fit reads its run's config.yaml, not the checkpoint's hparams",
    ),
    Private(
        _CLI,
        "_parser",
        "call",
        "lucid_train.cli.app",
        "the fit's parser, to write the run's config.yaml",
    ),
    Private(
        "argparse:_ActionsContainer",
        "_option_string_actions",
        "read",
        "lucid_train.cli.flags",
        "a flag's action, to tell whether it takes a bool (`--trainer.deterministic` alone)",
        on_instance=True,
    ),
    Private(
        "jsonargparse._typehints:ActionTypeHint",
        "_typehint",
        "read",
        "lucid_train.cli.flags",
        "the flag's type, for the same check; absent: the flag needs its value spelt out",
        on_instance=True,
    ),
    Private(
        "lightning.pytorch.loops.fit_loop:_FitLoop",
        "_should_accumulate",
        "call",
        "lucid_train.tasks.stepping",
        "whether Lightning's own accumulation steps after this batch (data-parallel verdict)",
    ),
    Private(
        "lightning.pytorch.trainer.trainer:Trainer",
        "_logger_connector",
        "read",
        "lucid_train.tasks.module",
        "whether Lightning writes this batch's logs; absent: every batch is logged (slower)",
        on_instance=True,
    ),
    Private(
        "lightning.pytorch.core.module:LightningModule",
        "_trainer",
        "read",
        "lucid_train.tasks.module",
        "the Trainer or None, without `trainer`'s error outside a fit (loss capacity)",
        on_instance=True,
    ),
    Private(
        "torch.optim.adam:Adam",
        "_step_supports_amp_scaling",
        "read",
        "lucid_train.tasks.stepping",
        "a fused optimizer skips a non-finite step on the device; absent: one host read a step",
        on_instance=True,
    ),
    Private(
        "torch.utils.data.dataloader:DataLoader",
        "_index_sampler",
        "override",
        "lucid_train.data.epoch_loader",
        "the persistent workers' sampler runs an epoch ahead",
    ),
)
