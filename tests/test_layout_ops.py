"""Concat, StridedSlice, Gather and GatherElements as TE code: alone, fused with elementwise
neighbours, in model graphs (no numpy fallback step), from ONNX (Split, Slice, Concat, Gather,
GatherElements against onnxruntime), and their bad attributes."""
from __future__ import annotations

import numpy as np
import pytest

import akgpy
from akgpy import reference
from akgpy.errors import AttrError, ShapeError
from akgpy.graph.builder import GraphBuilder
from akgpy.testing import check_program

TOL = dict(rtol=1e-4, atol=1e-4)


def _run_both(g, inputs, schedule=None):
    """The compiled program's outputs and the reference's on the same inputs; equal within TOL."""
    prog = akgpy.fuse(g) if schedule is None else akgpy.fuse(g, schedule=schedule)
    got = prog(*[a.copy() for a in inputs])
    want = reference.run(g, [a.copy() for a in inputs])
    assert len(got) == len(want)
    for a, w in zip(got, want):
        assert a.shape == w.shape
        np.testing.assert_allclose(a, w, **TOL)
    return prog


def _poly_path(prog) -> str:
    return prog.kernels[0].schedule_path.path


# -- each op alone and fused with elementwise neighbours (one kernel) ----------------------------

@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat_three_inputs_between_elementwise_ops(axis):
    rng = np.random.default_rng(0)
    b = GraphBuilder("cat")
    shapes = [[3, 4], [3, 4], [3, 4]]
    for k in range(3):
        shapes[k][axis] = k + 1
    xs = [b.input(f"x{k}", s) for k, s in enumerate(shapes)]
    out = list(shapes[0])
    out[axis] = 6
    c = b.op("Concat", [b.exp(xs[0]), xs[1] * 2.0, xs[2]], out, "float32", axis=axis)
    b.output(c + 1.0)
    g = b.build()
    prog = _run_both(g, [rng.standard_normal(s).astype(np.float32) for s in shapes])
    assert len(prog.kernels) == 1 and not check_program(g, prog)


@pytest.mark.parametrize("begin,end,strides,shape", [
    ([1, 0], [5, 7], [2, 3], (2, 3)),
    ([-1, 6], [-99, -99], [-2, -1], (3, 7)),   # negative strides, ends clamped
    ([0, -3], [99, 100], [1, 1], (5, 3)),      # negative begin, end past the dim
])
def test_strided_slice_fused(begin, end, strides, shape):
    rng = np.random.default_rng(1)
    b = GraphBuilder("sl")
    x = b.input("x", (5, 7))
    s = b.op("StridedSlice", [b.exp(x)], shape, "float32", begin=begin, end=end, strides=strides)
    b.output(s * 3.0)
    g = b.build()
    xv = rng.standard_normal((5, 7)).astype(np.float32)
    prog = _run_both(g, [xv])
    np.testing.assert_allclose(prog(xv)[0], np.exp(xv)[tuple(slice(*t) for t in zip(begin, end, strides))] * 3,
                               **TOL)


@pytest.mark.parametrize("itype", ["int32", "int64"])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_gather_runtime_indices_any_axis_negative_wraps(itype, axis):
    rng = np.random.default_rng(2)
    xs = (4, 5, 6)
    n = xs[axis]
    idx = np.array([[0, -1, n - 1], [-n, 1, 2]], dtype=itype)
    b = GraphBuilder("ga")
    x, i = b.input("x", xs), b.input("i", idx.shape, itype)
    out = [*xs[:axis], *idx.shape, *xs[axis + 1:]]
    b.output(b.op("Gather", [b.neg(x), i], out, "float32", axis=axis) + 1.0)
    g = b.build()
    xv = rng.standard_normal(xs).astype(np.float32)
    prog = _run_both(g, [xv, idx])
    np.testing.assert_allclose(prog(xv, idx)[0], np.take(-xv, idx, axis=axis) + 1, **TOL)
    assert len(prog.kernels) == 1


def test_gather_out_of_range_index_clamps_in_the_kernel():
    """Indices outside [-n, n) are the caller's error (the reference raises); the kernel never
    reads outside the table: it returns the nearest row (run fenced: a stray read would fault)."""
    b = GraphBuilder("ga_oob")
    x, i = b.input("x", (5, 3)), b.input("i", (4,), "int64")
    b.output(b.op("Gather", [x, i], (4, 3), "float32", axis=0))
    g = b.build()
    prog = akgpy.fuse(g)
    xv = np.arange(15, dtype=np.float32).reshape(5, 3)
    idx = np.array([5, 1 << 40, -6, -(1 << 40)], dtype=np.int64)
    got = akgpy.testing.run_fenced(prog, [xv, idx])[0]
    np.testing.assert_array_equal(got, xv[[4, 4, 0, 0]])
    with pytest.raises(akgpy.errors.ArgumentError, match="out of range"):
        reference.run(g, [xv, idx])


