"""Partitioner rules (docs/fusion.md) on small model graphs, and the ModelProgram that runs them."""
from __future__ import annotations

import numpy as np
import pytest

import akgpy
from akgpy import GraphBuilder
from akgpy.errors import ArgumentError, CompileError, UnsupportedOpError
from akgpy.fusion import Limits, partition
from akgpy.testing import compare, random_inputs

RNG = np.random.default_rng(0)


def groups_as_names(p):
    return [[p.graph.ops[i].name for i in grp.ops] for grp in p.groups]


def check_model(g, **options):
    """Compile, run and compare every output with the numpy reference."""
    prog = akgpy.fuse(g, **options)
    args = [a for n, a in zip(g.inputs, random_inputs(g, seed=1)) if n not in g.bound]
    got = prog(*args)
    want = akgpy.reference.run(g, args)
    assert len(got) == len(want)
    bad = compare(g, got, [], want, [])
    assert not bad, bad
    return prog


def test_elementwise_chain_and_broadcast_fuse_into_one_group():
    b = GraphBuilder("chain", model=True)
    x = b.input("x", (64, 32))
    bias = b.input("bias", (32,))
    y = b.relu(b.exp(x) + bias) * 2.0
    b.output(y)
    p = partition(b.build())
    assert groups_as_names(p) == [["Exp", "Add", "Maximum", "Mul"]]
    reasons = [d.reason for d in p.decisions]
    assert "broadcast into elementwise" in reasons and "elementwise chain" in reasons


def test_layout_ops_fold_and_elementwise_feeds_a_reduction():
    b = GraphBuilder("lay", model=True)
    x = b.input("x", (8, 16, 4))
    y = b.transpose(x, (0, 2, 1)).reshape(8, 64) * 3.0
    b.output(y.sum(axis=-1))
    p = partition(b.build())
    assert groups_as_names(p) == [["Transpose", "Reshape", "Mul", "ReduceSum"]]
    assert any(d.reason == "elementwise producer into reduction" for d in p.decisions)
    assert any(d.reason == "layout op folds into index arithmetic" for d in p.decisions)


def layernorm(b, x, n):
    mean = x.sum(axis=-1, keepdims=True) * (1.0 / n)
    d = x - mean
    var = (d * d).sum(axis=-1, keepdims=True) * (1.0 / n)
    return d * b.rsqrt(var + 1e-5)


def softmax(b, x):
    e = b.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("pattern", ["layernorm", "softmax"])
def test_reduction_stitches_its_consumers_into_one_group(pattern):
    b = GraphBuilder(pattern, model=True)
    x = b.input("x", (256, 96))
    b.output(layernorm(b, x, 96) if pattern == "layernorm" else softmax(b, x))
    g = b.build()
    p = partition(g)
    assert len(p.groups) == 1, p.describe()
    assert any("stitched" in d.reason for d in p.decisions)
    prog = check_model(g)
    assert len(prog.kernels) == 1


def test_reduction_over_leading_axis_does_not_stitch():
    b = GraphBuilder("colsum", model=True)
    x = b.input("x", (64, 32))
    s = x.sum(axis=0, keepdims=True)
    b.output(x - s)
    p = partition(b.build())
    assert len(p.groups) == 2
    assert any("leading axes" in d.reason and not d.merged for d in p.decisions)
    check_model(p.graph)


def test_matmul_takes_its_elementwise_epilogue_but_not_a_prologue():
    b = GraphBuilder("dense", model=True)
    x = b.input("x", (32, 64))
    w = b.weight("w", RNG.standard_normal((64, 48)).astype(np.float32))
    bias = b.weight("bias", RNG.standard_normal((48,)).astype(np.float32))
    y = b.relu(b.matmul(b.exp(x), w) + bias)
    b.output(y)
    g = b.build()
    p = partition(g)
    assert groups_as_names(p) == [["Exp"], ["MatMul", "Add", "Maximum"]]
    assert any("no prologue fusion" in d.reason for d in p.decisions)
    assert any(d.reason == "elementwise epilogue into MatMul" for d in p.decisions)
    check_model(g)


def test_layernorm_after_matmul_stays_one_group():
    """`x - mean` has two producers: the MatMul epilogue and the mean. Stitching wins, or the
    LayerNorm would split into three kernels."""
    b = GraphBuilder("dense_ln", model=True)
    x = b.input("x", (64, 32))
    w = b.weight("w", RNG.standard_normal((32, 32)).astype(np.float32))
    b.output(layernorm(b, b.matmul(x, w) + x, 32))
    g = b.build()
    p = partition(g)
    assert groups_as_names(p)[0] == ["MatMul", "Add"]
    assert len(p.groups) == 2
    check_model(g)


