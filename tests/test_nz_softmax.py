"""Softmax over FRACTAL_NZ tiles: the row is two reduced axes of one tensor ([.., N1, M1, 16, 16]
reduced over N1 and the last 16), the rows' own dims sit between them. The corpus's attention
softmaxes in NZ (~1580, ~1004, 100M elements) ran 0.34 s and 0.16 s: the max a scalar chain,
the exp row written to a 25 MB buffer per thread and read back by the sum."""
from __future__ import annotations

import re

import numpy as np

import akgpy
from akgpy import GraphBuilder
from akgpy.testing import check_program

from .conftest import CORPUS


def _nz_softmax(shape=(2, 4, 8, 8, 16, 16)):
    b = GraphBuilder("nz_softmax")
    x = b.input("x", shape, "float16")
    y = x * 0.125
    mx = y.max(axis=(2, 5), keepdims=True)
    e = b.exp(y.astype("float32") - mx.astype("float32"))
    s = e.sum(axis=(2, 5), keepdims=True)
    b.output((e / s).astype("float16"))
    return b.build()


def _line(explain: str, prefix: str) -> str:
    return next((ln for ln in explain.splitlines() if ln.startswith(prefix)), "")


def test_max_over_two_axes_takes_vector_partials_and_the_parts_share_every_row_loop():
    """The max's innermost reduced axis is 16 long, one register of partials: with the 8 terms
    of the other reduced axis each partial still sums many, so it is rfactored. isl orders the
    max/exp part's band and the sum/divide part's band differently; matched member by member,
    they share all four row loops, so the exp row stays in the row (no workspace buffer)."""
    g = _nz_softmax()
    prog = akgpy.fuse(g)
    assert not check_program(g, prog)
    ex = prog.explain()
    assert "ReduceMax" in _line(ex, "row reductions split into vector partial sums")
    assert re.search(r"merged into 1, .*: 4 loop\(s\)", _line(ex, "fusion: isl's 2 top-level parts"))
    # the exp intermediate is a per-row tile, not a buffer of the whole tensor per thread
    assert not re.search(r"call ptr %\w+\(i32 1, i32 %dev_id, i64 \d+", prog.kernels[0].source)


def test_the_corpus_nz_softmaxes_fuse_their_rows():
    """~1580: the max's input index is a reshape's k % 16 (simplified over the iterator's range
    it is k, the stride-1 walk that rfactor needs). ~1004: a small mask part ahead of the
    softmax, which reads it, shares one loop with it; merged first, it held the two softmax parts
    to that one loop. It now runs apart and they share all four."""
    composite = CORPUS / "composite"
    files = {p.stem[-7:]: p for d in ("ascend_ci", "stitch_adapt") for p in (composite / d).glob("*.info")}
    p1580 = akgpy.fuse(akgpy.load_composite(files["5441580"])).explain()
    assert "ReduceMax_3" in _line(p1580, "row reductions split into vector partial sums")
    assert re.search(r"merged into 1, .*: 4 loop\(s\)$", _line(p1580, "fusion: isl's 2 top-level parts"))
    p1004 = akgpy.fuse(akgpy.load_composite(files["8541004"])).explain()
    assert "ReduceMax_9" in _line(p1004, "row reductions split into vector partial sums")
    assert re.search(r"merged into 2, .*: 4 loop\(s\)$", _line(p1004, "fusion: isl's 3 top-level parts"))


def test_nz_softmax_values_on_odd_tiles():
    """Other extents of the rows' own dims, against numpy: 3 heads, 5 row blocks."""
    g = _nz_softmax((1, 3, 4, 5, 16, 16))
    prog = akgpy.fuse(g)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 3, 4, 5, 16, 16)).astype(np.float16) * 8
    (got,) = prog(x)
    y = (x * np.float16(0.125)).astype(np.float16)
    e = np.exp(y.astype(np.float32) - y.max(axis=(2, 5), keepdims=True).astype(np.float32))
    want = (e / e.sum(axis=(2, 5), keepdims=True)).astype(np.float16)
    assert np.allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-3, atol=1e-3)
    assert not check_program(g, prog)
