"""Progress over a report's layers, on standard error."""

from __future__ import annotations

import sys


def bar(items, progress, desc):
    if not progress:
        return items
    from tqdm import tqdm
    return tqdm(items, desc=desc, unit="layer", file=sys.stderr)