def test_greedy_fusion_would_create_a_cycle():
    """a = exp(x); m = matmul(a, w); out = a + m. Fusing `a` into the Add (elementwise chain)
    would make the group both feed and consume the MatMul."""
    b = GraphBuilder("cycle", model=True)
    x = b.input("x", (16, 16))
    w = b.weight("w", RNG.standard_normal((16, 16)).astype(np.float32))
    a = b.exp(x)
    m = b.matmul(a, w)
    b.output(b.sub(a, m))  # Sub visits `a`'s group (injective) first
    g = b.build()
    p = partition(g)
    assert any("cycle" in d.reason and not d.merged for d in p.decisions), p.describe()
    owner = p.group_of()
    order = {grp.id: k for k, grp in enumerate(p.groups)}
    for grp in p.groups:  # every input is produced by an earlier group
        for t in grp.inputs:
            prod = next((i for i, op in enumerate(g.ops) if t in op.outputs), None)
            if prod is not None:
                assert order[owner[prod].id] < order[grp.id]
    check_model(g)


def test_size_limit_splits_long_chains():
    b = GraphBuilder("long", model=True)
    x = b.input("x", (64,))
    y = x
    for _ in range(20):
        y = y * 1.01 + 0.5
    b.output(y)
    g = b.build()
    p = partition(g, limits=Limits(max_ops=8))
    assert all(len(grp.ops) <= 8 for grp in p.groups) and len(p.groups) == 5
    assert any("size limit" in d.reason for d in p.decisions)
    check_model(g, limits=Limits(max_ops=8))


def test_layout_ops_fuse_with_their_neighbours():
    b = GraphBuilder("fb", model=True)
    x = b.input("x", (8, 6))
    y = b.op("StridedSlice", [b.exp(x)], (8, 3), "float32", begin=[0, 1], end=[8, 6], strides=[1, 2])
    z = b.op("Concat", [y, y * 2.0], (8, 6), "float32", axis=1)
    b.output(z + 1.0)
    g = b.build()
    prog = check_model(g)
    assert [st.group.kind for st in prog.steps] == ["kernel"] and not prog.fallbacks()


def test_composite_graph_keeps_its_grouping():
    b = GraphBuilder("composite_like")  # a fused graph: one kernel, even with a matmul and a reduce
    x = b.input("x", (16, 32))
    w = b.input("w", (32, 16))
    b.output(layernorm(b, b.matmul(x, w), 16))
    prog = akgpy.fuse(b.build())
    assert isinstance(prog, akgpy.runtime.program.Program) and len(prog.kernels) == 1


def test_library_contractions_and_unfused_baseline_match():
    b = GraphBuilder("mlp", model=True)
    x = b.input("x", (32, 64))
    w = b.weight("w", RNG.standard_normal((64, 48)).astype(np.float32))
    b.output(softmax(b, b.relu(b.matmul(x, w))))
    g = b.build()
    lib = check_model(g, contraction="library")
    assert [st.group.kind for st in lib.steps] == ["library", "kernel"]
    unfused = check_model(g, fuse=False)
    assert unfused.launches == len(g.ops) > check_model(g).launches
    with pytest.raises(CompileError, match="contraction policy"):
        akgpy.fuse(g, contraction="fastest")


def test_reshape_groups_are_views_and_launch_nothing():
    b = GraphBuilder("view", model=True)
    x = b.input("x", (4, 8, 16))
    w = b.weight("w", RNG.standard_normal((16, 8)).astype(np.float32))
    b.output(b.matmul(x.reshape(32, 16), w))
    g = b.build()
    prog = check_model(g)
    assert [st.group.kind for st in prog.steps] == ["view", "kernel"] and prog.launches == 1


