"""Our state-dict names and the authors' (Ultralytics 8.4 ``yolo26*.yaml`` builds), one to one.

Inside a block both builds use the same names (``cv1``, ``m.0``, ``bn``...), so the mapping is a
table of prefixes: each of our blocks and head branches is one of the authors' layers
``model.<i>`` or head attributes ``model.23.<name>``. Keys are a task module's state dict
(`lucid_train.tasks.module.YOLOModule`): the network under ``model.`` and, for pose, the RealNVP
flow under ``flow.`` (the authors keep it in the head, ``model.23.flow_model``; assumptions.md T57).
The authors' flow also holds its standard-normal prior (``loc``, ``cov``), which ours has as
constants: those two are the only keys without a counterpart (`AUTHORS_ONLY`).

``tests/lucid-train/facts/ultralytics_weights_layout.json`` holds the authors' key names and
shapes, and ``test_finetune_weights.py`` holds this table against them for every task.
"""

from __future__ import annotations

__all__ = ["AUTHORS_ONLY", "HEAD_LAYER", "PREFIXES", "authors_key", "lucid_key"]

HEAD_LAYER = "model.23"

# (ours, theirs): the first entry whose prefix matches, at a dot boundary, renames a key.
PREFIXES: tuple[tuple[str, str], ...] = (
    ("model.backbone.stem", "model.0"),
    ("model.backbone.down_p2", "model.1"),
    ("model.backbone.c3k2_p2", "model.2"),
    ("model.backbone.down_p3", "model.3"),
    ("model.backbone.c3k2_p3", "model.4"),
    ("model.backbone.down_p4", "model.5"),
    ("model.backbone.c3k2_p4", "model.6"),
    ("model.backbone.down_p5", "model.7"),
    ("model.backbone.c3k2_p5", "model.8"),
    ("model.backbone.sppf", "model.9"),
    ("model.backbone.c2psa", "model.10"),
    # 11, 12, 14, 15, 18 and 21 are upsampling and concatenation: no weights
    ("model.neck.top_down_p4", "model.13"),
    ("model.neck.top_down_p3", "model.16"),
    ("model.neck.down_p3", "model.17"),
    ("model.neck.bottom_up_p4", "model.19"),
    ("model.neck.down_p4", "model.20"),
    ("model.neck.bottom_up_p5", "model.22"),
    *(
        (f"model.head.{branch}.{ours}", f"{HEAD_LAYER}.{lead}{theirs}")
        for branch, lead in (("one2many", ""), ("one2one", "one2one_"))
        for ours, theirs in (
            ("box", "cv2"),
            ("cls", "cv3"),
            ("mask", "cv4"),  # segment: mask coefficients
            ("angle", "cv4"),  # obb
            ("keypoint_trunk", "cv4"),  # pose
            ("keypoints", "cv4_kpts"),
            ("keypoint_sigma", "cv4_sigma"),
        )
    ),
    ("model.head.prototypes.refine", f"{HEAD_LAYER}.proto.feat_refine"),
    ("model.head.prototypes.fuse", f"{HEAD_LAYER}.proto.feat_fuse"),
    ("model.head.prototypes.conv1", f"{HEAD_LAYER}.proto.cv1"),
    ("model.head.prototypes.upsample", f"{HEAD_LAYER}.proto.upsample"),
    ("model.head.prototypes.conv2", f"{HEAD_LAYER}.proto.cv2"),
    ("model.head.prototypes.out", f"{HEAD_LAYER}.proto.cv3"),
    ("model.head.semantic.layers", f"{HEAD_LAYER}.proto.semseg"),
    ("flow.scale_nets", f"{HEAD_LAYER}.flow_model.s"),
    ("flow.shift_nets", f"{HEAD_LAYER}.flow_model.t"),
    ("flow.keep", f"{HEAD_LAYER}.flow_model.mask"),
)
AUTHORS_ONLY = (f"{HEAD_LAYER}.flow_model.loc", f"{HEAD_LAYER}.flow_model.cov")


def _rename(key: str, table: tuple[tuple[str, str], ...]) -> str | None:
    for src, dst in table:
        if key == src or key.startswith(src + "."):
            return dst + key[len(src) :]
    return None


_REVERSED = tuple((theirs, ours) for ours, theirs in PREFIXES)


def authors_key(key: str) -> str | None:
    """The authors' name of our module-level ``key`` (None: a key they have no name for)."""
    return _rename(key, PREFIXES)


def lucid_key(key: str, ours: set[str] | frozenset[str]) -> str | None:
    """Our name of the authors' ``key`` among the keys ``ours`` of the module being filled.

    Several of our branches share the authors' ``cv4`` (mask, angle, keypoint trunk: one per
    task), so the candidates are tried in the table's order and the first that the module has
    wins. None: the module has no such key.
    """
    for theirs, mine in _REVERSED:
        if key == theirs or key.startswith(theirs + "."):
            candidate = mine + key[len(theirs) :]
            if candidate in ours:
                return candidate
    return None
