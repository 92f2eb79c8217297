"""``python -m lucid_train.weights SRC.pt DST.pt``: convert an authors' checkpoint once.

The result is read with ``torch.load(weights_only=True)`` and names our modules; pass it (or the
original) to ``lucid fit --model.weights``.
"""

# An entry point: it reaches up to `lucid_train.tasks.restore`, which builds the module the
# conversion checks the tensors against (nothing imports a ``__main__``).

from __future__ import annotations

import argparse

from lucid_train.cli.command_errors import report as report_error
from lucid_train.tasks.restore import convert_weights


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lucid_train.weights", description=__doc__)
    parser.add_argument("src", help="an Ultralytics yolo26*.pt")
    parser.add_argument("dst", help="the lucid weights file to write")
    args = parser.parse_args(argv)
    try:
        report = convert_weights(args.src, args.dst)
    except Exception as err:  # one line naming the file and the fix, as the `lucid` command's
        code = report_error("weights", err)
        if code is None:
            raise  # a bug: its traceback is the report
        return code
    print(report.summary())
    print(f"lucid weights: wrote {args.dst}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
