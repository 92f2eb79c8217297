"""The state-dict key list of yolo26n detect is pinned: checkpoints stay loadable.

Regenerate the golden (only in a commit that says why)::

    python tests/lucid-models/test_state_dict_keys.py --write
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

GOLDEN = Path(__file__).resolve().parents[2] / "goldens" / "models" / "yolo26n-detect-keys.json"
COMMAND = "python tests/lucid-models/test_state_dict_keys.py --write"


def _keys() -> list[str]:
    import torch

    from lucid_models import build_model

    with torch.device("meta"):
        return list(build_model("yolo26n").state_dict())


def test_yolo26n_detect_state_dict_keys_match_the_golden() -> None:
    """Same keys, same order: a renamed or reordered module fails here first."""
    golden = json.loads(GOLDEN.read_text())
    assert golden["command"] == COMMAND
    assert _keys() == golden["keys"]


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    keys = _keys()
    GOLDEN.write_text(
        json.dumps({"command": COMMAND, "count": len(keys), "keys": keys}, indent=1) + "\n"
    )
