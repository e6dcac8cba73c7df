"""Real ONNX exports of model families (akgpy/zoo_torch.py) against onnxruntime: HF BERT, GPT-2,
ViT and T5 encoders and ResNet-/MobileNetV2-style CNNs, from the TorchScript exporter (opset 17)
and the dynamo exporter (opset 18), every op compiled (no numpy fallback); and a second input
shape of a dynamic-axes export."""
from __future__ import annotations

import numpy as np
import pytest

import akgpy

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("onnxscript")  # the dynamo exporter
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

from akgpy import zoo_torch  # noqa: E402

SEQUENCE = ("bert", "gpt2", "t5_encoder")
FAMILIES = (*SEQUENCE, "vit", "resnet", "mobilenet_v2")
# (batch, sequence length or image side): the exported shape, and a second one bound to a
# dynamic-axes export (ViT's position embeddings fix its image side)
FIRST = {f: (2, 16) if f in SEQUENCE else (2, 32) for f in FAMILIES}
SECOND = {**{f: (3, 8) for f in SEQUENCE}, "vit": (3, 32), "resnet": (1, 40), "mobilenet_v2": (1, 40)}
TOL = 1e-4  # float32 throughout


def run_ort(model: bytes, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)


def compile_and_check(model: bytes, inputs: dict[str, np.ndarray], shapes=None):
    g = akgpy.from_onnx(model, shapes=shapes)
    prog = akgpy.fuse(g)
    got = prog(*[inputs[n] for n in g.free_inputs])
    want = run_ort(model, inputs)
    assert len(got) == len(want)
    for a, w in zip(got, want):
        assert a.shape == w.shape and a.dtype == w.dtype
        np.testing.assert_allclose(a, w, rtol=TOL, atol=TOL)
    return g, prog


@pytest.fixture(scope="module")
def exports():
    """One export per (family, exporter, dynamic), made on first use and shared."""
    cache = {}

    def get(family: str, exporter: str, dynamic: bool = False):
        key = (family, exporter, dynamic)
        if key not in cache:
            cache[key] = zoo_torch.exported(family, exporter, *FIRST[family], dynamic=dynamic)
        return cache[key]
    return get


@pytest.mark.parametrize("exporter", list(zoo_torch.EXPORTERS))
@pytest.mark.parametrize("family", FAMILIES)
def test_export_matches_onnxruntime(exports, family, exporter):
    model, inputs = exports(family, exporter)
    opset = next(o.version for o in onnx.load_from_string(model).opset_import if o.domain in ("", "ai.onnx"))
    assert opset == zoo_torch.EXPORTERS[exporter]
    g, prog = compile_and_check(model, inputs)
    assert prog.fallbacks() == []
    assert not any(st.group.kind == "fallback" for st in prog.steps)
    if "attention_mask" in inputs:  # the mask is read, not folded away: padding changes the output
        masked = dict(inputs, attention_mask=np.ones_like(inputs["attention_mask"]))
        assert not np.allclose(prog(*[masked[n] for n in g.free_inputs])[0], run_ort(model, inputs)[0],
                               rtol=TOL, atol=TOL)


@pytest.mark.parametrize("family", FAMILIES)
def test_second_input_shape(exports, family):
    """A dynamic-axes export bound to another batch and sequence length (image size for the
    CNNs): the shape arithmetic the exporter left in the graph folds for the bound shape."""
    model, _ = exports(family, "torchscript", dynamic=True)
    dims = [d for i in onnx.load_from_string(model).graph.input for d in i.type.tensor_type.shape.dim]
    assert any(d.dim_param for d in dims)
    inputs = zoo_torch.inputs(family, *SECOND[family])
    g, prog = compile_and_check(model, inputs, shapes={k: v.shape for k, v in inputs.items()})
    assert prog.fallbacks() == []
    assert tuple(g.tensors[g.free_inputs[0]].shape) == inputs[g.free_inputs[0]].shape


# -- the frontend's handlers these exports need, on small hand-built graphs -------------------

