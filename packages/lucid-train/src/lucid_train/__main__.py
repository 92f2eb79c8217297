"""``python -m lucid_train``: the ``lucid`` command."""

from lucid_train.cli import main

raise SystemExit(main())
