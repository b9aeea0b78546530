"""Where things are in the checkout the tests run from."""

from __future__ import annotations

from pathlib import Path

#: The repository checkout.
REPO_ROOT = Path(__file__).resolve().parents[2]
#: tests/.
TESTS = REPO_ROOT / "tests"
#: tests/helpers/: the modules a subprocess run of the suite imports as backends
#: (``vendor_kernels:exact_rtn``), put on its PYTHONPATH.
HELPERS = TESTS / "helpers"
DOCS = REPO_ROOT / "docs"
TOOLS = REPO_ROOT / "tools"
#: The rooms of tests/, one per room of the kit (docs/architecture.md, "The tests").
TEST_ROOMS = frozenset({"reference", "backends", "judge", "vectors", "checkpoints", "quantize",
                        "calibration", "evaluation", "cli", "interop", "tools"})
