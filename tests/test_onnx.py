"""ONNX frontend: the three zoo models and an op-coverage model against onnxruntime, and bad input."""
from __future__ import annotations

import math

import numpy as np
import pytest

import akgpy
from akgpy import zoo
from akgpy.errors import FormatError, ShapeError, UnsupportedOpError

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def ort_run(model, inputs):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)


def check_against_ort(model, inputs, rtol=1e-4, **options):
    g = akgpy.from_onnx(model)
    prog = akgpy.fuse(g, **options)
    got = prog(*[inputs[n] for n in g.free_inputs])
    want = ort_run(model, inputs)
    for a, b in zip(got, want):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol)
    ref = akgpy.reference.run(g, [inputs[n] for n in g.free_inputs])
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol)
    return g, prog


def test_bert_encoder_layer_matches_onnxruntime():
    model, inputs = zoo.bert_layer()
    g, prog = check_against_ort(model, inputs)
    ops = {op.name for op in g.ops}
    assert "Erf" in ops and {"ReduceSum", "ReduceMax", "Rsqrt"} <= ops  # LayerNorm/Softmax decomposed
    # the Shape->Slice->Concat subgraphs folded away: every Reshape got a static shape
    assert not ops & {"Concat", "StridedSlice", "Gather"}
    groups = [[g.ops[i].name for i in st.group.ops] for st in prog.steps]
    assert ["ReduceMax", "Sub", "Exp", "ReduceSum", "RealDiv"] in groups  # softmax: one kernel
    lns = [grp for grp in groups if grp.count("ReduceSum") == 2]
    assert len(lns) == 2 and all("Rsqrt" in grp for grp in lns)  # each LayerNorm: one kernel
    assert prog.launches == 11 and not prog.fallbacks()


def test_resnet_bottleneck_matches_onnxruntime():
    model, inputs = zoo.resnet_bottleneck(channels=64, width=16, size=14)
    g, prog = check_against_ort(model, inputs)
    # the 3x3 conv runs as NHWC Conv2D, the 1x1 convs as NHWC GEMMs; graph/layout.py leaves only
    # the Transposes at the input and the output (prog.graph: the graph after that pass)
    assert sum(op.name == "Conv2D" for op in g.ops) == 1 and sum(op.name == "MatMul" for op in g.ops) == 2
    assert sum(op.name == "Transpose" for op in prog.graph.ops) == 2
    kinds = [st.group.pattern for st in prog.steps]
    assert kinds.count("contraction") == 3  # BN + ReLU (+ residual) fused as conv epilogues
    convs = [st for st in prog.steps if st.group.pattern == "contraction"]
    assert all(any(prog.graph.ops[i].name == "Maximum" for i in st.group.ops) for st in convs[:2])


def test_mlp_matches_onnxruntime():
    model, inputs = zoo.mlp(batch=32, sizes=(64, 128, 96, 10))
    g, prog = check_against_ort(model, inputs)
    assert prog.launches == 4  # three Gemm+activation kernels and the softmax
    assert "Erf" in {op.name for op in g.ops}  # Gelu expanded


