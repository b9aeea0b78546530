"""Golden test vectors for H-Scale NVFP4 (docs/vectors.md).

Level 0 (``vectors/level0/``, committed) is the named case catalogue of
:mod:`hscale.vectors.catalogue`; levels 1 and 2 (:mod:`hscale.vectors.sweeps`) are generated on
demand. Every file is a pure function of the stored inputs and the reference, so
``hscale vectors verify DIR`` can recompute and compare it byte for byte. A case is the
project's one case model, :class:`hscale.judge.cases.Case`.
"""

from .catalogue import DEFAULT_SEED, LEVEL0_DIR, level0_cases
from .check import check, observed_lines
from .generate import generate_files, write_files
from .stored import load_vectors
from .verify import verify_dir

__all__ = ["DEFAULT_SEED", "LEVEL0_DIR", "check", "generate_files", "level0_cases", "load_vectors",
           "observed_lines", "verify_dir", "write_files"]
