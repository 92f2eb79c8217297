"""Model names as the command takes them: ``yolo26<scale>[-seg|-pose|-obb]``.

The suffix names the task (none: detect), the stem names the scale, as the authors spell their
model files.
"""

from __future__ import annotations

from dataclasses import dataclass

from lucid_models.scales import parse_model_name
from lucid_train.data.records import Task

__all__ = ["SUFFIXES", "ModelSpec", "a_task", "model_name", "parse_model"]

SUFFIXES: dict[Task, str] = {"detect": "", "segment": "-seg", "pose": "-pose", "obb": "-obb"}


@dataclass(frozen=True)
class ModelSpec:
    """A parsed model name.

    Attributes:
        name: the full name, e.g. ``yolo26s-seg``.
        scale: the network name `lucid_models.build_model` takes, e.g. ``yolo26s``.
        task: the task its suffix names.
    """

    name: str
    scale: str
    task: Task


def parse_model(name: str) -> ModelSpec:
    """``yolo26s-seg`` -> ``ModelSpec("yolo26s-seg", "yolo26s", "segment")``.

    Raises:
        ValueError: an unknown suffix or scale (the message lists the accepted forms).
    """
    task: Task = "detect"
    scale = name
    for candidate, suffix in SUFFIXES.items():
        if suffix and name.endswith(suffix):
            task, scale = candidate, name[: -len(suffix)]
    try:
        parse_model_name(scale)
    except ValueError as err:
        forms = ", ".join(f"yolo26n{s}" for s in SUFFIXES.values())
        raise ValueError(f"model {name!r}: expected e.g. {forms} (scales n s m l x)") from err
    return ModelSpec(name, scale, task)


def model_name(scale: str, task: Task) -> str:
    """The inverse of `parse_model`: ``("yolo26s", "segment")`` -> ``yolo26s-seg``."""
    return scale + SUFFIXES[task]


def a_task(task: str) -> str:
    """``task`` with its article, for messages: "a detect", "an obb"."""
    return f"{'an' if task[:1] in 'aeiou' else 'a'} {task}"
