"""graph/layout.py: Transposes moved past the ops that read them, inverse pairs cancelled, so a
conv chain imported from NCHW models runs NHWC throughout. Exact (reference-equal), never more
Transposes, graph inputs and outputs in their declared layout."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import akgpy
from akgpy.graph.builder import GraphBuilder
from akgpy.graph.ir import Graph
from akgpy.graph.layout import sink_transposes
from akgpy.reference import run

RNG = np.random.default_rng(51)
NCHW, NHWC = [0, 3, 1, 2], [0, 2, 3, 1]


def count(g: Graph, name="Transpose") -> int:
    return sum(op.name == name for op in g.ops)


def _inputs(g: Graph) -> dict:
    return {t: RNG.standard_normal(g.tensors[t].shape).astype(np.float32) for t in g.free_inputs}


def same_function(g: Graph, h: Graph) -> None:
    assert h.free_inputs == g.free_inputs and h.outputs == g.outputs
    for o in g.outputs:
        assert h.tensors[o].shape == g.tensors[o].shape
    feeds = _inputs(g)
    for a, b in zip(run(g, {**feeds, **g.bound}), run(h, {**feeds, **h.bound})):
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-6)


def model(b: GraphBuilder) -> Graph:
    g = b.build()
    import dataclasses
    return dataclasses.replace(g, kind="model")


def bn_chain(c=6):
    """NHWC x -> NCHW -> BN (bound [1,C,1,1] scale and shift) -> ReLU6 -> NHWC: a pair to cancel."""
    b = GraphBuilder("bn_chain")
    x = b.input("x", (2, 5, 4, c))
    s = b.weight("scale", RNG.standard_normal((1, c, 1, 1)).astype(np.float32))
    t = b.weight("shift", RNG.standard_normal((c, 1, 1)).astype(np.float32))
    y = b.add(b.mul(b.transpose(x, NCHW), s), t)
    y = b.minimum(b.maximum(y, 0.0), 6.0)
    b.output(b.exp(b.transpose(y, NHWC)))
    return model(b)


def test_inverse_pair_cancels_through_bn_and_constants_are_transposed():
    g = bn_chain()
    h = sink_transposes(g)
    assert count(g) == 2 and count(h) == 0
    # the broadcast weights now broadcast along the last (channel) dim
    shapes = {h.tensors[t].shape for op in h.ops for t in op.inputs if t in h.bound}
    assert shapes == {(1, 1, 1, 6)}
    same_function(g, h)


def test_output_keeps_its_layout_and_count_never_grows():
    """x NHWC -> NCHW -> Relu -> output (NCHW): the Transpose moves after the Relu but stays."""
    b = GraphBuilder("to_output")
    x = b.input("x", (1, 3, 4, 5))
    b.output(b.maximum(b.transpose(x, NCHW), 0.0))
    g = model(b)
    h = sink_transposes(g)
    assert count(h) == 1 and h.ops[-1].name == "Transpose" and h.outputs == g.outputs
    assert h.tensors[h.outputs[0]].shape == (1, 5, 3, 4)
    same_function(g, h)


def test_operand_without_a_transpose_blocks_the_move():
    """Add(T(x), y) with y a free NCHW input: moving would need a new Transpose of y."""
    b = GraphBuilder("blocked")
    x, y = b.input("x", (1, 3, 4, 5)), b.input("y", (1, 5, 3, 4))
    b.output(b.transpose(b.add(b.transpose(x, NCHW), y), NHWC))
    g = model(b)
    h = sink_transposes(g)
    assert count(h) == count(g) == 2
    same_function(g, h)


def test_shared_transpose_of_an_operand_is_reused():
    """The residual: Add(T(u), x) where T(x) already exists for the conv path."""
    b = GraphBuilder("residual")
    x = b.input("x", (1, 6, 4, 5))
    xt = b.transpose(x, NHWC)
    w = b.weight("w", RNG.standard_normal((6, 6)).astype(np.float32))
    u = b.reshape(b.matmul(b.reshape(xt, [20, 6]), w), [1, 4, 5, 6])  # a 1x1 conv: Transposes stay out
    b.output(b.add(b.transpose(u, NCHW), x))
    g = model(b)
    h = sink_transposes(g)
    assert count(g) == 2 and count(h) == 2  # T(x) reused, one Transpose at the output
    assert h.ops[-1].name == "Transpose"
    same_function(g, h)


@pytest.mark.parametrize("keep", [True, False])
def test_reduction_axes_map_through_the_permutation(keep):
    """Global pooling of NCHW data after an NHWC producer: reduce H, W of the NHWC source."""
    b = GraphBuilder("gpool")
    x = b.input("x", (2, 4, 5, 6))
    y = b.reduce_sum(b.transpose(b.exp(x), NCHW), [2, 3], keepdims=keep)
    b.output(b.reshape(y, [2, 6]))
    g = model(b)
    h = sink_transposes(g)
    assert count(h) == 0  # [2,1,1,6] -> [2,6,1,1] moves unit dims only: a Reshape
    red = next(op for op in h.ops if op.name == "ReduceSum")
    assert sorted(red.attr("axis")) == [1, 2]
    same_function(g, h)


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pad_and_pool_run_nhwc(kind):
    b = GraphBuilder("pool")
    x = b.input("x", (1, 7, 9, 3))
    xt = b.transpose(x, NCHW)
    p = b.op("PadAkg", [xt], [1, 3, 8, 11], "float32", head=[0, 0, 1, 1], tail=[0, 0, 0, 1], pad_val=0.0)
    q = b.op("Pool2D", [p], [1, 3, 4, 5], "float32", pool_type=kind, kernel=[3, 3], stride=[2, 2],
             pad_head=[1, 0], pad_tail=[1, 0], ceil_mode=False, count_include_pad=False)
    b.output(b.transpose(q, NHWC))
    g = model(b)
    h = sink_transposes(g)
    assert count(h) == 0
    pool = next(op for op in h.ops if op.name == "Pool2D")
    assert pool.attr("data_format") == "NHWC"
    same_function(g, h)
    prog = akgpy.fuse(h)  # the NHWC Pool2D builder against the reference
    feeds = _inputs(h)
    np.testing.assert_allclose(prog(*feeds.values())[0], run(g, feeds)[0], rtol=1e-4, atol=1e-4)


# -- ONNX exports: a conv chain runs NHWC between the two boundary Transposes --------------------

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).parent))
from test_cnn_ops import InvertedResidual, MobileNetBlocks, ResNetStem, _randomise_bn, export  # noqa: E402

ort = pytest.importorskip("onnxruntime")


class Bottleneck(torch.nn.Module):
    """ResNet-50's bottleneck: 1x1 reduce, 3x3, 1x1 expand, identity residual."""

    def __init__(self, c, mid):
        super().__init__()
        nn = torch.nn
        self.body = nn.Sequential(nn.Conv2d(c, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(),
                                  nn.Conv2d(mid, mid, 3, 1, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU(),
                                  nn.Conv2d(mid, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        return torch.relu(self.body(x) + x)


@pytest.mark.parametrize("net,shape,left", [
    (lambda: InvertedResidual(8, 8, 1, 6), (1, 8, 10, 10), 2),
    (lambda: Bottleneck(32, 8), (2, 32, 8, 8), 2),
    (MobileNetBlocks, (1, 16, 14, 14), 2),
    (ResNetStem, (2, 3, 32, 32), 1)])  # the classifier head: a global pool reshaped, no Transpose out
def test_onnx_cnn_blocks_keep_only_boundary_transposes(net, shape, left):
    torch.manual_seed(0)
    m = _randomise_bn(net())
    x = RNG.standard_normal(shape).astype(np.float32)
    proto = export(m, x)
    g = akgpy.from_onnx(proto)
    h = sink_transposes(g)
    assert count(g) > left and count(h) == left
    prog = akgpy.fuse(g)  # compile_model runs the pass
    assert sum(count(prog.partition.subgraph(grp)) for grp in prog.partition.groups
               if grp.kind == "kernel") == left
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    want = ort.InferenceSession(proto.SerializeToString(), so).run(None, {"x": x})[0]
    np.testing.assert_allclose(prog(x)[0], want, rtol=1e-4, atol=1e-4)
