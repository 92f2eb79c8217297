"""The trainer parity suite's cases: task x precision x the Trainer's accumulation.

The GPU session runs a pairwise covering of that product (18 of its 30 fits): detect at every
pair of precision and accumulation, and every other task at each precision and at each of its
accumulations once, so every pair of the three factors meets in some fit. The whole product
runs with ``LUCID_PARITY_MATRIX=full`` (each fit costs about 20 s alone on the H200 and several
times that beside the session's other workers).
"""

from __future__ import annotations

import itertools
import os

PRECISIONS = ("32-true", "16-mixed", "bf16-mixed")
ACCUMULATIONS = {"detect": (1, 2, 3), "pose": (1, 2, 3), "obb": (1, 2), "segment": (1, 2)}

Case = tuple[str, str, int]

FULL: list[Case] = [
    (task, p, a) for task, accs in ACCUMULATIONS.items() for p in PRECISIONS for a in accs
]
COVERING: list[Case] = [
    *[("detect", p, a) for p in PRECISIONS for a in ACCUMULATIONS["detect"]],
    ("pose", "32-true", 3), ("pose", "16-mixed", 1), ("pose", "bf16-mixed", 2),
    ("obb", "32-true", 2), ("obb", "16-mixed", 1), ("obb", "bf16-mixed", 2),
    ("segment", "32-true", 1), ("segment", "16-mixed", 2), ("segment", "bf16-mixed", 1),
]  # fmt: skip


def uncovered_pairs(cases: list[Case]) -> set[tuple[object, object]]:
    """The pairs of factor values (task-precision, task-accumulation, precision-accumulation)
    that the full product holds and ``cases`` never puts in one fit."""

    def pairs(of: list[Case]) -> set[tuple[object, object]]:
        return {pair for case in of for pair in itertools.combinations(case, 2)}

    return pairs(FULL) - pairs(cases)


def session_matrix() -> list[Case]:
    """The cases this session runs (``LUCID_PARITY_MATRIX=full``: the whole product)."""
    return FULL if os.environ.get("LUCID_PARITY_MATRIX") == "full" else COVERING
