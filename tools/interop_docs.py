"""Regenerate docs/interop.md (and extend docs/interop-results.json) with ``hscale interop``:
every option of ``hscale interop`` is passed on; the results file and the markdown are the
project's own.

    python tools/interop_docs.py [--adapters NAMES] [--quick] [--render] [--counts-only] [--gemm]
"""

from __future__ import annotations

import sys
from pathlib import Path

from hscale.cli.interop import main as interop

DOCS = Path(__file__).resolve().parent.parent / "docs"

if __name__ == "__main__":
    sys.exit(interop(sys.argv[1:] + ["--results", str(DOCS / "interop-results.json"),
                                     "--docs", str(DOCS / "interop.md")]))
