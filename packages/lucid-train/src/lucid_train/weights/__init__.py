"""Files to start from, read without executing pickled code: a run's checkpoint
(`checkpoint_file`), lucid weights files and the authors' released ``yolo26*.pt``
(`load_weights`). ``python -m lucid_train.weights SRC DST`` converts an authors' file once
(`lucid_train.tasks.restore.convert_weights`: it builds a module, so it lives above this)."""

from lucid_train.weights.loading import (
    LUCID_WEIGHTS_KEY,
    WeightsError,
    WeightsReport,
    load_weights,
    loadable_keys,
    read_authors_file,
)

__all__ = [
    "LUCID_WEIGHTS_KEY",
    "WeightsError",
    "WeightsReport",
    "load_weights",
    "loadable_keys",
    "read_authors_file",
]
