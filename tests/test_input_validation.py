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


# -- defects 10 and 11: the ONNX importer ----------------------------------------------------------

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


from .test_onnx import _model as _onnx_model, _vi  # noqa: E402


def _model(nodes, inputs, outputs, inits=(), opset=13):
    return _onnx_model(nodes, inputs, outputs, inits, opset, ir_version=8)


def _i64(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


def _ort(model, feeds):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _one_node(op, inputs, shape=(2, 3), inits=(), **attrs):
    node = helper.make_node(op, inputs, ["y"], name="n0", **attrs)
    return _model([node], [_vi("x", list(shape))], [_vi("y", None)], inits)


ONNX_BAD = {
    "axis_is_a_string": (lambda: _one_node("Softmax", ["x"], axis="1"), AttrError),
    "axis_is_a_float": (lambda: _one_node("Softmax", ["x"], axis=1.0), AttrError),
    "unknown_attribute": (lambda: _one_node("Relu", ["x"], alpha=1), AttrError),
    "dropped_input": (lambda: _one_node("Add", ["x"]), FormatError),
    "slice_step_zero": (lambda: _one_node("Slice", ["x", "s", "e", "a", "st"], (4, 4),
                                          [_i64("s", [0]), _i64("e", [4]), _i64("a", [0]), _i64("st", [0])]),
                        AttrError),
    "slice_lengths_differ": (lambda: _one_node("Slice", ["x", "s", "e"], (4, 4),
                                               [_i64("s", [0, 1]), _i64("e", [4])]), AttrError),
    "slice_axis_twice": (lambda: _one_node("Slice", ["x", "s", "e", "a"], (4, 4),
                                           [_i64("s", [0, 1]), _i64("e", [4, 3]), _i64("a", [0, -2])]), AttrError),
    "expand_impossible": (lambda: _one_node("Expand", ["x", "s"], (4, 3), [_i64("s", [4, 5])]), ShapeError),
    "expand_2d_shape": (lambda: _one_node("Expand", ["x", "s"], (4, 3), [_i64("s", [[4, 3]])]), ShapeError),
    "unsqueeze_axis_twice": (lambda: _one_node("Unsqueeze", ["x", "a"], (4, 3), [_i64("a", [0, 0])]), AttrError),
    "squeeze_non_unit_dim": (lambda: _one_node("Squeeze", ["x", "a"], (4, 3), [_i64("a", [0])]), ShapeError),
    "reshape_zero_beyond_rank": (lambda: _one_node("Reshape", ["x", "s"], (4, 3), [_i64("s", [12, 0, 0])]),
                                 ShapeError),
    "flag_out_of_range": (lambda: _one_node("ReduceSum", ["x"], keepdims=2), AttrError),
    "gelu_unknown_approximation": (lambda: _model([helper.make_node("Gelu", ["x"], ["y"], approximate="fast")],
                                                  [_vi("x", [2, 3])], [_vi("y", None)], opset=20), AttrError),
    "gather_float_indices": (lambda: _one_node("Gather", ["x", "i"], (4, 3),
                                               [numpy_helper.from_array(np.array([1.7], np.float32), "i")]),
                             ShapeError),
    "duplicate_output_name": (lambda: _model([helper.make_node("Relu", ["x"], ["y"], name="first"),
                                              helper.make_node("Neg", ["x"], ["y"], name="n0")],
                                             [_vi("x", [2, 3])], [_vi("y", None)]), FormatError),
    "output_never_produced": (lambda: _model([helper.make_node("Relu", ["x"], ["y"], name="n0")],
                                             [_vi("x", [2, 3])], [_vi("z", None)]), FormatError),
}


@pytest.mark.parametrize("case", sorted(ONNX_BAD))
def test_onnx_bad_node_is_an_akgpy_error_naming_the_node(case):
    make, err = ONNX_BAD[case]
    with pytest.raises(err) as e:
        akgpy.from_onnx(make())
    assert ("'n0'" in str(e.value)) or e.value.tensor in ("y", "z")


def _truncated(tensor_bytes: int):
    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
    w.raw_data = w.raw_data[:tensor_bytes]
    return _model([helper.make_node("Add", ["x", "w"], ["y"])], [_vi("x", [4, 3])], [_vi("y", None)], [w])


@pytest.mark.parametrize("make", [lambda: _truncated(20), lambda: _truncated(0)])
def test_onnx_truncated_initializer_is_a_format_error(make):
    with pytest.raises(FormatError) as e:
        akgpy.from_onnx(make())
    assert e.value.tensor == "w"


def test_onnx_negative_initializer_dim_is_a_format_error():
    m = _truncated(48)
    m.graph.initializer[0].dims[1] = -1  # numpy's reshape would read it as "the rest"
    with pytest.raises(FormatError, match="negative") as e:
        akgpy.from_onnx(m)
    assert e.value.tensor == "w"


@pytest.mark.parametrize("shapes", [{"x": "ab"}, {"x": (2.5, 3)}, {"x": (True, 3)}, {"x": (-2, 3)}, [1, 2],
                                    {3: (2, 3)}, {"x": 6}])
def test_onnx_bad_shapes_argument_is_a_shape_error(shapes):
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", ["b", 3])], [_vi("y", None)])
    with pytest.raises(ShapeError):
        akgpy.from_onnx(m, shapes=shapes)


def test_onnx_accepts_numpy_integer_shapes():
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", ["b", 3])], [_vi("y", None)])
    g = akgpy.from_onnx(m, shapes={"x": (np.int64(2), 3)})
    assert g.tensors[g.free_inputs[0]].shape == (2, 3)


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum", "ReduceMax"])
@pytest.mark.parametrize("axes", [[1, 1], [1, -2], [2, 0, -1]])
def test_onnx_reduce_axis_named_twice_matches_onnxruntime(op, axes):
    """ReduceMean(axes=[1, 1]) divided by 16 * 16 where onnxruntime divides by 16: the axes are a set."""
    if op == "ReduceSum":  # axes became an input at opset 13
        node, inits = helper.make_node(op, ["x", "a"], ["y"], keepdims=0), [_i64("a", axes)]
    else:
        node, inits = helper.make_node(op, ["x"], ["y"], axes=axes, keepdims=0), []
    m = _model([node], [_vi("x", [2, 16, 3])], [_vi("y", None)], inits)
    x = np.random.default_rng(0).random((2, 16, 3)).astype(np.float32)
    want = _ort(m, {"x": x})[0]
    g = akgpy.from_onnx(m)
    got = akgpy.fuse(g)(x)[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _corpus_doc(rel):
    return json.loads((CORPUS / rel).read_text())


def _set_attr(doc, op_index, name, value):
    attrs = doc["op_desc"][op_index]["attr"]
    for a in attrs:
        if a["name"] == name:
            a["value"] = value
            return doc
    attrs.append({"data_type": "bool", "name": name, "value": value})
    return doc


@pytest.mark.parametrize("rel,index,name", [
    ("networks/resnet101/Fused_MatMul_split_7001529160777602543.info", 0, "transpose_a"),
    ("networks/resnet101/Fused_MatMul_split_7001529160777602543.info", 0, "transpose_b"),
    ("networks/alexnet/Fused_AssignAdd_11514799015909298180.info", 1, "fake_output"),
])
@pytest.mark.parametrize("value", ["false", 2, 1.0, None, [True]])
def test_composite_bool_attrs_are_not_read_by_truthiness(rel, index, name, value):
    """transpose_b "false" was read as True (bool("false")), fake_output "x" as True."""
    with pytest.raises(AttrError, match=name) as e:
        akgpy.load_composite(_set_attr(_corpus_doc(rel), index, name, value))
    assert e.value.op is not None


@pytest.mark.parametrize("value", ["0", None, True, [0.0]])
def test_composite_pad_value_must_be_a_number(value):
    doc = _set_attr(_corpus_doc("networks/yolov3_darknet53/Fused_PadAkg_split_1335691012697875742.info"), 0,
                    "pad_val", value)
    with pytest.raises(AttrError, match="pad_val"):
        akgpy.load_composite(doc)


def test_model_without_kernels_refuses_a_foreign_target():
    """A model whose one MatMul runs on BLAS builds no kernel: the target was never looked at."""
    b = GraphBuilder(model=True)
    x, w = b.input("x", (4, 8)), b.input("w", (8, 4))
    b.output(b.matmul(x, w))
    g = b.build()
    for target in ("cuda", {"kind": "cuda"}):
        with pytest.raises(CompileError, match="target"):
            akgpy.fuse(g, target=target, contraction="library")


@pytest.mark.parametrize("dtype,value", [("int32", 1.5), ("int32", 2 ** 40), ("uint8", -1), ("int8", 128),
                                         ("bool", 2), ("int32", "1")])
def test_constant_must_be_a_value_of_its_dtype(dtype, value):
    """int32 + 2**40 failed in TE construction (a CompileError for a graph that validated); int32
    + 1.5 was silently read as + 1."""
    b = GraphBuilder()
    x = b.input("x", (2, 3), dtype)
    with pytest.raises(ShapeError) as e:
        b.output(x + value)
        b.build()
    assert e.value.op is None or e.value.op.startswith("Add")


def test_composite_constant_must_be_a_value_of_its_dtype():
    doc = _corpus_doc("networks/alexnet/Fused_AssignAdd_11514799015909298180.info")  # int32 Add
    desc = doc["op_desc"][0]["input_desc"][1][0]
    desc["value"] = 0.5
    with pytest.raises(ShapeError, match="not representable as int32") as e:
        akgpy.load_composite(doc)
    assert e.value.op.startswith("Add") and e.value.tensor.startswith(desc["tensor_name"])


def test_integral_constants_and_numpy_dtypes_are_accepted():
    b = GraphBuilder()
    x = b.input("x", (2, 3), np.int32)
    y = b.input("y", (2, 3), np.dtype("float16"))
    b.output(x + 2.0, (x + np.int64(-3)).astype(np.float32), y * 2)
    g = b.build()
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    h = np.ones((2, 3), np.float16)
    got = akgpy.reference.run(g, [a, h])
    np.testing.assert_array_equal(got[0], a + 2)
    assert got[1].dtype == np.float32 and got[2].dtype == np.float16


def test_graph_name_must_be_a_string():
    b = GraphBuilder(123)
    x = b.input("x", (2, 3))
    b.output(x + 1.0)
    with pytest.raises(FormatError, match="name"):
        b.build()


def test_onnx_name_that_is_not_utf8_is_a_format_error():
    """protobuf returns such a string field as bytes: a byte flip made a name an iterable of ints."""
    m = _model([helper.make_node("Relu", ["x"], ["yQ"]), helper.make_node("Neg", ["yQ"], ["z"])],
               [_vi("x", [2, 3])], [_vi("z", None)])
    data = m.SerializeToString().replace(b"yQ", b"y\xff")
    with pytest.raises(FormatError, match="UTF-8"):
        akgpy.from_onnx(data)


def test_onnx_float_reduction_axes_are_refused():
    """A float axes tensor was truncated by int(): [1.7] reduced axis 1."""
    axes = numpy_helper.from_array(np.array([1.7], np.float32), "a")
    m = _model([helper.make_node("ReduceSum", ["x", "a"], ["y"], name="n0")], [_vi("x", [2, 3])],
               [_vi("y", None)], [axes])
    with pytest.raises(ShapeError, match="integer") as e:
        akgpy.from_onnx(m)
    assert "'n0'" in str(e.value)


@pytest.mark.parametrize("dims", [[-2, 3], [2, 0]])
def test_onnx_input_dims_must_be_positive(dims):
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", dims)], [_vi("y", None)])
    with pytest.raises(ShapeError):
        akgpy.from_onnx(m)
