"""Weights to start a run from: lucid checkpoints, converted weights files and the authors'
released ``yolo26*.pt``, read without executing pickled code (`load_weights`); the one-time
conversion of an authors' file (`convert_weights`, ``python -m lucid_train.weights``)."""

from lucid_train.weights.loading import (
    LUCID_WEIGHTS_KEY,
    WeightsError,
    WeightsReport,
    convert_weights,
    load_weights,
    loadable_keys,
)

__all__ = [
    "LUCID_WEIGHTS_KEY",
    "WeightsError",
    "WeightsReport",
    "convert_weights",
    "load_weights",
    "loadable_keys",
]
