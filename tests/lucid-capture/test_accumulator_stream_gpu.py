"""A recording leaves no AccumulateGrad node on a stream its gradients do not come from.

Capture makes the parameters' AccumulateGrad nodes on the recorder's stream and the retained
forward graph keeps them for the fit; a gradient produced on another stream makes autograd warn
"The AccumulateGrad node's stream does not match..." and sync per parameter (docs/capture.md,
"Streams"). torch warns once per process, so each case runs in a fresh interpreter; the
``old-path`` case runs the recorder on the caller's stream (what it did before) and must see the
warning, so the check cannot pass by not looking.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

pytestmark = pytest.mark.gpu

WARNING = "AccumulateGrad node's stream does not match"

SCRIPT = textwrap.dedent(
    """
    import sys, warnings
    import torch
    from lucid_capture import NetworkRecorder
    from lucid_capture.recorder import Recorder
    from lucid_testing.capture_models import MODELS, batches, loss_of

    if sys.argv[1] == "old-path":
        Recorder._accumulator_stream = lambda self: None
    torch.manual_seed(0)
    model = MODELS["convbn"]().cuda()
    recorder = NetworkRecorder(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    # the last batch is partial: one eager call after the recording, on the same parameters
    inputs = batches("convbn", [8, 8, 8, 8, 5])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        for x in inputs:
            loss_of(recorder(x.cuda())).backward()
            optimizer.step()
            optimizer.zero_grad()
        torch.cuda.synchronize()
    stats = recorder.stats
    assert stats.recordings == 1 and stats.replays == 4, recorder.summary()
    print("WARNED" if any(sys.argv[2] in str(w.message) for w in seen) else "CLEAN")
    """
)


def _run(case: str) -> str:
    # the child finds lucid_testing where this process does (pytest's pythonpath setting)
    env = dict(os.environ, PYTHONWARNINGS="always", PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, case, WARNING],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    verdict = done.stdout.strip().splitlines()[-1]
    # a warning torch printed without routing it through Python's warnings counts too
    return "WARNED" if WARNING in done.stderr else verdict


def test_replays_and_eager_fallbacks_after_a_recording_raise_no_accumulate_grad_warning() -> None:
    if not hasattr(torch.autograd.graph, "set_warn_on_accumulate_grad_stream_mismatch"):
        pytest.skip(f"torch {torch.__version__} has no AccumulateGrad stream-mismatch warning")
    assert _run("old-path") == "WARNED", "the control must see the warning, or nothing is tested"
    assert _run("fixed") == "CLEAN"
