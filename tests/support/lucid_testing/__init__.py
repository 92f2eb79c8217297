"""Shared test helpers (on pytest's pythonpath; never imported by the packages)."""