def test_gather_of_a_computed_table_and_computed_indices():
    """The table is produced in the kernel (its read is data dependent): the poly schedule must
    order every write of it before the gather."""
    rng = np.random.default_rng(3)
    b = GraphBuilder("ga_prod")
    x, i = b.input("x", (16, 8)), b.input("i", (6,), "int32")
    t = b.exp(x) * 2.0
    j = i + 1
    b.output(b.op("Gather", [t, j], (6, 8), "float32", axis=0) - t.sum(axis=0))
    g = b.build()
    idx = rng.integers(-16, 15, size=6).astype(np.int32)
    for schedule in ("poly", "plain"):
        _run_both(g, [rng.standard_normal((16, 8)).astype(np.float32), idx], schedule=schedule)


@pytest.mark.parametrize("axis", [0, 1])
def test_gather_elements_onnx_semantics(axis):
    rng = np.random.default_rng(4)
    b = GraphBuilder("ge")
    x, i = b.input("x", (4, 5)), b.input("i", (3, 4), "int64")
    b.output(b.op("GatherElements", [b.exp(x), i], (3, 4), "float32", axis=axis) * 0.5)
    g = b.build()
    n = (4, 5)[axis]
    idx = rng.integers(-n, n, size=(3, 4)).astype(np.int64)
    xv = rng.standard_normal((4, 5)).astype(np.float32)
    prog = _run_both(g, [xv, idx])
    want = np.take_along_axis(np.exp(xv)[:, :4] if axis == 0 else np.exp(xv)[:3], idx % n, axis=axis) * 0.5
    np.testing.assert_allclose(prog(xv, idx)[0], want, **TOL)


def test_poly_model_reads_the_whole_gathered_dim():
    """A gather's table read is data dependent: the model takes all of the gathered dim."""
    from akgpy.poly.model import extract
    from akgpy.te.lower import lower
    b = GraphBuilder("ga_model")
    x, i = b.input("x", (7, 3)), b.input("i", (2,), "int64")
    b.output(b.op("Gather", [x, i], (2, 3), "float32", axis=0))
    lowered = lower(b.build())
    model = extract(lowered.func, lowered.roles)
    (st,) = model.statements
    table = [m for m in akgpy.poly.isl_util.maps_of(st.reads) if m.get_tuple_name(akgpy.poly.isl_util.isl.dim_type.out) == "x"]
    assert len(table) == 1 and not table[0].is_single_valued()
    rng = table[0].range()
    assert rng.dim_min_val(0).to_python() == 0 and rng.dim_max_val(0).to_python() == 6


# -- model graphs: no fallback steps -------------------------------------------------------------

def test_model_graph_has_no_fallback_steps():
    rng = np.random.default_rng(5)
    b = GraphBuilder("m", model=True)
    x, i = b.input("x", (8, 6)), b.input("i", (5,), "int64")
    y = b.op("StridedSlice", [b.exp(x)], (8, 3), "float32", begin=[0, 1], end=[8, 6], strides=[1, 2])
    z = b.op("Concat", [y, y * 2.0], (8, 6), "float32", axis=1)
    w = b.op("Gather", [z + 1.0, i], (5, 6), "float32", axis=0)
    b.output(w * w)
    g = b.build()
    idx = np.array([0, 7, -1, 3, 2], dtype=np.int64)
    prog = _run_both(g, [rng.standard_normal((8, 6)).astype(np.float32), idx])
    assert not prog.fallbacks()
    kinds = [st.group.kind for st in prog.steps]
    assert set(kinds) == {"kernel"}
    in_kernels = {g.ops[k].name for st in prog.steps for k in st.group.ops}
    assert {"StridedSlice", "Concat", "Gather"} <= in_kernels
    assert len(prog.steps) == 1  # injective: all of it one group


# -- bad attributes ------------------------------------------------------------------------------

def _build_one(name, ins, shape, **attrs):
    b = GraphBuilder("bad")
    vals = [b.input(f"in{k}", s, t) for k, (s, t) in enumerate(ins)]
    b.output(b.op(name, vals, shape, "float32", **attrs))
    return b.build()


