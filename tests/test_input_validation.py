"""What users pass to the frontends (GraphBuilder, composite JSON, ONNX) and to `fuse`'s target is
checked: an invalid value is an akgpy error naming the op and tensor (or ONNX node), never a
bare Python exception and never silently read as something else (issue 48, defects 10-14)."""
from __future__ import annotations

import json

import numpy as np
import pytest

import akgpy
from akgpy import GraphBuilder
from akgpy.errors import AttrError, CompileError, FormatError, ShapeError
from akgpy.graph.ir import Graph, Op, Tensor

from .conftest import CORPUS

# -- defect 12: axes and dims in the builder, composite JSON and the Graph itself -----------------


@pytest.mark.parametrize("axis", [7, -3, (0, 7), (1, 1), (1, -1), 1.0, True, "1", (), [0.0]])
@pytest.mark.parametrize("method", ["sum", "max"])
def test_builder_reduce_refuses_invalid_axis(axis, method):
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    with pytest.raises(AttrError) as e:
        getattr(x, method)(axis=axis)
    assert e.value.op in ("ReduceSum", "ReduceMax") and e.value.tensor == "x"


@pytest.mark.parametrize("axis,want", [(-1, (1,)), (np.int64(0), (0,)), ((-2, 1), (0, 1)), (None, (0, 1))])
def test_builder_reduce_reads_axes_as_numpy(axis, want):
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    y = x.sum(axis=axis, keepdims=True)
    b.output(y)
    g = b.build()
    assert g.ops[0].attrs["axis"] == want
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(akgpy.reference.run(g, [a])[0], a.sum(axis=want, keepdims=True))


@pytest.mark.parametrize("shape", [(2, 4.7), (2, True), (2, -1), (2, None), 5, "23", {2: 3}, (2, "3")])
def test_builder_refuses_invalid_dims(shape):
    b = GraphBuilder()
    with pytest.raises(ShapeError) as e:
        b.input("x", shape)
    assert e.value.tensor == "x"


def test_builder_accepts_numpy_integer_dims():
    b = GraphBuilder()
    x = b.input("x", (np.int64(2), np.int32(3)))
    y = b.input("y", np.array([2, 3]))
    b.output(x + y)
    g = b.build()
    assert g.tensors["x"].shape == (2, 3) and all(type(s) is int for s in g.tensors["x"].shape)


@pytest.mark.parametrize("call", [
    lambda b, x: x.reshape(4.5, -1), lambda b, x: x.reshape(-1, -1), lambda b, x: x.reshape(4, -1),
    lambda b, x: x.reshape(2, True, 3), lambda b, x: b.broadcast_to(x, (2.5, 2, 3)),
    lambda b, x: b.broadcast_to(x, 6), lambda b, x: b.op("Neg", [x], (2, 3.0), "float32"),
])
def test_builder_shape_arguments_must_be_ints(call):
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    with pytest.raises(ShapeError) as e:
        call(b, x)
    assert e.value.op is not None or e.value.tensor is not None


@pytest.mark.parametrize("perm", [(0, 7), (0, 0), (0,), (0, 1, 2), (0.0, 1), "01"])
def test_builder_transpose_refuses_non_permutations(perm):
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    with pytest.raises(AttrError) as e:
        b.transpose(x, perm)
    assert e.value.op == "Transpose" and e.value.tensor == "x"


def test_builder_transpose_takes_negative_axes_as_numpy():
    b = GraphBuilder()
    x = b.input("x", (2, 3, 4))
    b.output(x.transpose(-1, 0, -2))
    g = b.build()
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(akgpy.reference.run(g, [a])[0], a.transpose(-1, 0, -2))


@pytest.mark.parametrize("call", [
    lambda b, x, v: b.matmul(v, x),                 # rank 1
    lambda b, x, v: b.add(x, "1.5"), lambda b, x, v: b.mul(x, [1, 2]), lambda b, x, v: b.exp(3.0),
    lambda b, x, v: b.cast([1, 2], "float32"), lambda b, x, v: b.addn(),
    lambda b, x, v: b.select(x > 0, 1.0, 2.0), lambda b, x, v: b.output("x"),
])
def test_builder_bad_operands_are_akgpy_errors(call):
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    v = b.input("v", (3,))
    with pytest.raises(ShapeError):
        call(b, x, v)


def _reduce_doc(axis):
    doc = json.loads((CORPUS / "networks/bert_base/Fused_ReduceSum_split_10163980091148009539.info").read_text())
    for a in doc["op_desc"][0]["attr"]:
        if a["name"] == "axis":
            a["value"] = axis
    return doc


@pytest.mark.parametrize("axis", [[2], [-3], [1, 2], [1.0], [True], True, "1", 1.5, None])
def test_composite_reduce_refuses_invalid_axes(axis):
    with pytest.raises(AttrError) as e:
        akgpy.load_composite(_reduce_doc(axis))
    assert e.value.op.startswith("ReduceSum") and e.value.tensor is not None


