"""Byte-order and nibble-order slips in an observed file's packed words (NVFP4-PACK-1).

A bench that dumps the 64-bit packed word little-endian, or writes the codes in element order,
or swaps one byte's two codes, produces words that are a rearrangement of the right ones. Read
as codes, every moved nibble looks like a wrong rounding or sign; ``hscale vectors check``
names the rearrangement instead, puts the bytes back in order, and judges what remains.

A slip of the whole word is a property of the writer, so it is decided for the observed file:
a rearrangement ``T`` is the file's byte order when it explains at least two groups (the
observed word is ``T`` of the right word) and more groups than it contradicts (groups whose
word is right as written although ``T`` would change it). It is then undone on every group of
the file. What is left is looked at group by group: the same rearrangements, one byte's two
nibbles swapped, two bytes exchanged.

"The right word" is the expected word, or, where the observed scale byte differs, the codes of
the exact rounding at the observed byte, so that a slip is seen through a wrong byte too (the
byte is then judged on its own).
"""

from __future__ import annotations

from dataclasses import dataclass

DOC = "byte 0 is the leftmost (most significant) byte of the hex word, docs/vectors.md"


def _swap_nibbles(word: bytes) -> bytes:
    return bytes(((b & 0x0F) << 4) | (b >> 4) for b in word)


def _permute(order):
    return lambda word: bytes(word[k] for k in order)


@dataclass(frozen=True)
class Slip:
    """A rearrangement of a group's 8 packed bytes (each is its own inverse)."""

    name: str
    words: str  # what it says of a file's packed words
    word: str   # what it says of one group's packed word
    apply: object

    def __call__(self, word: bytes) -> bytes:
        return self.apply(word)


_REVERSED = _permute(range(7, -1, -1))
#: Rearrangements of the whole word, most likely first.
WHOLE_WORD = (
    Slip("byte-reversed",
         f"the packed words are byte-reversed: written little-endian? {DOC}",
         f"the packed word is byte-reversed: written little-endian? {DOC}", _REVERSED),
    Slip("nibble-swapped",
         "the two codes of every byte are swapped in the packed words: element 2k belongs in "
         "the low nibble of byte k and element 2k+1 in the high nibble",
         "the two codes of every byte are swapped: element 2k belongs in the low nibble of "
         "byte k and element 2k+1 in the high nibble", _swap_nibbles),
    Slip("byte-reversed-nibble-swapped",
         f"the packed words are byte-reversed and the two codes of every byte swapped: {DOC}, "
         "element 2k is the low nibble of byte k",
         f"the packed word is byte-reversed and the two codes of every byte swapped: {DOC}, "
         "element 2k is the low nibble of byte k", lambda w: _swap_nibbles(_REVERSED(w))),
    Slip("words32-little-endian",
         f"each 32-bit half of the packed words is byte-reversed: written as two little-endian "
         f"32-bit words? {DOC}",
         f"each 32-bit half of the packed word is byte-reversed: written as two little-endian "
         f"32-bit words? {DOC}", _permute((3, 2, 1, 0, 7, 6, 5, 4))),
    Slip("words32-exchanged",
         f"the two 32-bit halves of the packed words are exchanged: bytes 4..7 written first? "
         f"{DOC}",
         f"the two 32-bit halves of the packed word are exchanged: bytes 4..7 written first? "
         f"{DOC}", _permute((4, 5, 6, 7, 0, 1, 2, 3))),
    Slip("words16-little-endian",
         f"the two bytes of every 16-bit pair of the packed words are exchanged: written as "
         f"little-endian 16-bit words? {DOC}",
         f"the two bytes of every 16-bit pair of the packed word are exchanged: written as "
         f"little-endian 16-bit words? {DOC}", _permute((1, 0, 3, 2, 5, 4, 7, 6))),
)


def local_slip(observed: bytes, right: bytes) -> tuple[str, bytes] | None:
    """``(what it says, the word put back in order)`` when ``observed`` is ``right`` with one
    byte's two nibbles swapped or two bytes exchanged, else None."""
    differ = [k for k in range(8) if observed[k] != right[k]]
    if len(differ) == 1:
        k = differ[0]
        if _swap_nibbles(observed[k:k + 1]) == right[k:k + 1]:
            return (f"the two codes of byte {k} are swapped (elements {2 * k} and {2 * k + 1}): "
                    f"element {2 * k} belongs in the low nibble of byte {k}"), right
    if len(differ) == 2:
        k, m = differ
        if observed[k] == right[m] and observed[m] == right[k]:
            return (f"bytes {k} and {m} of the packed word are exchanged ({DOC})"), right
    return None


@dataclass
class GroupWord:
    """One observed group's packed word and the words it may rightly be."""

    observed: bytes
    rights: tuple[bytes, ...]  # the expected word, and the rounding at the observed byte

    @property
    def wrong(self) -> bool:
        return self.observed not in self.rights


def file_slip(groups: list[GroupWord]) -> tuple[Slip, int] | None:
    """The rearrangement the observed file's writer applied to every word, and how many groups
    it explains; None when no rearrangement explains at least two groups and more than it
    contradicts."""
    best = None
    for slip in WHOLE_WORD:
        explained = contradicted = 0
        for group in groups:
            if group.wrong:
                explained += any(group.observed == slip(right) for right in group.rights)
            elif slip(group.observed) != group.observed:
                contradicted += 1
        if explained >= 2 and explained > contradicted and (best is None or explained > best[1]):
            best = (slip, explained)
    return best


def group_slip(group: GroupWord) -> tuple[str, bytes] | None:
    """``(what it says, the word put back in order)`` for one wrong group whose word is a
    rearrangement of a right one, else None."""
    for slip in WHOLE_WORD:
        for right in group.rights:
            if slip(group.observed) == right:
                return slip.word, right
    for right in group.rights:
        found = local_slip(group.observed, right)
        if found:
            return found
    return None
