"""``python -m lucid_train.data.builtin_sets --task T [--hard] [--yolo OUT]``: write a built-in
synthetic set (`synthetic.main`). The package is the entry point because ``lucid_train.data``
imports `synthetic` itself, and ``-m`` on a module already imported runs a second copy."""

from lucid_train.data.builtin_sets.synthetic import main

main()
