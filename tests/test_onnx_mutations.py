"""Seeded random mutations of the akgpy.zoo models (small sizes) handed to `akgpy.from_onnx`: each
must end in an akgpy error or in a graph whose results match onnxruntime's, never in another
exception (issue 48, defect 10). One case per index: the index picks the model and the kind of
mutation, and seeds what the mutation changes, so a failure is reproduced by its id alone.

An accepted mutant is checked by the numpy reference against onnxruntime; each graph structure
seen for the first time is also compiled (`akgpy.fuse`) and its kernels checked the same way
(most mutants change only weights: compiling each would take minutes)."""
from __future__ import annotations


import numpy as np
import pytest

import akgpy
from akgpy import zoo
from akgpy.errors import AkgpyError

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import helper  # noqa: E402

N_CASES = 210
BASES = {
    "mlp": lambda: zoo.mlp(batch=4, sizes=(8, 16, 16, 4)),
    "resnet": lambda: zoo.resnet_bottleneck(channels=16, width=4, size=6),
    "bert": lambda: zoo.bert_layer(seq=8, hidden=16, heads=2, ffn=32),
}
MAX_RUN_ELEMENTS = 1 << 20  # a mutated dim can ask for gigabytes: such a graph is imported, not run


# -- mutations: (model, rng) -> a ModelProto or serialized bytes ----------------------------------

def _attr_type(m, rng):
    nodes = [n for n in m.graph.node if n.attribute]
    node = nodes[rng.integers(len(nodes))]
    k = rng.integers(len(node.attribute))
    name = node.attribute[k].name
    new = [helper.make_attribute(name, "1"), helper.make_attribute(name, 1.5), helper.make_attribute(name, [1, 1]),
           helper.make_attribute(name, 7), helper.make_attribute(name, [0.5])][rng.integers(5)]
    node.attribute[k].CopyFrom(new)
    return m


def _attr_value(m, rng):
    nodes = [n for n in m.graph.node if n.attribute]
    node = nodes[rng.integers(len(nodes))]
    a = node.attribute[rng.integers(len(node.attribute))]
    picks = [-9, -3, -1, 0, 1, 2, 3, 5, 99, 2 ** 40]
    if a.type == onnx.AttributeProto.INT:
        a.i = int(picks[rng.integers(len(picks))])
    elif a.type == onnx.AttributeProto.INTS and len(a.ints):
        vals = list(a.ints)
        choice = rng.integers(3)
        if choice == 0:
            vals[rng.integers(len(vals))] = int(picks[rng.integers(len(picks))])
        elif choice == 1:
            vals.append(vals[0])
        else:
            vals.pop()
        del a.ints[:]
        a.ints.extend(vals)
    elif a.type == onnx.AttributeProto.FLOAT:
        a.f = float([np.nan, np.inf, -1.0, 0.0, 1e30][rng.integers(5)])
    elif a.type == onnx.AttributeProto.STRING:
        a.s = [b"", b"SAME_LOWER", b"tanh", b"bogus"][rng.integers(4)]
    return m


def _drop_input(m, rng):
    nodes = [n for n in m.graph.node if n.input]
    node = nodes[rng.integers(len(nodes))]
    k = rng.integers(len(node.input))
    if rng.integers(2):
        node.input[k] = ""
    else:
        del node.input[k]
    return m


def _truncate_initializer(m, rng):
    t = m.graph.initializer[rng.integers(len(m.graph.initializer))]
    if t.raw_data:
        t.raw_data = t.raw_data[:rng.integers(len(t.raw_data))]
    else:  # a tensor stored in a typed field: change its dims instead
        t.dims.append(int(rng.integers(2, 5)))
    return m


def _initializer_dims(m, rng):
    t = m.graph.initializer[rng.integers(len(m.graph.initializer))]
    if t.dims and rng.integers(2):
        t.dims[rng.integers(len(t.dims))] = int([0, 1, 3, -1, 2 ** 31][rng.integers(5)])
    else:
        t.dims.insert(0, 1)
    return m