@pytest.mark.parametrize("name,ins,shape,attrs,err", [
    ("StridedSlice", [((4, 5), "float32")], (4, 5), dict(begin=[0, 0], end=[4, 5], strides=[1, 0]), AttrError),
    ("StridedSlice", [((4, 5), "float32")], (4, 5), dict(begin=[0], end=[4], strides=[1]), AttrError),
    ("Concat", [((4, 5), "float32")] * 2, (8, 5), dict(axis=2), AttrError),
    ("Concat", [((4, 5), "float32"), ((4, 6), "float32")], (8, 5), dict(axis=0), ShapeError),
    ("Gather", [((4, 5), "float32"), ((3,), "int64")], (4, 3), dict(axis=3), AttrError),
    ("Gather", [((4, 5), "float32"), ((3,), "float32")], (3, 5), dict(axis=0), ShapeError),
    ("GatherElements", [((4, 5), "float32"), ((4, 5), "float32")], (4, 5), dict(axis=0), ShapeError),
    ("GatherElements", [((4, 5), "float32"), ((4, 6), "int64")], (4, 6), dict(axis=0), ShapeError),
    ("GatherElements", [((4, 5), "float32"), ((4,), "int64")], (4,), dict(axis=0), ShapeError),
])
def test_bad_attributes_name_the_op(name, ins, shape, attrs, err):
    with pytest.raises(err, match=name) as e:
        _build_one(name, ins, shape, **attrs)
    assert e.value.op is not None and name in e.value.op


# -- ONNX ----------------------------------------------------------------------------------------

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "m", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _against_ort(model, feeds):
    g = akgpy.from_onnx(model)
    prog = akgpy.fuse(g)
    got = prog(*[feeds[n] for n in g.free_inputs])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, feeds)
    assert len(got) == len(want)
    for a, w in zip(got, want):
        assert a.shape == w.shape
        np.testing.assert_allclose(a, w, **TOL)
    assert not prog.fallbacks()
    return g, prog


@pytest.mark.parametrize("opset,how", [(17, "input"), (11, "attr"), (18, "num_outputs"), (17, "equal")])
def test_onnx_split(opset, how):
    x = np.random.default_rng(6).standard_normal((4, 7)).astype(np.float32)
    inits, extra, ins = [], {}, ["x"]
    if how == "input":
        inits, ins = [("sp", np.array([2, 4, 1], np.int64))], ["x", "sp"]
    elif how == "attr":
        extra = {"split": [2, 4, 1]}
    elif how == "num_outputs":
        extra = {"num_outputs": 3}
    outs = ["a", "b", "c"]
    if how == "equal":
        x = x[:, :6].copy()
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Split", ["r", *ins[1:]], outs, axis=1, **extra),
             *[helper.make_node("Mul", [o, o], [o + "2"]) for o in outs]]
    model = _model(nodes, [_vi("x", list(x.shape))], [_vi(o + "2", None) for o in outs], inits, opset)
    g, _ = _against_ort(model, {"x": x})
    assert sum(op.name == "StridedSlice" for op in g.ops) == 3


def test_onnx_split_sizes_that_do_not_sum_are_an_attr_error():
    nodes = [helper.make_node("Split", ["x"], ["a", "b"], axis=0, split=[1, 1])]
    model = _model(nodes, [_vi("x", [3, 2])], [_vi("a", None), _vi("b", None)], opset=11)
    with pytest.raises(AttrError, match="Split"):
        akgpy.from_onnx(model)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_onnx_gather_elements(axis):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((3, 5)).astype(np.float32)
    n = x.shape[axis]
    idx = rng.integers(-n, n, size=(3, 5)).astype(np.int64)
    nodes = [helper.make_node("GatherElements", ["x", "i"], ["y"], axis=axis),
             helper.make_node("Exp", ["y"], ["z"])]
    model = _model(nodes, [_vi("x", [3, 5]), _vi("i", [3, 5], TensorProto.INT64)], [_vi("z", None)])
    g, prog = _against_ort(model, {"x": x, "i": idx})
    assert len(prog.steps) == 1


def test_onnx_concat_slice_gather_in_kernels():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((6, 8)).astype(np.float32)
    inits = [("st", np.array([1, -1], np.int64)), ("en", np.array([6, -9], np.int64)),
             ("ax", np.array([0, 1], np.int64)), ("sp", np.array([2, -2], np.int64)),
             ("gi", np.array([[0, -1], [2, 1]], np.int64))]
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"]),
             helper.make_node("Slice", ["s", "st", "en", "ax", "sp"], ["sl"]),      # [3, 4]
             helper.make_node("Concat", ["sl", "sl"], ["cc"], axis=0),              # [6, 4]
             helper.make_node("Gather", ["cc", "gi"], ["ga"], axis=1),              # [6, 2, 2]
             helper.make_node("Gather", ["x", "ri"], ["gr"], axis=0),               # runtime indices [3, 8]
             helper.make_node("Add", ["ga", "ga"], ["y"])]
    model = _model(nodes, [_vi("x", [6, 8]), _vi("ri", [3], TensorProto.INT32)], [_vi("y", None), _vi("gr", None)],
                   inits)
    g, prog = _against_ort(model, {"x": x, "ri": np.array([5, -6, 0], np.int32)})
    names = {g.ops[k].name for st in prog.steps for k in st.group.ops}
    assert {"StridedSlice", "Concat", "Gather"} <= names
