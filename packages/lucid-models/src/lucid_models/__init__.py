"""lucid_models."""

__version__ = "0.1.0"
