"""Dim collapsing (graph/collapse.py): a transpose's stride-1 read run merges where every layout
keeps it together; the kernel runs on the collapsed graph and callers see the graph's shapes."""
from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import akgpy
from akgpy import GraphBuilder
from akgpy.graph.collapse import collapse_dims
from akgpy.testing import check_program


def _head(shape=(2, 3, 5, 6, 6), perm=(0, 3, 4, 1, 2), dtype="float16", scale=False):
    b = GraphBuilder("yolo_head")
    x = b.input("x", shape, dtype)
    y = x * 2.0 if scale else x
    b.output(y.transpose(perm))
    return b.build()


def test_yolo_head_reads_whole_planes():
    g = _head((32, 3, 85, 52, 52))
    got = collapse_dims(g)
    assert got is not None
    kg, note = got
    t = next(op for op in kg.ops if op.name == "Transpose")
    # (52, 52) is read with stride 1 in both layouts: one run of 2704; (3, 85) stays as it was
    assert kg.tensors[t.inputs[0]].shape == (32, 3, 85, 2704)
    assert kg.tensors[t.outputs[0]].shape == (32, 2704, 3, 85)
    assert tuple(t.attrs["perm"]) == (0, 3, 1, 2)
    assert "2704" in note


def test_elementwise_producers_collapse_alike():
    g = _head((4, 16, 13, 13), (0, 2, 3, 1), scale=True)
    kg, _ = collapse_dims(g)
    for op in kg.ops:
        assert all(kg.tensors[n].shape in ((4, 16, 169), (4, 169, 16), (1,), ()) for n in (*op.inputs, *op.outputs)), op


@pytest.mark.parametrize("shape, perm", [
    ((4, 16, 8, 8), (0, 1, 3, 2)),   # the read run moves: nothing stays together with it
    ((8, 3, 3, 16), (0, 3, 1, 2)),   # only the written run (3, 3) could merge: left as it is
    ((6, 10), (1, 0)),
])
def test_nothing_to_merge(shape, perm):
    assert collapse_dims(_head(shape, perm)) is None


def test_graphs_with_other_ops_are_left_alone():
    b = GraphBuilder("transpose_then_sum")
    x = b.input("x", (4, 16, 13, 13))
    b.output(x.transpose(0, 2, 3, 1).sum(axis=(3,)))
    assert collapse_dims(b.build()) is None


@pytest.mark.parametrize("schedule", ["poly", "plain"])
def test_collapsed_kernel_matches_reference_in_graph_shapes(schedule):
    g = _head((2, 3, 5, 12, 12), scale=True)
    prog = akgpy.fuse(g, schedule=schedule)
    assert [tuple(p.shape) for p in prog.kernels[0].params] == [(2, 3, 5, 144), (2, 144, 3, 5)]
    assert not check_program(g, prog)
    x = np.random.default_rng(0).standard_normal((2, 3, 5, 12, 12)).astype("float16")
    out, = prog(x)
    assert out.shape == (2, 12, 12, 3, 5)
    np.testing.assert_array_equal(out, (x * np.float16(2.0)).transpose(0, 3, 4, 1, 2))
    assert "dims collapsed" in prog.explain().splitlines()[2]


def test_collapsed_poly_kernel_tiles_the_merged_run():
    """Collapsed, the transpose tile's rows run across the rows of the 12 x 12 plane (a width
    of 8 = one register of float16 on 16-byte lanes, or 16, 24, ...), which the five-dim
    statement could not: its read row was 12 long, so its widths divided 12."""
    prog = akgpy.fuse(_head((2, 3, 5, 12, 12)))
    line = next(ln for ln in prog.explain().splitlines() if ln.startswith("transpose:"))
    width = int(re.search(r"tiled \[(\d+)", line).group(1))
    assert 144 % width == 0 and 12 % width != 0, line


@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_random_transposes_keep_matching_the_reference(data):
    rank = data.draw(st.integers(2, 5))
    shape = tuple(data.draw(st.lists(st.integers(1, 6), min_size=rank, max_size=rank)))
    perm = tuple(data.draw(st.permutations(range(rank))))
    g = _head(shape, perm, "float32", scale=data.draw(st.booleans()))
    got = collapse_dims(g)
    if got is not None:
        kg, _ = got
        for n, t in g.tensors.items():
            assert kg.tensors[n].size == t.size, n
    assert not check_program(g, akgpy.fuse(g))


def test_config_knob_keeps_the_graphs_dims():
    g = _head((2, 3, 5, 12, 12))
    prog = akgpy.fuse(g, config=akgpy.ScheduleConfig(collapse_dims=False))
    assert [tuple(p.shape) for p in prog.kernels[0].params] == [(2, 3, 5, 12, 12), (2, 12, 12, 3, 5)]
    assert "dims collapsed" not in prog.explain()
    assert not check_program(g, prog)
    with pytest.raises(akgpy.AkgpyError, match="collapse_dims"):
        akgpy.ScheduleConfig(collapse_dims=1)


def test_row_tiles_go_outermost_when_the_read_run_is_the_longer():
    """NCHW -> NHWC reads runs of H*W and writes runs of C: the row (channel) tiles go outermost
    so that consecutive tiles continue along the read rows; NHWC -> NCHW keeps the read run's
    tiles outermost (tiles.register_transpose_tile)."""
    nchw = _head((2, 64, 52, 52), (0, 2, 3, 1))
    prog = akgpy.fuse(nchw)
    line = next(ln for ln in prog.explain().splitlines() if ln.startswith("transpose:"))
    assert "row tiles outermost" in line, line
    rows = int(re.search(r"tiled \[\d+, (\d+)\]", line).group(1))
    # the first loop under the parallel batch loop runs the 64 / rows channel tiles
    grid = re.search(r"for c0 in T.parallel\(2\):\s+for (?:\w+, )*\w+ in T.grid\((\d+)", prog.kernels[0].tir)
    assert grid is not None and int(grid.group(1)) == 64 // rows, prog.kernels[0].tir[:2000]
    assert not check_program(nchw, prog)
    nhwc = _head((2, 52, 52, 64), (0, 3, 1, 2))
    prog = akgpy.fuse(nhwc)
    line = next(ln for ln in prog.explain().splitlines() if ln.startswith("transpose:"))
    assert "row tiles outermost" not in line, line
    assert not check_program(nhwc, prog)


def test_model_steps_call_collapsed_kernels_directly_on_views():
    """In a model graph a collapsed kernel still takes the direct path (no Program call per
    step): its arguments are reshaped views of the graph-shaped arrays between steps."""
    b = GraphBuilder("nhwc_model", model=True)
    x = b.input("x", (2, 8, 12, 12))
    b.output(x.transpose(0, 2, 3, 1) * 2.0)
    prog = akgpy.fuse(b.build(), fuse=False)  # the transpose is a step of its own
    # (graph/layout.py may sink it below the Mul: find its step)
    k = next(i for i, st in enumerate(prog.steps) if any(o.name == "Transpose" for o in st.program.graph.ops))
    direct = prog._direct[k]
    assert direct is not None
    assert [view for *_, view in direct] == [(2, 8, 144), (2, 144, 8)]
    xv = np.random.default_rng(1).standard_normal((2, 8, 12, 12)).astype("float32")
    out, = prog(xv)
    np.testing.assert_array_equal(out, xv.transpose(0, 2, 3, 1) * np.float32(2.0))
