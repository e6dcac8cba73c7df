"""Graph IR, op tables, composite round trip and builder: unit tests."""
from __future__ import annotations

import json

import pytest

import akgpy
from akgpy import GraphBuilder
from akgpy.errors import ShapeError, UnsupportedOpError
from akgpy.ops.registry import ALIASES, OPS, Category
from akgpy.reference import REFERENCE
from akgpy.te.builders import BUILDERS

from .conftest import CORPUS


def test_op_tables_cover_the_same_ops():
    """Each op once in every table; an alias (TensorAdd, Div) only in the op table, read through
    `canonical` (registry.ALIASES)."""
    ops = {n for n in OPS if n not in ALIASES}
    assert set(ALIASES.values()) <= ops
    assert set(REFERENCE) == ops
    fallback = {n for n, row in OPS.items() if row.fallback}
    assert fallback == set()  # Concat, StridedSlice, Gather are TE builders now (tests/test_layout_ops.py)
    assert set(BUILDERS) == ops - fallback
    corpus_ops = {"Mul", "Add", "Cast", "BroadcastTo", "Reshape", "ReduceSum", "RealDiv", "Sub", "InplaceAssign",
                  "Select", "Transpose", "Sqrt", "Maximum", "Greater", "TensorAdd", "Exp", "Neg", "LessEqual",
                  "AddN", "Minimum", "Log", "GreaterEqual", "Rsqrt", "ReduceMax", "MatMul", "Tanh", "Abs", "Pow",
                  "Assign", "Reciprocal", "PadAkg", "Less", "Equal", "Conv2D", "UnPadAkg", "Complex", "CReal",
                  "CImag", "Custom", "OneHot"}
    assert corpus_ops <= set(OPS)
    assert {OPS[n].category for n in ("MatMul", "Conv2D")} == {Category.OPAQUE}
    assert OPS["ReduceSum"].category == Category.REDUCE and OPS["Add"].category == Category.ELEMWISE


def test_every_corpus_graph_round_trips():
    files = sorted(p for p in CORPUS.rglob("*") if p.suffix in (".info", ".json"))
    assert len(files) >= 751
    for f in files:
        g = akgpy.load_composite(f)
        text = g.to_composite()
        g2 = akgpy.load_composite(text)
        assert g2 == g, f
        assert g2.hash() == g.hash(), f
        assert json.loads(text)["op"] == g.name


def test_load_accepts_path_string_and_dict():
    f = next(CORPUS.rglob("*.info"))
    by_path = akgpy.load_composite(f)
    assert akgpy.load_composite(str(f)) == by_path
    assert akgpy.load_composite(f.read_text()) == by_path
    assert akgpy.load_composite(json.loads(f.read_text())) == by_path


def test_builder_and_composite_hash_equal():
    b = GraphBuilder("k1")
    x = b.input("x", (8, 16))
    bias = b.input("bias", (16,))
    b.output(b.relu(x + bias))
    g = b.build()
    b2 = GraphBuilder("k2")
    p = b2.input("p", (8, 16))
    q = b2.input("q", (16,))
    b2.output(b2.maximum(b2.add(p, q), 0.0))
    assert b2.build().hash() == g.hash()
    assert akgpy.load_composite(g.to_composite()) == g


def test_validation_names_op_and_tensor():
    b = GraphBuilder("bad")
    x = b.input("x", (4, 3))
    y = b.input("y", (5,))
    with pytest.raises(ShapeError) as e:
        b.output(b.op("Add", [x, y], (4, 3), "float32"))
        b.build()
    assert "Add" in str(e.value) and e.value.tensor is not None
    b = GraphBuilder("unknown")
    x = b.input("x", (4,))
    b.output(b.op("Frobnicate", [x], (4,), "float32"))
    with pytest.raises(UnsupportedOpError, match="Frobnicate"):
        b.build()


def test_graph_queries():
    b = GraphBuilder("q")
    acc = b.input("acc", (1,))
    x = b.input("x", (10,))
    s = b.reduce_sum(x, 0, True)
    d = b.inplace_assign(acc, s, s, fake_output=True)
    b.output(d, x * 2.0)
    g = b.build()
    assert g.inplace_targets() == {"acc": s.name}
    assert g.fake_outputs == frozenset({d.name})
    assert len(g.real_outputs) == 1
    assert "ReduceSum" in g.describe()


def test_fractal_nz_logical_shape():
    t = akgpy.Tensor("t", (2, 4, 3, 16, 16), "float16", "FRACTAL_NZ")
    assert t.logical_shape == (2, 48, 64)


def test_empty_tensors_are_rejected_clearly():
    for shape in [(0, 4), (3, 0)]:
        b = GraphBuilder("empty")
        x = b.input("x", shape)
        b.output(x.sum(axis=0))
        with pytest.raises(ShapeError, match="no elements") as e:
            b.build()
        assert e.value.tensor == "x"


def test_ancestors_walks_each_tensor_once_and_stops_where_told():
    b = GraphBuilder("ancestors")
    x = b.input("x", (4, 8))
    w = b.input("w", (8,))
    y = b.exp(x * w)
    s = b.reduce_sum(y + x, axis=(1,))
    b.output(s)
    g = b.build()
    out = g.outputs[0]
    seen = [t for t, _ in g.ancestors(out)]
    assert seen[0] == out and len(seen) == len(set(seen))
    assert {"x", "w"} <= set(seen) and len(seen) == len(g.ops) + 2
    inputs = {t for t, op in g.ancestors(out) if op is None}
    assert inputs == {"x", "w"}
    # stop at the reduction: only the sum itself is seen
    stop = [t for t, _ in g.ancestors(out, lambda op: () if op.name == "ReduceSum" else op.inputs)]
    assert stop == [out]
