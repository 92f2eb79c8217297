"""The LightningModules and what they hold: `YOLOModule` (`module`) and one subclass per task
(`task_modules`), the loss-capacity policy (`capacity`), the optimizer, accumulation and
non-finite gate of each step (`stepping`), the optimizer recipe (`recipe`), validation scoring
(`validation`), the non-finite-loss guard (`nonfinite`), the training terms' log (`loss_log`),
the Lightning internals lucid relies on (`lightning_privates`), and modules rebuilt from files
(`restore`)."""