def _int_constant(m, rng):
    """A constant integer input (shapes, axes, slice bounds) gets other values."""
    from onnx import numpy_helper
    ints = [t for t in m.graph.initializer if t.data_type == onnx.TensorProto.INT64]
    if not ints:
        return _initializer_dims(m, rng)
    t = ints[rng.integers(len(ints))]
    arr = numpy_helper.to_array(t).copy()
    flat = arr.reshape(-1)
    if flat.size:
        flat[rng.integers(flat.size)] = [-5, -1, 0, 1, 3, 7, 2 ** 40][rng.integers(7)]
    t.CopyFrom(numpy_helper.from_array(arr, t.name))
    return m


def _rename_output(m, rng):
    node = m.graph.node[rng.integers(len(m.graph.node))]
    names = [o for n in m.graph.node for o in n.output] + [i.name for i in m.graph.input]
    node.output[0] = names[rng.integers(len(names))] if rng.integers(2) else "dangling"
    return m


def _byte_flips(m, rng):
    data = bytearray(m.SerializeToString())
    for _ in range(int(rng.integers(1, 5))):
        data[rng.integers(len(data))] ^= int(rng.integers(1, 256))
    return bytes(data)


KINDS = [_attr_type, _attr_value, _drop_input, _truncate_initializer, _initializer_dims, _int_constant,
         _rename_output, _byte_flips]


def case_label(i: int) -> str:
    return f"{list(BASES)[i % len(BASES)]}-{KINDS[(i // len(BASES)) % len(KINDS)].__name__[1:]}-{i}"


def mutant(i: int):
    model, _ = BASES[list(BASES)[i % len(BASES)]]()
    rng = np.random.default_rng(4800 + i)
    return KINDS[(i // len(BASES)) % len(KINDS)](model, rng)


# -- the check -------------------------------------------------------------------------------------

def _feeds(g, rng) -> dict:
    out = {}
    for n in g.free_inputs:
        t = g.tensors[n]
        if t.dtype.startswith("float"):
            out[n] = rng.standard_normal(t.shape).astype(t.dtype)
        else:
            out[n] = rng.integers(0, 2, t.shape).astype(t.dtype)
    return out


def _close(got, want) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want):
        b = np.asarray(b)
        assert a.shape == b.shape or a.size == b.size, (a.shape, b.shape)
        np.testing.assert_allclose(a.reshape(b.shape), b, rtol=1e-4, atol=1e-4)


_COMPILED: set[str] = set()


def run_case(i: int) -> str:
    """'refused' (an akgpy error), 'matches' (runs, agrees with onnxruntime), or 'imported' (too
    large to run); anything else raises."""
    m = mutant(i)
    try:
        g = akgpy.from_onnx(m)
    except AkgpyError:
        return "refused"
    if max(t.size for t in g.tensors.values()) > MAX_RUN_ELEMENTS:
        return "imported"
    proto = m if isinstance(m, onnx.ModelProto) else onnx.load_from_string(m)
    names = [vi.name for vi in proto.graph.input if vi.name not in {t.name for t in proto.graph.initializer}]
    feeds = _feeds(g, np.random.default_rng(i))
    opts = ort.SessionOptions()  # ONNX's semantics, not those of onnxruntime's fused kernels
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    want = sess.run(None, dict(zip(names, (feeds[n] for n in g.free_inputs))))
    args = [feeds[n] for n in g.free_inputs]
    _close(akgpy.reference.run(g, args), want)
    key = g.hash()
    if key not in _COMPILED:
        _COMPILED.add(key)
        _close(akgpy.fuse(g)(*args), want)
    return "matches"


pytestmark = pytest.mark.usefixtures("no_hang")  # tests/conftest.py


@pytest.mark.parametrize("i", range(N_CASES), ids=case_label)
def test_onnx_mutant_is_refused_or_matches_onnxruntime(i):
    run_case(i)
