"""What a recording watches of random state beyond the generators it snapshots.

- :class:`GeneratorWatch` sees every ``generator=`` a torch call names during the first warm-up
  forward, so a generator the recorder was not given can be put back and the recording refused.
- :func:`device_seeded_nodes` finds the autograd nodes whose backward, run outside a capture,
  reads a dropout seed that the captured forward kept on the device.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from lucid_capture.failures import internal


class GeneratorWatch(TorchFunctionMode):
    """Notes each generator a call names (``generator=``, keyword-only in torch's random ops)
    that is not in ``known``, with its state before that first draw; ``restore`` puts them back."""

    def __init__(self, known: Sequence[torch.Generator]) -> None:
        super().__init__()
        self.known = {id(g) for g in known}
        self.first: dict[int, tuple[torch.Generator, torch.Tensor]] = {}
        self.where = ""  # the model's line of the first such draw

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        g = kwargs.get("generator")
        if isinstance(g, torch.Generator) and id(g) not in self.known and id(g) not in self.first:
            self.first[id(g)] = (g, g.get_state())
            if not self.where:
                outside = [f for f in traceback.extract_stack() if not internal(f.filename)]
                if outside:
                    frame = outside[-1]
                    self.where = f"{frame.filename}:{frame.lineno} in {frame.name}"
        return func(*args, **kwargs)

    def restore(self) -> None:
        for generator, state in self.first.values():
            generator.set_state(state)


# Autograd nodes whose backward, outside a capture, reads the dropout seed and offset its captured
# forward saved on the device as host scalars (aten/src/ATen/native/transformers/cuda/
# attention_backward.cu, `_efficient_attention_backward`: `*philox_seed.data_ptr<int64_t>()`).
_HOST_READ_SEED = ("EfficientAttentionBackward",)


def device_seeded_nodes(outputs: Sequence[torch.Tensor]) -> list[str]:
    """The names of the nodes in ``outputs``' autograd graph that run PyTorch's
    memory-efficient attention with dropout (a node that does not say its dropout counts)."""
    found: list[str] = []
    seen: set[Any] = set()
    todo = [o.grad_fn for o in outputs if o.grad_fn is not None]
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        name = type(node).__name__
        dropout = float(getattr(node, "_saved_dropout_p", 1.0))
        if dropout > 0 and any(key in name for key in _HOST_READ_SEED):
            found.append(name)
        todo.extend(nxt for nxt, _ in node.next_functions if nxt is not None)
    return sorted(set(found))
