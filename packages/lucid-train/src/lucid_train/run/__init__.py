"""A fit on disk and the Trainer that writes it: the run folder, loggers and Trainer
(`trainer`), the resume point ``last.ckpt`` (`last_checkpoint`), and checkpoint files written
atomically off the training thread (`checkpoint_io`) by a writer process
(`checkpoint_process`), and the environment a command is refused under (`environment`)."""
