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
