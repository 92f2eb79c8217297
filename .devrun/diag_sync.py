"""Run the 16-mixed capture-on host-sync case with sync debug 'error' to get a traceback."""
import sys, traceback, warnings
sys.path.insert(0, "tests/lucid-train"); sys.path.insert(0, "tests/support")
import torch
import test_host_syncs_gpu as t

orig_open = t._SyncWindow._open
def _open(self):
    if self._catcher is None:
        self._catcher = warnings.catch_warnings(record=True)
        self.seen = self._catcher.__enter__()
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("error")
t._SyncWindow._open = _open
import pytest
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "--tb=long", "-m", "gpu",
    "tests/lucid-train/test_host_syncs_gpu.py", "-k", "mixed and on"]))
