"""Golden test vectors for H-Scale NVFP4 (docs/vectors.md).

Level 0 (``vectors/level0/``, committed) is the named case catalogue of
:mod:`hscale.vectors.catalogue`; levels 1 and 2 (:mod:`hscale.vectors.sweeps`) are generated on
demand. Every file is a pure function of the stored inputs and the reference, so
``hscale vectors verify DIR`` can recompute and compare it byte for byte.
"""

from .catalogue import CLAUSE_IDS, DEFAULT_SEED, level0_cases, spec_clause_ids
from .check import check, load_vectors, observed_lines
from .generate import generate_files, write_files
from .model import Case, Outputs, run_case
from .verify import verify_dir

__all__ = ["CLAUSE_IDS", "Case", "DEFAULT_SEED", "Outputs", "check", "generate_files",
           "level0_cases", "load_vectors", "observed_lines", "run_case", "spec_clause_ids",
           "verify_dir", "write_files"]
