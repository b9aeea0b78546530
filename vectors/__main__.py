"""``python -m hscale.vectors COMMAND ...``: the ``hscale vectors`` command on its own."""

import sys

from .cli import main

sys.exit(main())
