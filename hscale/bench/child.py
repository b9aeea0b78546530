"""``python -m hscale.bench.child BACKEND METHOD ROWS COLS SEED INIT``: one call's peak memory in
a fresh process (``hscale.bench.child_rss_peak`` starts it); prints "<bytes> <how>"."""

import sys

from hscale.bench import _child_memory

if __name__ == "__main__":
    _child_memory(*sys.argv[1:7])
