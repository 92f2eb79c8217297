"""The network recorder: a module's forward and backward replayed as CUDA graphs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.nn.modules import module as _module

from lucid_capture.reasons import Reason
from lucid_capture.recorder import Recorder


class NetworkRecorder(Recorder):
    """Replay ``module``'s forward and backward as CUDA graphs, training bit for bit like eager.

    Call it where you would call the module: ``outputs = recorder(images)``. The module stays the
    owner of its parameters, buffers and ``state_dict``; the recorder is not a submodule and adds
    no keys. Outputs may be a tensor or any nesting of tuples, lists, dicts and dataclasses.

    A call replays when it matches the recording (shapes, dtypes, strides, device,
    ``requires_grad``, autocast state, the module's parameter tensors) and no earlier replay awaits
    its backward; otherwise it runs the module eagerly and counts why (see ``stats``). The module
    in eval mode, or grad mode off, always runs eager (validation and prediction).

    Python hooks on a submodule (or global module hooks) run while recording and never on replay,
    so a module with any runs eager (reason ``hooks``) unless ``allow_hooks=True`` says that they
    only do tensor work the graph can hold. Hooks added after the recording are not seen.

    A replayed call returns the recording's output buffers, which the next call writes over:
    ``.clone()`` an output kept past it. The forward's Python decisions (``if self.flag:``) are
    those of the recording. An input it writes in place is copied back after each replay, as
    eager leaves it (one that requires grad, written under ``no_grad``, runs eager).

    Example::

        net = Net().cuda()
        graphed = NetworkRecorder(net)
        for x, y in loader:
            loss = criterion(graphed(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        print(graphed.summary())
    """

    def __init__(
        self,
        module: nn.Module,
        *,
        name: str = "network",
        allow_hooks: bool = False,
        **options: Any,
    ) -> None:
        if not isinstance(module, nn.Module):
            kind = (
                "a class: pass an instance" if isinstance(module, type) else type(module).__name__
            )
            raise TypeError(
                f"lucid-capture [{name}]: NetworkRecorder wraps an nn.Module, got {kind}; record "
                "another callable with Recorder(fn, params=..., buffers=...)"
            )
        if module._forward_hooks or module._forward_pre_hooks or module._backward_hooks:
            raise ValueError(
                f"lucid-capture [{name}]: {type(module).__name__} has hooks on its top-level "
                "forward; a replay would skip them. Move them to a submodule or a wrapper."
            )
        super().__init__(module, name=name, **options)
        self.module = module
        self.allow_hooks = allow_hooks

    def parameters(self) -> Sequence[torch.Tensor]:
        return tuple(self.module.parameters())

    def buffers(self) -> Sequence[torch.Tensor]:
        return tuple(self.module.buffers())

    def is_training(self) -> bool:
        return self.module.training

    def _early_mismatch(self, args: Sequence[Any]) -> Reason | None:
        if self._recording is None and not self.allow_hooks and hooked(self.module):
            return Reason.HOOKS
        return None


_GLOBAL_HOOKS = (
    "_global_forward_hooks",
    "_global_forward_pre_hooks",
    "_global_backward_hooks",
    "_global_backward_pre_hooks",
)
_MODULE_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


def hooked(module: nn.Module) -> bool:
    """Whether a forward or backward hook would run inside ``module``'s call."""
    if any(getattr(_module, name, None) for name in _GLOBAL_HOOKS):
        return True
    return any(getattr(m, name, None) for m in module.modules() for name in _MODULE_HOOKS)