def _model(nodes, inputs, outputs, inits=(), opset=18):
    from onnx import helper
    g = helper.make_graph(nodes, "t", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def test_logical_ops_match_onnxruntime():
    """And/Or/Xor/Not (the HF masks' bool arithmetic) with broadcasting and a constant operand first."""
    from onnx import TensorProto as TP, helper, numpy_helper
    rng = np.random.default_rng(0)
    c = rng.random(4) < 0.5
    nodes = [helper.make_node("And", ["a", "b"], ["and"]), helper.make_node("Or", ["b", "a"], ["or"]),
             helper.make_node("Xor", ["a", "b"], ["xor"]), helper.make_node("Not", ["a"], ["not"]),
             helper.make_node("And", ["c", "a"], ["and_c"]), helper.make_node("Or", ["a", "c"], ["or_c"]),
             helper.make_node("Xor", ["c", "b"], ["xor_c"])]
    outs = [helper.make_tensor_value_info(n, TP.BOOL, None) for n in ("and", "or", "xor", "not", "and_c", "or_c",
                                                                      "xor_c")]
    model = _model(nodes, [helper.make_tensor_value_info("a", TP.BOOL, [2, 3, 4]),
                           helper.make_tensor_value_info("b", TP.BOOL, [3, 4])], outs,
                   [numpy_helper.from_array(c, "c")])
    inputs = {"a": rng.random((2, 3, 4)) < 0.5, "b": rng.random((3, 4)) < 0.5}
    g, prog = compile_and_check(model, inputs)
    assert prog.fallbacks() == [] and {op.name for op in g.ops} <= {"Select", "BroadcastTo"}


@pytest.mark.parametrize("batch_dims, idx", [
    (0, [[1, 2], [0, -1], [1, 0]]),          # whole rows of the last two dims, a negative index
    (0, [[[1, 2, 3]], [[0, 0, 4]]]),         # single elements, indices of rank 3
    (1, [[[2], [0]], [[1], [1]]]),           # per batch: rows of that batch's own block
])
def test_gather_nd_with_constant_indices_matches_onnxruntime(batch_dims, idx):
    from onnx import TensorProto as TP, helper, numpy_helper
    idx = np.array(idx, dtype=np.int64)
    model = _model([helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=batch_dims)],
                   [helper.make_tensor_value_info("x", TP.FLOAT, [2, 3, 5])],
                   [helper.make_tensor_value_info("y", TP.FLOAT, None)], [numpy_helper.from_array(idx, "i")])
    inputs = {"x": np.random.default_rng(1).standard_normal((2, 3, 5)).astype(np.float32)}
    g, prog = compile_and_check(model, inputs)
    assert prog.fallbacks() == [] and "Gather" in {op.name for op in g.ops}


def test_gather_nd_and_logical_errors_name_the_node():
    from onnx import TensorProto as TP, helper, numpy_helper
    from akgpy.errors import ShapeError, UnsupportedOpError
    computed = _model([helper.make_node("GatherND", ["x", "i"], ["y"], name="gnd")],
                      [helper.make_tensor_value_info("x", TP.FLOAT, [2, 3]),
                       helper.make_tensor_value_info("i", TP.INT64, [2, 1])],
                      [helper.make_tensor_value_info("y", TP.FLOAT, None)])
    with pytest.raises(UnsupportedOpError, match="GatherND indices must be a constant.*ONNX GatherND node 'gnd'"):
        akgpy.from_onnx(computed)
    out_of_range = _model([helper.make_node("GatherND", ["x", "i"], ["y"], name="gnd")],
                          [helper.make_tensor_value_info("x", TP.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info("y", TP.FLOAT, None)],
                          [numpy_helper.from_array(np.array([[0, 3]], np.int64), "i")])
    with pytest.raises(ShapeError, match="GatherND.*out of range"):
        akgpy.from_onnx(out_of_range)
    not_bool = _model([helper.make_node("Not", ["x"], ["y"], name="neg")],
                      [helper.make_tensor_value_info("x", TP.FLOAT, [2, 3])],
                      [helper.make_tensor_value_info("y", TP.FLOAT, None)])
    with pytest.raises(ShapeError, match="Not takes bool tensors.*ONNX Not node 'neg'"):
        akgpy.from_onnx(not_bool)


@pytest.mark.parametrize("schedule", ["poly", "plain"])
def test_isnan_matches_onnxruntime(schedule):
    """IsNaN (sdpa attention exports) is not(x == x): NaN, +-inf, -0 and finite values."""
    from onnx import TensorProto as TP, helper
    model = _model([helper.make_node("IsNaN", ["x"], ["n"]), helper.make_node("Where", ["n", "z", "x"], ["y"])],
                   [helper.make_tensor_value_info("x", TP.FLOAT, [4, 33]),
                    helper.make_tensor_value_info("z", TP.FLOAT, [1])],
                   [helper.make_tensor_value_info("n", TP.BOOL, None),
                    helper.make_tensor_value_info("y", TP.FLOAT, None)])
    x = np.random.default_rng(2).standard_normal((4, 33)).astype(np.float32)
    x.flat[::5] = np.nan
    x.flat[1::7], x.flat[2::11], x.flat[3::13] = np.inf, -np.inf, -0.0
    g = akgpy.from_onnx(model)
    prog = akgpy.fuse(g, schedule=schedule)
    got = prog(x, np.zeros(1, np.float32))
    want = run_ort(model, {"x": x, "z": np.zeros(1, np.float32)})
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    assert got[0].sum() == np.isnan(x).sum() > 0
