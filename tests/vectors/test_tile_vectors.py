"""The 2D golden vectors (the tile_16x16 set of vectors/level0, hscale.vectors.tile_sets): the
stored results are an independent kernel's (tests/helpers/tile_kernels.py), the transposed
case's are the first's transposed (NVFP4-2D-2, by hand), check --tiles judges a result file
and names the clause, expect and explain work."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hscale.vectors import LEVEL0_DIR
from hscale.vectors.check import open_vectors

from helpers.cli import Run, hscale_here
from helpers.tile_kernels import Tiles

SET = LEVEL0_DIR / "tile_16x16.json"


def _hscale(*args, cwd) -> Run:
    return hscale_here(["vectors", *args], cwd=cwd)


def _bytes(rows) -> np.ndarray:
    return np.array([list(bytes.fromhex(r)) for r in rows], np.uint8)


@pytest.mark.clause("NVFP4-2D-1", "NVFP4-2D-2")
def test_the_stored_results_are_the_independent_kernels_and_transpose():
    cases = {i: c for i, (n, c) in open_vectors(LEVEL0_DIR).family_cases.items()
             if n.startswith("tile_")}
    for entry in json.loads(SET.read_text())["cases"]:
        w = cases[entry["id"]].w
        mine = Tiles().quantize_2d(w)
        stored = entry["expected"]["w"]
        assert np.array_equal(_bytes(stored["scale_bytes"]), mine.scale_bytes), entry["id"]
        codes = np.array([[int(c, 16) for c in r.replace(" ", "")] for r in stored["codes"]])
        assert np.array_equal(codes, mine.codes), entry["id"]
        flipped = entry["expected"]["w_transposed"]
        codes_t = np.array([[int(c, 16) for c in r.replace(" ", "")] for r in flipped["codes"]])
        assert np.array_equal(codes_t, codes.T), entry["id"]
        tiles = _bytes(stored["scale_bytes"])[::16]
        assert np.array_equal(_bytes(flipped["scale_bytes"])[::16], tiles.T)


@pytest.mark.clause("NVFP4-2D-1")
def test_the_commands_on_tile_vectors(tmp_path):
    done = _hscale("expect", "--tiles", "exact", "--out", "t.txt", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = (tmp_path / "t.txt").read_text().splitlines()
    done = _hscale("check", "--tiles", "exact", "--observed", "t.txt", cwd=tmp_path)
    assert done.returncode == 0 and "conforms to the tile vectors" in done.stdout, done.stdout
    bad = [l[:-19] + "7d" + l[-17:] if l.startswith("tile-row-magnitudes 3 0 ") else l
           for l in lines]
    (tmp_path / "bad.txt").write_text("\n".join(bad) + "\n")
    done = _hscale("check", "--tiles", "exact", "--observed", "bad.txt", cwd=tmp_path)
    assert done.returncode == 1 and "[NVFP4-2D-1]" in done.stdout, done.stdout
    done = _hscale("explain", "tile-one-outlier-per-tile", "5", "0", cwd=tmp_path)
    assert done.returncode == 0 and "tile amax 96.0, byte 0x7E" in done.stdout, done.stdout
