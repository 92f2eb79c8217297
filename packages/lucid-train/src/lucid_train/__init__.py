"""lucid_train: the YOLO26 trainer (data, assignment, losses, optimisation, evaluation, the
LightningModules and the ``lucid`` command).

The package is a house of floors, read from the bottom: a unit imports its own floor and those
below it, never one above (``tests/workspace/test_module_graph.py`` holds the order).

* ``errors`` - `LucidError`, the one-line errors a user can act on.
* ``arg_types`` - argument types with their ranges (``ImageSide``, ``PositiveInt`` ...).
* ``atomic_files`` - files written whole or not at all.
* ``distributed`` - data-parallel training: Lightning's DDP without its wrapper.
* ``data`` - the `Targets` record, the readers of each format (``data.formats``), augmentation
  (``data.augment``), the DataModule, the built-in sets (``data.builtin_sets``).
* ``model_spec`` - model names (``yolo26<scale>[-seg|-pose|-obb]``) to scale and task.
* ``evaluation`` - COCO metrics and the DOTA rotated protocol.
* ``assign`` - which anchors learn from which ground truth (TAL and its task variants).
* ``losses`` - padded targets, each task's loss, the dual (ProgLoss) loss.
* ``optim`` - MuSGD, the authors' parameter groups, warm-up and schedule, EMA.
* ``weights`` - files to start from, read without running pickled code.
* ``report`` - what a run shows of itself: metrics.csv, curves, figures.
* ``tasks`` - the LightningModules: `YOLOModule` and one subclass per task.
* ``run`` - a fit on disk: the run folder, the Trainer, checkpoints and resume points.
* ``overfit`` - the micro overfit runs behind the training goldens.
* ``cli`` - the ``lucid`` command (fit / validate / test / predict / export).
"""

__version__ = "0.1.0"
