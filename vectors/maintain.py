"""Maintainer commands of the golden vectors (not part of the user-facing ``hscale vectors``):

    python -m hscale.vectors.maintain docs           rewrite the generated blocks of docs/vectors.md
    python -m hscale.vectors.maintain freeze-minilm  recalibrate MiniLM, rewrite data/minilm_slices.json
    python -m hscale.vectors.maintain freeze-ties    rerun the exact-tie search, rewrite data/tie_table.json

Freezing changes level-0 inputs: regenerate the vectors afterwards
(``hscale vectors generate --out vectors/level0``) and commit both.
"""

from __future__ import annotations

import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hscale.vectors.maintain",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("docs", "freeze-minilm", "freeze-ties"))
    args = parser.parse_args(argv)
    if args.command == "docs":
        from .docs import update_doc
        print(update_doc())
    elif args.command == "freeze-minilm":
        from .minilm import freeze_minilm_slices
        print(freeze_minilm_slices(progress=True))
    else:
        from .ties import search_tie_table, write_tie_table
        print(write_tie_table(search_tie_table(progress=print)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