def test_composite_reduce_reads_an_axis_named_twice_once():
    """AKG's reading (and onnxruntime's): [1, -1] on a rank-2 tensor reduces axis 1, once."""
    x = np.arange(32, dtype=np.float32).reshape(16, 2)
    for axis in ([1], [-1], 1, [1, 1], [1, -1]):
        g = akgpy.load_composite(_reduce_doc(axis))
        np.testing.assert_array_equal(akgpy.reference.run(g, [x])[0], x.sum(axis=1, keepdims=True))


@pytest.mark.parametrize("axis", [[0], [0, 1], True, 1.0, 2])
def test_single_axis_attrs_refuse_lists_and_non_ints(axis):
    b = GraphBuilder(model=True)
    x = b.input("x", (2, 3))
    b.output(b.op("Concat", [x, x], (4, 3), "float32", axis=axis))
    with pytest.raises(AttrError) as e:
        b.build()
    assert e.value.op.startswith("Concat")


@pytest.mark.parametrize("shape", [(True, 3), (2.0, 3), [2, 3]])
def test_graph_refuses_non_int_dims(shape):
    with pytest.raises(ShapeError) as e:
        Graph("g", {"x": Tensor("x", shape, "float32"), "y": Tensor("y", (2, 3), "float32")}, ("x",), ("y",),
              (Op("Neg", ("x",), ("y",)),))
    assert e.value.tensor == "x"


# -- defect 13: contractions whose numpy result the kernel does not compute ----------------------

@pytest.mark.parametrize("da,db,dst", [("bool", "bool", "float32"), ("bool", "bool", "bool"),
                                       ("float32", "float32", "int32"), ("float16", "float16", "int8"),
                                       ("float32", "float32", "bool"), ("int32", "int32", "bool")])
def test_matmul_dtypes_kernel_and_numpy_disagree_on_are_refused(da, db, dst):
    b = GraphBuilder()
    x, y = b.input("a", (2, 3), da), b.input("b", (3, 2), db)
    b.output(b.matmul(x, y, dst_type=dst))
    with pytest.raises(ShapeError, match="contraction") as e:
        b.build()
    assert e.value.op.startswith("MatMul") and e.value.tensor == "b"


def test_conv2d_of_bools_is_refused():
    b = GraphBuilder()
    x, w = b.input("x", (1, 4, 4, 2), "bool"), b.input("w", (3, 2, 2, 2), "bool")
    b.output(b.op("Conv2D", [x, w], (1, 3, 3, 3), "float32", stride=[1, 1, 1, 1], dst_type="float32"))
    with pytest.raises(ShapeError, match="contraction"):
        b.build()


@pytest.mark.parametrize("da,db,dst", [("bool", "float32", "float32"), ("int32", "int32", "int32"),
                                       ("int32", "int32", "float32"), ("float16", "float16", "float32")])
def test_matmul_dtypes_that_agree_compile_and_match(da, db, dst):
    rng = np.random.default_rng(1)
    b = GraphBuilder()
    x, y = b.input("a", (4, 5), da), b.input("b", (5, 3), db)
    b.output(b.matmul(x, y, dst_type=dst))
    g = b.build()
    a = (rng.random((4, 5)) * 4).astype(da)
    w = (rng.random((5, 3)) * 4).astype(db)
    got = akgpy.fuse(g)(a, w)[0]
    np.testing.assert_allclose(got, akgpy.reference.run(g, [a, w])[0], rtol=1e-3, atol=1e-3)


# -- defect 14: targets akgpy cannot build and run here ------------------------------------------

def _small_graph():
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    b.output(x + 1.0)
    return b.build()


def _bad_targets():
    import tvm
    return [{"kind": "cuda", "arch": "sm_90"}, tvm.target.Target("cuda"), tvm.target.Target("c"),
            {"kind": "llvm", "mtriple": "aarch64-linux-gnu"}, {"bogus": 1}, {"kind": 3}, "cuda",
            "llvm -mcpu=skylake", ["llvm"], 42, b"llvm", object(), np.array(["llvm"])]


@pytest.mark.parametrize("k", range(13))
def test_fuse_refuses_targets_it_cannot_build(k):
    target = _bad_targets()[k]
    with pytest.raises(CompileError, match="target"):
        akgpy.fuse(_small_graph(), target=target)


def test_fuse_llvm_targets_in_every_form():
    import tvm
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for target in (None, "llvm", "cpu", "host", {"kind": "llvm"}, tvm.target.Target("llvm")):
        np.testing.assert_array_equal(akgpy.fuse(_small_graph(), target=target)(x)[0], x + 1)
