"""The methods (HSCALE-METHOD-1), one table: what each does with the window and what it reads.

``rtn`` keeps the initial byte (no search); ``scale-only`` searches the window with h = 1;
``hscale`` searches it with h = diag(X^T X) (NVFP4-IN-2); ``hscale-block`` searches it scored by
the diagonal 16 x 16 blocks of X^T X (HSCALE-BLOCK-1, NVFP4-IN-6). Every fact the rest of the kit
asks of a method (does it read calibration statistics, which, does it keep the initial bytes,
does the whole-model path need the full H for it) is an attribute here, never its name spelled
out again.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Method:
    name: str
    #: What the search is scored with from calibration: None (rtn: no search; scale-only:
    #: h = 1), "h" (the diagonal of X^T X) or "blocks" (its diagonal 16 x 16 blocks).
    statistic: str | None
    #: Whether it searches the window (HSCALE-WIN-1) or keeps the initial byte.
    searches: bool

    @property
    def reads_statistics(self) -> bool:
        """It needs calibration's statistics (h or the blocks): HSCALE-METHOD-1."""
        return self.statistic is not None

    @property
    def reads_h(self) -> bool:
        return self.statistic == "h"

    @property
    def reads_blocks(self) -> bool:
        """It reads the diagonal 16 x 16 blocks of X^T X, which a calibration without the full
        H (the whole-model path, a Hessian file) takes from the full H."""
        return self.statistic == "blocks"

    @property
    def keeps_initial_bytes(self) -> bool:
        """Its chosen bytes are the initial bytes (NVFP4-INIT-1/-2): rtn."""
        return not self.searches


METHODS = {m.name: m for m in (
    Method("rtn", None, searches=False),
    Method("scale-only", None, searches=True),
    Method("hscale", "h", searches=True),
    Method("hscale-block", "blocks", searches=True),
)}
#: The methods' names, in the table's order.
METHOD_NAMES = tuple(METHODS)