def test_model_program_binds_weights_frees_intermediates_and_reports():
    b = GraphBuilder("mp", model=True)
    x = b.input("x", (64, 32))
    w = b.weight("w", RNG.standard_normal((32, 32)).astype(np.float32))
    h = b.matmul(x, w)
    b.output(softmax(b, h) + b.exp(x))
    g = b.build()
    prog = check_model(g)
    assert g.free_inputs == ("x",)
    with pytest.raises(ArgumentError, match="takes 1 inputs"):
        prog(np.ones((64, 32), np.float32), np.ones((32, 32), np.float32))
    with pytest.raises(ArgumentError, match=r"expected float32\[64, 32\]"):
        prog(np.ones((64, 31), np.float32))
    freed = {t for ts in prog._free_after for t in ts}
    assert freed and not freed & set(g.outputs)  # intermediates dropped, outputs kept
    report = prog.profile(np.ones((64, 32), np.float32), repeat=2)
    assert "share" in report and "total" in report and "MatMul" in report
    assert "partition of mp" in prog.explain() and "== kernel" in prog.explain()


def test_in_place_ops_are_rejected_in_model_graphs():
    b = GraphBuilder("inpl", model=True)
    x = b.input("x", (4,))
    b.output(b.inplace_assign(x, b.exp(x), fake_output=False))
    with pytest.raises(UnsupportedOpError, match="in-place"):
        akgpy.fuse(b.build())


def test_picture_dot_and_svg_without_graphviz(tmp_path, monkeypatch):
    b = GraphBuilder("pic", model=True)
    x = b.input("x", (16, 8))
    w = b.weight("w", RNG.standard_normal((8, 8)).astype(np.float32))
    b.output(softmax(b, b.matmul(x, w) + 1.0))
    prog = akgpy.fuse(b.build())
    dot = prog.to_dot()
    assert dot.count("subgraph cluster_") == len(prog.steps) and "fillcolor" in dot
    monkeypatch.setattr("shutil.which", lambda name: None)  # a fresh machine: no `dot` binary
    svg = (tmp_path / "f.svg")
    prog.render(str(svg))
    text = svg.read_text()
    assert text.startswith("<svg") and text.count("<rect") == len(prog.steps) and "ReduceMax" in text
    with pytest.raises(akgpy.AkgpyError, match="needs Graphviz"):
        prog.render(str(tmp_path / "f.png"))
    prog.render(str(tmp_path / "f.dot"))
    assert (tmp_path / "f.dot").read_text() == dot


def test_dump_switch_writes_the_partition_and_every_kernel(tmp_path, monkeypatch):
    monkeypatch.setenv("AKGPY_DUMP", str(tmp_path))
    b = GraphBuilder("dumped", model=True)
    x = b.input("x", (16, 8))
    w = b.weight("w", RNG.standard_normal((8, 8)).astype(np.float32))
    b.output(softmax(b, b.matmul(x, w)))
    prog = akgpy.fuse(b.build())
    part = (tmp_path / "dumped" / "0_partition.txt").read_text()
    assert "decisions:" in part and "stitched" in part
    assert (tmp_path / "dumped" / "0_partition.dot").read_text() == prog.to_dot()
    for k in prog.kernels:
        assert (tmp_path / k.name / "2_scheduled.py").is_file()


def test_outputs_are_fresh_arrays_while_intermediates_are_reused():
    """Intermediates live in buffers reused by every call; what a call returns must not change
    when the program runs again, also where an output is a view of an intermediate."""
    b = GraphBuilder("reuse", model=True)
    x = b.input("x", (32, 16))
    w = b.weight("w", RNG.standard_normal((16, 16)).astype(np.float32))
    h = b.matmul(x, w)
    h2 = b.matmul(h, w)
    b.output(b.exp(h2), h2.reshape(16, 32))  # the second output: a view of an intermediate
    g = b.build()
    prog = akgpy.fuse(g)
    assert prog._buffers  # the plan made persistent buffers
    x1 = RNG.standard_normal((32, 16)).astype(np.float32)
    first = [a.copy() for a in prog(x1)]
    keep = prog(x1)
    prog(RNG.standard_normal((32, 16)).astype(np.float32) * 3)
    for a, b_ in zip(keep, first):
        np.testing.assert_array_equal(a, b_)
    unaligned = np.zeros(32 * 16 + 1, np.float32)[1:].reshape(32, 16)  # 4-byte offset
    unaligned[...] = x1
    for a, b_ in zip(prog(unaligned), first):
        np.testing.assert_array_equal(a, b_)


def test_dead_ops_are_dropped_with_a_decision():
    b = GraphBuilder("dead", model=True)
    x = b.input("x", (8,))
    b.exp(x) * 2.0  # computed, never used
    b.output(-x)
    g = b.build()
    p = partition(g)
    assert groups_as_names(p) == [["Neg"]]
    assert sum("dead" in d.reason for d in p.decisions) == 2
    check_model(g)
