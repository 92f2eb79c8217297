"""The network recorder: a module's forward and backward replayed as CUDA graphs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

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

    def __init__(self, module: nn.Module, *, name: str = "network", **options: Any) -> None:
        if module._forward_hooks or module._forward_pre_hooks or module._backward_hooks:
            raise ValueError(
                f"lucid-capture [{name}]: {type(module).__name__} has hooks on its top-level "
                "forward; a replay would skip them. Move them to a submodule or a wrapper."
            )
        super().__init__(module, name=name, **options)
        self.module = module

    def parameters(self) -> Sequence[torch.Tensor]:
        return tuple(self.module.parameters())

    def buffers(self) -> Sequence[torch.Tensor]:
        return tuple(self.module.buffers())

    def is_training(self) -> bool:
        return self.module.training
