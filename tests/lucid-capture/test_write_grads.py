"""``replay.write_grads`` writes what autograd's accumulators would, and leaves them what it must.

The GPU suite holds the whole path against eager training (``test_network_parity_gpu.py``,
``grads_in_place``); these cases pin the rule per parameter on the CPU, against AccumulateGrad
itself: a fresh ``.grad`` in the parameter's layout, an existing one added to in place with the
same bits, and every parameter autograd must see (hooked, non-leaf, a sparse `.grad`) handed back.
"""

from __future__ import annotations

import torch

from lucid_capture.replay import write_grads
from lucid_testing.capture_models import bitwise_equal


def _param(*shape: int, channels_last: bool = False) -> torch.nn.Parameter:
    data = torch.randn(*shape)
    if channels_last:
        data = data.to(memory_format=torch.channels_last)
    return torch.nn.Parameter(data)


def _accumulated(p: torch.nn.Parameter, grad: torch.Tensor) -> torch.Tensor:
    """What autograd's AccumulateGrad makes of ``grad`` arriving at a copy of ``p``."""
    twin = torch.nn.Parameter(p.detach().clone(memory_format=torch.preserve_format))
    if p.grad is not None:
        twin.grad = p.grad.clone(memory_format=torch.preserve_format)
    torch.autograd.backward([twin * 1.0], [grad])
    assert twin.grad is not None
    return twin.grad


def test_a_missing_grad_is_a_copy_in_the_parameters_layout_and_an_existing_one_is_added_to() -> (
    None
):
    torch.manual_seed(0)
    fresh = _param(4, 3, 5, 5, channels_last=True)
    kept = _param(7, 3)
    kept.grad = torch.randn(7, 3)
    held = kept.grad
    statics = [torch.randn(4, 3, 5, 5), torch.randn(7, 3)]  # the recording's buffers
    want = [_accumulated(fresh, statics[0]), _accumulated(kept, statics[1])]

    rest_slots, rest = write_grads((fresh, kept), 1, [1, 2], statics)

    assert rest_slots == [] and rest == []
    assert fresh.grad is not None and fresh.grad.data_ptr() != statics[0].data_ptr()  # rule 1
    assert fresh.grad.stride() == fresh.stride() == want[0].stride()
    assert bitwise_equal(fresh.grad, want[0])
    assert kept.grad is held  # in place, as AccumulateGrad with grad mode off
    assert bitwise_equal(kept.grad, want[1])


def test_arguments_hooked_non_leaf_and_sparse_grads_are_left_to_autograd() -> None:
    torch.manual_seed(0)
    hooked = _param(3)
    hooked.register_hook(lambda g: None)
    after = _param(3)
    after.register_post_accumulate_grad_hook(lambda p: None)
    leaf = _param(3)
    non_leaf = leaf * 2.0
    sparse = _param(3)
    sparse.grad = torch.zeros(3).to_sparse()
    plain = _param(3)
    params = (hooked, after, non_leaf, sparse, plain)
    statics = [torch.randn(3) for _ in range(6)]
    slots = [0, 1, 2, 3, 4, 5]  # slot 0 is a tensor argument, parameters start at 1

    rest_slots, rest = write_grads(params, 1, slots, statics)

    assert rest_slots == [0, 1, 2, 3, 4]
    assert [t.data_ptr() for t in rest] == [s.data_ptr() for s in statics[:5]]
    assert hooked.grad is None and after.grad is None
    assert sparse.grad is not None and sparse.grad.is_sparse
    assert plain.grad is not None and bitwise_equal(plain.grad, statics[5])