def _model(nodes, inputs, outputs, inits=(), opset=20, ir_version=9):
    g = helper.make_graph(nodes, "t", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = ir_version
    return m


def _vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def test_op_coverage_model_matches_onnxruntime():
    rng = np.random.default_rng(3)
    f32 = np.float32
    inits = [numpy_helper.from_array(a, n) for n, a in [
        ("w", rng.standard_normal((8, 16)).astype(f32)), ("c", rng.standard_normal((16,)).astype(f32)),
        ("idx", np.array([2, 0, 1], np.int64)), ("ax1", np.array([1], np.int64)),
        ("starts", np.array([1], np.int64)), ("ends", np.array([9], np.int64)), ("steps", np.array([2], np.int64)),
        ("two", np.array(2.0, f32)), ("half", np.array(0.5, f32)),
        ("cw", (rng.standard_normal((4, 3, 3, 3)) * 0.3).astype(f32)), ("cb", rng.standard_normal(4).astype(f32)),
        ("bn_s", rng.random(4).astype(f32) + 0.5), ("bn_b", rng.standard_normal(4).astype(f32)),
        ("bn_m", rng.standard_normal(4).astype(f32)), ("bn_v", rng.random(4).astype(f32) + 0.5),
        ("ln_s", rng.standard_normal(5).astype(f32)), ("ln_b", rng.standard_normal(5).astype(f32)),
    ]]
    N = helper.make_node
    nodes = [
        N("Gemm", ["x", "w", "c"], ["g"], transA=1, alpha=0.5, beta=2.0),          # x: [8, 6] -> [6, 16]
        N("Sigmoid", ["g"], ["s"]), N("Tanh", ["g"], ["t"]), N("Pow", ["s", "two"], ["p"]),
        N("Sqrt", ["s"], ["q"]), N("Greater", ["t", "half"], ["cond"]), N("Where", ["cond", "p", "q"], ["wh"]),
        N("Gelu", ["wh"], ["ge"], approximate="tanh"), N("Cast", ["ge"], ["c64"], to=TensorProto.DOUBLE),
        N("Cast", ["c64"], ["c32"], to=TensorProto.FLOAT),
        N("ReduceMean", ["c32", "ax1"], ["rm"], keepdims=1), N("ReduceMax", ["c32"], ["rx"], keepdims=0),
        N("ReduceSum", ["c32", "ax1"], ["rs"], keepdims=0), N("Unsqueeze", ["rs", "ax1"], ["us"]),
        N("Sub", ["c32", "rm"], ["d"]), N("Div", ["d", "us"], ["dd"]), N("Softmax", ["dd"], ["sm"], axis=0),
        N("Slice", ["sm", "starts", "ends", "ax1", "steps"], ["sl"]),              # [6, 4]
        N("Gather", ["sl", "idx"], ["ga"], axis=0),                               # [3, 4]
        N("Concat", ["ga", "ga"], ["cc"], axis=0), N("Transpose", ["cc"], ["tr"], perm=[1, 0]),
        N("Squeeze", ["us", "ax1"], ["sq"]), N("Relu", ["d"], ["re"]),
        N("Conv", ["img", "cw", "cb"], ["cv"], strides=[2, 2], auto_pad="SAME_UPPER"),
        N("BatchNormalization", ["cv", "bn_s", "bn_b", "bn_m", "bn_v"], ["bn"]),
        N("LayerNormalization", ["bn", "ln_s", "ln_b"], ["ln"], axis=-1, epsilon=1e-3),
    ]
    inputs = [_vi("x", [8, 6]), _vi("img", [1, 3, 9, 9])]
    outputs = [_vi("tr", None), _vi("rx", None), _vi("sq", None), _vi("re", None), _vi("ln", None)]
    model = _model(nodes, inputs, outputs, inits)
    feeds = {"x": rng.standard_normal((8, 6)).astype(f32), "img": rng.standard_normal((1, 3, 9, 9)).astype(f32)}
    g, prog = check_against_ort(model, feeds, rtol=1e-3)
    assert not prog.fallbacks()  # StridedSlice, Gather and Concat run inside kernels


def test_dynamic_shape_must_be_bound():
    node = helper.make_node("Relu", ["x"], ["y"])
    model = _model([node], [_vi("x", ["batch", 16])], [_vi("y", ["batch", 16])])
    with pytest.raises(ShapeError, match=r"dynamic dimension.*'batch'.*shapes="):
        akgpy.from_onnx(model)
    g = akgpy.from_onnx(model, shapes={"x": (4, 16)})
    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(4, 16)
    np.testing.assert_array_equal(akgpy.fuse(g)(x)[0], np.maximum(x, 0))
    with pytest.raises(ShapeError, match="declares"):
        akgpy.from_onnx(model, shapes={"x": (4, 15)})
    with pytest.raises(ShapeError, match="not a model input"):
        akgpy.from_onnx(model, shapes={"z": (4, 16)})


def test_unsupported_op_names_op_and_node():
    node = helper.make_node("LSTM", ["x", "w", "r"], ["y"], name="my_lstm", hidden_size=4)
    model = _model([node], [_vi("x", [1, 2, 3]), _vi("w", [1, 16, 3]), _vi("r", [1, 16, 4])], [_vi("y", None)])
    with pytest.raises(UnsupportedOpError, match="LSTM") as e:
        akgpy.from_onnx(model)
    assert "my_lstm" in str(e.value)


def test_unsupported_attribute_names_the_node():
    w = numpy_helper.from_array(np.ones((4, 1, 3, 3), np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="dw", group=4, dilations=[2, 2])
    model = _model([node], [_vi("x", [1, 4, 8, 8])], [_vi("y", None)], [w])
    with pytest.raises(UnsupportedOpError, match="dilated Conv") as e:
        akgpy.from_onnx(model)
    assert "'dw'" in str(e.value)


@pytest.mark.parametrize("bad", [b"\x00garbage not protobuf \xff" * 3, b"", "/nonexistent/model.onnx", 42])
def test_malformed_onnx_is_a_format_error(bad):
    with pytest.raises(FormatError):
        akgpy.from_onnx(bad)


def test_model_file_path_round_trip(tmp_path):
    model, inputs = zoo.mlp(batch=4, sizes=(8, 16, 16, 4))
    path = tmp_path / "mlp.onnx"
    onnx.save(model, str(path))
    g = akgpy.from_onnx(str(path))
    assert g.kind == "model" and set(g.free_inputs) == {"x"} and len(g.bound) == 6
    out = akgpy.fuse(g)(inputs["x"])[0]
    np.testing.assert_allclose(out, ort_run(model, inputs)[0], rtol=1e-4, atol=1e-4)
    assert math.isclose(float(out.sum()), 4.0, rel_tol=1e-5)  # softmax rows


def test_shape_subgraph_folds_away():
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape, as exporters write a flatten: every
    node of the chain is evaluated at import, the Reshape gets a static shape."""
    N = helper.make_node
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([0], np.int64), "ax0"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    nodes = [N("Shape", ["x"], ["s"]), N("Gather", ["s", "zero"], ["b"], axis=0),
             N("Unsqueeze", ["b", "ax0"], ["b1"]), N("Concat", ["b1", "minus1"], ["shape"], axis=0),
             N("Identity", ["shape"], ["shape2"]), N("Reshape", ["x", "shape2"], ["flat"]),
             N("Relu", ["flat"], ["y"])]
    model = _model(nodes, [_vi("x", [2, 3, 4])], [_vi("y", [2, 12])], inits)
    g = akgpy.from_onnx(model)
    assert [op.name for op in g.ops] == ["Reshape", "Maximum"]
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_array_equal(akgpy.fuse(g)(x)[0], ort_run(model, {"x": x})[0])


@pytest.mark.parametrize("axis", [-3, -2, -1, 0, 1, 2, 3])
def test_flatten_takes_every_axis_onnx_allows(axis):
    """A negative axis counts from the rank (Flatten(axis=-1) of [4, 6, 5] is [24, 5]; it was
    read against rank + 1 and gave [120, 1])."""
    m = _model([helper.make_node("Flatten", ["x"], ["y"], axis=axis)], [_vi("x", [4, 6, 5])], [_vi("y", None)])
    x = np.random.default_rng(0).standard_normal((4, 6, 5)).astype(np.float32)
    check_against_ort(m, {"x": x})


@pytest.mark.parametrize("axis", [-4, 4])
def test_flatten_refuses_an_axis_out_of_range(axis):
    m = _model([helper.make_node("Flatten", ["x"], ["y"], axis=axis)], [_vi("x", [4, 6, 5])], [_vi("y", None)])
    with pytest.raises(akgpy.AkgpyError, match="axis"):
        akgpy.from_onnx(m)
