"""Dense Conv2D in the contraction template (schedule/conv.py): the filter, the same for every
output row, is packed into panels of one register tile's columns by a copy that walks the
panels, and the panel loop runs outermost. Generated kernels against the reference (stride 1
and 2, 1x1 and 3x3, grouped, outputs from 1x1 to 14x14, with a fused epilogue)."""
from __future__ import annotations

import re

import pytest

import akgpy
from akgpy import GraphBuilder
from akgpy.schedule.config import ScheduleConfig
from akgpy.testing import check_program


def _conv(h, c, k, s, o, *, groups=1, epilogue=False, name="conv"):
    b = GraphBuilder(name)
    oh = (h - k) // s + 1
    x, w = b.input("x", (1, h, h, c)), b.input("w", (o, k, k, c // groups))
    y = b.op("Conv2D", [x, w], (1, oh, oh, o), "float32", stride=[1, 1, s, s],
             **({"groups": groups} if groups != 1 else {}))
    if epilogue:
        y = b.relu(y + b.input("bias", (o,), "float32"))
    b.output(y)
    return b.build()


def _ok(g, **options):
    prog = akgpy.fuse(g, **options)
    assert check_program(g, prog) == []
    return prog


CASES = [  # (input h, c, kernel, stride, o)
    (9, 64, 3, 1, 64), (16, 32, 3, 2, 64), (14, 48, 1, 2, 96), (3, 16, 3, 1, 32), (16, 16, 3, 1, 48),
    (8, 24, 1, 1, 40), (7, 8, 3, 2, 16),
]


@pytest.mark.parametrize("h,c,k,s,o", CASES, ids=str)
def test_dense_conv_matches_the_reference(h, c, k, s, o):
    _ok(_conv(h, c, k, s, o))


def test_filter_packed_into_panels_walked_panel_by_panel():
    prog = _ok(_conv(9, 64, 3, 1, 128, epilogue=True))
    tir, text = prog.kernels[0].tir, prog.explain()
    m = re.search(r"B packed into panels of (\d+) columns", text)
    assert m, text
    tj = int(m.group(1))
    # the packed filter [O / tj, kh, kw, c, tj] ...
    assert f"T.sblock_alloc_buffer(({128 // tj}, 3, 3, 64, {tj}))" in tir, tir
    # ... copied by a parallel loop over the panels, and the tile loop runs the panels outermost
    assert re.search(rf"for \w+ in T.parallel\({128 // tj * 3}\)", tir), tir
    assert re.search(r"for (oo_0_n_h\w*) in T.parallel", tir), tir
    assert tir.count("T.parallel") == 2, tir  # the epilogue runs inside the tile loop


def test_grouped_conv_and_packing_off_stay_correct():
    _ok(_conv(10, 32, 3, 1, 64, groups=2))
    cfg = ScheduleConfig(parallel=False)
    prog = _ok(_conv(9, 32, 3, 1, 64), config=cfg)
    assert "T.parallel" not in prog.kernels[0].tir
