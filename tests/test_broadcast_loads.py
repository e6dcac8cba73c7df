"""Broadcast operands in vector loops: their lanes read constant offsets from the first lane
(the vector width chosen as a multiple of their digits' period), so each vector is one
contiguous load and a shuffle, not a load per lane (te/index.digit_groups, poly/tree
_gather_registers, te/builders._lane_split, targets/vector_loads)."""
from __future__ import annotations

import re

import pytest

import akgpy
from akgpy import GraphBuilder
from akgpy.te.index import digit_groups, repeats_every
from akgpy.testing import check_program

from .conftest import BARE, WIDE

GRID_TAIL = [52, 52, 3, 2]  # yolo's [.., 52, 52, 3, 2] tail, walked as one linear index L


def _scalar_loads(prog) -> int:
    """float32 loads of one element in the LLVM IR: the lanes of a gathered vector (a
    broadcast operand read whole is a vector load, then shuffled)."""
    ll = "\n".join(k._executable.mod.inspect_source("ll") for k in prog.kernels)
    return len(re.findall(r"= load float, ptr", ll))


def test_digits_of_a_grid_merge_where_the_operand_is_contiguous():
    # [1, 52, 52, 1, 2]: strides 104, 2, -, 1 -> 2 * (L // 6) + L % 2
    assert digit_groups([(0, 104), (1, 2), (3, 1)], GRID_TAIL) == [(6, 2704, 2), (1, 2, 1)]
    # [.., 52, 52, 3, 1]: L // 2, one digit over the whole tail
    assert digit_groups([(0, 156), (1, 3), (2, 1)], GRID_TAIL) == [(2, 8112, 1)]
    # the written array itself: L
    assert digit_groups([(0, 312), (1, 6), (2, 2), (3, 1)], GRID_TAIL) == [(1, 16224, 1)]


def test_lane_offsets_repeat_only_at_multiples_of_the_period():
    total = 16224
    grid = digit_groups([(0, 104), (1, 2), (3, 1)], GRID_TAIL)
    assert not repeats_every(grid, total, 16) and repeats_every(grid, total, 48) and repeats_every(grid, total, 24)
    stretch = digit_groups([(0, 156), (1, 3), (2, 1)], GRID_TAIL)
    assert repeats_every(stretch, total, 16) and not repeats_every(stretch, total, 7)
    pair = digit_groups([(3, 1)], GRID_TAIL)  # a [2] vector: L % 2
    assert repeats_every(pair, total, 16) and not repeats_every(pair, total, 9)


def _yolo_like(reduce: bool, math: bool = True):
    b = GraphBuilder("grid_loss")
    x = b.input("x", (4, 52, 52, 3, 2))
    grid = b.input("grid", (1, 52, 52, 1, 2))
    w = b.input("w", (4, 52, 52, 3, 1))
    v = b.input("v", (2,))
    y = (x * v - grid) * w
    b.output(b.reduce_sum(b.exp(y) if math else y, axis=(0, 1, 2, 3, 4)) if reduce else y)
    return b.build()


def test_elementwise_tail_widens_the_vector_to_the_grid_period():
    """[.., 52, 52, 3, 2] coalesced: the grid reads 2 * (L // 6) + L % 2, whose lane offsets
    repeat every 48 lanes, so the vector is 3 registers wide and no lane is loaded alone."""
    g = _yolo_like(reduce=False)
    prog = akgpy.fuse(g, config=BARE, target=WIDE)
    text = prog.explain()
    assert "split by 48 lanes (3 registers per op: each vector's lanes then read a broadcast operand" in text, \
        text[:3000]
    assert _scalar_loads(prog) == 0
    assert not check_program(g, prog)


@pytest.mark.parametrize("math,lanes", [(False, 24), (True, 48)], ids=["sum", "sum_of_exp"])
def test_interleaved_sum_widens_its_partials_to_the_grid_period(math, lanes):
    """The same grid summed to a scalar: the interleaved partials take the first multiple of 8
    lanes at which the grid's offsets repeat (24), of 16 when the summed value is vector math
    (48: its float32 lanes fill whole registers), one vector of them all."""
    g = _yolo_like(reduce=True, math=math)
    prog = akgpy.fuse(g, config=BARE, target=WIDE)
    text = prog.explain()
    assert re.search(rf"vector: \S+_lanes_update: innermost member split by {lanes} lanes", text), text[:3000]
    assert _scalar_loads(prog) == 0
    assert not check_program(g, prog)


def test_plain_schedule_also_loads_stretched_operands_whole():
    """The load-and-shuffle pass runs on every kernel: the plain schedule's x * w with w
    [.., 1] broadcast along the vector loop is correct either way."""
    g = _yolo_like(reduce=False)
    prog = akgpy.fuse(g, schedule="plain")
    assert not check_program(g, prog)


def _fuse_with_exhausted_budgets(monkeypatch, exhausted):
    """The yolo-like sum fused while the isl search variants named in `exhausted` have a budget
    of one operation, so each runs out at once: (graph, program, explain() text)."""
    import dataclasses

    from akgpy.poly import scheduler
    real = scheduler.searches
    monkeypatch.setattr(scheduler, "searches", lambda biggest: tuple(
        dataclasses.replace(s, max_operations=1) if s.name in exhausted else s for s in real(biggest)))
    g = _yolo_like(reduce=True)
    prog = akgpy.fuse(g, config=BARE, target=WIDE)
    return g, prog, prog.explain()


def test_exhausted_search_searches_again_without_shifts_and_stays_fused(monkeypatch):
    """When the full search runs out of operations, the next one forbids constant shifts: on
    bert's row sums cut into partials it answers in a fraction of a second with a fused
    schedule, where the serialized one left every component its own loop nest."""
    g, prog, text = _fuse_with_exhausted_budgets(monkeypatch, {"full"})
    assert "isl search: full exhausted its budget of 1 operations" in text, text[:2000]
    assert "isl search: no-shifts answered" in text
    assert "isl search: serialized" not in text
    assert "schedule path: poly/isl-ast" in text
    assert not check_program(g, prog)


def test_exhausted_searches_on_wide_partials_serialize_and_keep_them(monkeypatch):
    """Wider partials make isl's search longer; when it runs out of operations, also without
    constant shifts, isl schedules each component on its own and the passes fuse from there:
    the kernel stays on the poly path, with its wide partials."""
    g, prog, text = _fuse_with_exhausted_budgets(monkeypatch, {"full", "no-shifts"})
    assert [line.split(" exhausted")[0].split(" answered")[0] for line in text.splitlines()
            if line.startswith("isl search:")] == \
        ["isl search: full", "isl search: no-shifts", "isl search: serialized"], text[:2000]
    assert "schedule path: poly/isl-ast" in text
    # the partials' init and update parts share the rows (i0, i1); below them the update keeps
    # its band with the stride-1 dim innermost, in vectors of all 48 partials
    assert "each part's statements run per iteration of them: 2 loop(s)" in text
    assert re.search(r"\(i2, kf of S_\w+_lanes_update\)\n.*\nvector: part [\d.]+: innermost member split by 48 lanes",
                     text), text[:3000]
    assert not check_program(g, prog)
