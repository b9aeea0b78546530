"""``python -m hscale.cli ...``: the hscale command without its entry point."""

import sys

from hscale.cli import main

sys.exit(main())
