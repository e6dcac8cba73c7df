"""CNN ops (issue 51 part 2): pooling, Clip/ReLU6, grouped, depthwise and strided convolution
from ONNX against onnxruntime and as graphs against the reference; ResNet and MobileNetV2
blocks exported from torch run with no numpy fallback; bad attributes are akgpy errors."""
from __future__ import annotations

import io

import numpy as np
import pytest

import akgpy
from akgpy.errors import AttrError, ShapeError, UnsupportedOpError
from akgpy.graph.builder import GraphBuilder
from akgpy.testing import check_program

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

RNG = np.random.default_rng(51)


def ort_run(model, inputs):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)


def check(model, inputs, tol=1e-4):
    """akgpy against onnxruntime and the reference; no step may be a numpy fallback."""
    g = akgpy.from_onnx(model)
    prog = akgpy.fuse(g)
    args = [inputs[n] for n in g.free_inputs]
    got = prog(*args)
    for a, b in zip(got, ort_run(model, inputs)):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=tol, atol=tol)
    for a, b in zip(got, akgpy.reference.run(g, args)):
        np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=tol, atol=tol)
    assert not prog.fallbacks()
    return g, prog


def one_node(op, x_shape, out_shape=None, *, inits=(), extra_inputs=(), dtype=TensorProto.FLOAT, opset=17,
             **attrs):
    node = helper.make_node(op, ["x", *extra_inputs], ["y"], **attrs)
    graph = helper.make_graph([node], op.lower(), [helper.make_tensor_value_info("x", dtype, x_shape)],
                              [helper.make_tensor_value_info("y", dtype, out_shape)], initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def signed(*shape, dtype=np.float32):
    return RNG.uniform(-2, 2, shape).astype(dtype)


# -- pooling ------------------------------------------------------------------------------------

POOLS = [
    dict(kernel_shape=[2, 2], strides=[2, 2]),
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 0, 1, 2]),
    dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1),
    dict(kernel_shape=[2, 3], strides=[2, 1], auto_pad="SAME_UPPER"),
]


@pytest.mark.parametrize("attrs", POOLS, ids=lambda a: "-".join(f"{k}{v}" for k, v in a.items()))
def test_maxpool_matches_onnxruntime(attrs):
    x = signed(2, 5, 10, 11)
    g, _ = check(one_node("MaxPool", list(x.shape), **attrs), {"x": x})
    assert [op.name for op in g.ops] == ["Pool2D"]


@pytest.mark.parametrize("include", [0, 1])
@pytest.mark.parametrize("attrs", POOLS, ids=lambda a: "-".join(f"{k}{v}" for k, v in a.items()))
def test_averagepool_matches_onnxruntime(attrs, include):
    x = signed(2, 5, 10, 11)
    check(one_node("AveragePool", list(x.shape), count_include_pad=include, **attrs), {"x": x})


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pools_match_onnxruntime(op):
    x = signed(2, 6, 7, 9)
    g, _ = check(one_node(op, list(x.shape)), {"x": x})
    assert not any(o.name == "Pool2D" for o in g.ops)  # a reduction over H and W


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
@pytest.mark.parametrize("schedule", ["poly", "plain"])
def test_pool2d_graphs_match_reference(dtype, schedule):
    b = GraphBuilder("pools")
    x = b.input("x", (2, 3, 9, 10), dtype)
    mx = b.op("Pool2D", [x], (2, 3, 5, 5), dtype, pool_type="max", kernel=[3, 3], stride=[2, 2], pad_head=[1, 1],
              pad_tail=[1, 1])
    outs = [mx]
    if dtype != "int32":
        outs.append(b.op("Pool2D", [x], (2, 3, 5, 5), dtype, pool_type="avg", kernel=[3, 3], stride=[2, 2],
                         pad_head=[1, 1], pad_tail=[1, 0], ceil_mode=True, count_include_pad=True))
        outs.append(b.op("Pool2D", [x], (2, 3, 8, 9), dtype, pool_type="avg", kernel=[2, 2], stride=[1, 1]))
    b.output(*outs)
    g = b.build()
    assert check_program(g, akgpy.fuse(g, schedule=schedule)) == []


def test_maxpool_keeps_nan_and_minus_inf():
    b = GraphBuilder("nanpool")
    x = b.input("x", (1, 1, 4, 4), "float32")
    b.output(b.op("Pool2D", [x], (1, 1, 2, 2), "float32", pool_type="max", kernel=[2, 2], stride=[2, 2]))
    g = b.build()
    xv = np.full((1, 1, 4, 4), -np.inf, np.float32)
    xv[0, 0, 0, 1] = np.nan
    xv[0, 0, 3, 3] = 1.0
    got = akgpy.fuse(g)(xv)[0]
    np.testing.assert_array_equal(got, [[[[np.nan, -np.inf], [-np.inf, 1.0]]]])


# -- Clip ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("bounds", [(0.0, 6.0), (-0.5, None), (None, 0.25), (None, None)])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_clip_matches_onnxruntime(bounds, dtype):
    x = signed(3, 4, 5, dtype=dtype)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    inits, names = [], []
    for name, v in zip(("lo", "hi"), bounds):
        if v is not None:
            inits.append(numpy_helper.from_array(np.array(v, dtype), name))
        names.append(name if v is not None else "")
    while names and names[-1] == "":
        names.pop()
    model = one_node("Clip", list(x.shape), inits=inits, extra_inputs=names, dtype=elem)
    g, prog = check(model, {"x": x}, tol=0)  # a clip computes no new value: exact
    assert prog.launches == (1 if any(v is not None for v in bounds) else 0) or not g.ops


def test_clip_attributes_before_opset_11():
    x = signed(4, 6)
    check(one_node("Clip", list(x.shape), opset=6, min=-1.0, max=0.5), {"x": x}, tol=0)


def test_clip_bound_from_a_model_input():
    x, lo = signed(4, 6), np.array(-0.25, np.float32)
    node = helper.make_node("Clip", ["x", "lo"], ["y"])
    graph = helper.make_graph([node], "clip", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6]),
                                               helper.make_tensor_value_info("lo", TensorProto.FLOAT, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    check(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), {"x": x, "lo": lo}, tol=0)


# -- convolution --------------------------------------------------------------------------------

CONVS = [  # (C, O, group, kernel, stride, pads)
    (8, 16, 1, 3, 1, [1, 1, 1, 1]),
    (8, 16, 1, 3, 2, [1, 1, 1, 1]),
    (8, 12, 1, 1, 2, [0, 0, 0, 0]),
    (16, 16, 16, 3, 1, [1, 1, 1, 1]),  # depthwise
    (16, 16, 16, 3, 2, [1, 1, 1, 1]),
    (16, 16, 16, 3, 2, [0, 1, 1, 0]),
    (8, 16, 8, 3, 1, [1, 1, 1, 1]),  # depthwise, multiplier 2
    (8, 12, 4, 3, 2, [1, 1, 1, 1]),  # grouped
    (8, 8, 2, 1, 1, [0, 0, 0, 0]),  # grouped 1x1
]


@pytest.mark.parametrize("c,o,group,k,stride,pads", CONVS)
def test_conv_matches_onnxruntime(c, o, group, k, stride, pads):
    x = signed(2, c, 9, 10)
    w = signed(o, c // group, k, k) * 0.5
    bias = signed(o)
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "b")]
    model = one_node("Conv", list(x.shape), inits=inits, extra_inputs=["w", "b"], group=group,
                     strides=[stride, stride], pads=pads, kernel_shape=[k, k])
    g, _ = check(model, {"x": x})
    convs = [op for op in g.ops if op.name == "Conv2D"]
    assert len(convs) == (0 if k == 1 and stride == 1 and group == 1 else 1)
    assert all(op.attrs.get("groups", 1) == group for op in convs)


@pytest.mark.parametrize("schedule", ["poly", "plain"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("c,o,group,stride", [(16, 16, 16, 1), (8, 16, 8, 2), (8, 12, 4, 2), (6, 4, 1, 1)])
def test_conv2d_graphs_match_reference(c, o, group, stride, dtype, schedule):
    b = GraphBuilder("conv")
    x = b.input("x", (1, 9, 8, c), dtype)
    w = b.input("w", (o, 3, 3, c // group), dtype)
    y = b.op("Conv2D", [x, w], (1, (9 - 3) // stride + 1, (8 - 3) // stride + 1, o), dtype,
             stride=[1, 1, stride, stride], groups=group)
    b.output(b.minimum(b.maximum(y, 0.0), 6.0))  # a ReLU6 epilogue
    g = b.build()
    prog = akgpy.fuse(g, schedule=schedule)
    assert check_program(g, prog) == []
    if schedule == "poly":
        assert all(k.schedule_path.fallback is None for k in prog.kernels)


def test_depthwise_conv_is_one_vector_loop_over_channels():
    """A depthwise conv is no contraction for the register-tiled template: its taps are written
    out, and the nest runs on the poly path, vectorised along NHWC's channels."""
    b = GraphBuilder("dw")
    x = b.input("x", (1, 10, 10, 32), "float32")
    w = b.input("w", (32, 3, 3, 1), "float32")
    b.output(b.op("Conv2D", [x, w], (1, 8, 8, 32), "float32", stride=[1, 1, 1, 1], groups=32))
    g = b.build()
    prog = akgpy.fuse(g)
    (k,) = prog.kernels
    assert k.schedule_path.path == "poly/isl-ast"
    assert check_program(g, prog) == []


@pytest.mark.parametrize("schedule", ["poly", "plain"])
@pytest.mark.parametrize("c,o,group,k,stride,pads", [
    (16, 16, 16, 3, 1, [1, 1, 1, 1]),  # depthwise
    (16, 32, 16, 3, 2, [0, 1, 0, 1]),  # depthwise, multiplier 2, strided, bottom/right only
    (8, 16, 1, 3, 1, [1, 1, 1, 1]),  # dense
    (8, 16, 1, 3, 2, [1, 2, 0, 1]),  # dense, strided, asymmetric
    (3, 8, 1, 7, 2, [3, 3, 3, 3]),  # a stem: padding wider than a tap's reach inside
    (8, 12, 4, 3, 2, [1, 1, 1, 1]),  # grouped
], ids=str)
def test_conv2d_pad_list_reads_zeros_outside(c, o, group, k, stride, pads, schedule):
    """Conv2D's pad_list (top, bottom, left, right) is read as zeros by guarded loads of the
    unpadded input: one kernel, no padded copy as a kernel input, equal to the reference."""
    h, wd = 9, 8
    b = GraphBuilder("padconv")
    x = b.input("x", (2, h, wd, c), "float32")
    w = b.input("w", (o, k, k, c // group), "float32")
    oh, ow = (h + pads[0] + pads[1] - k) // stride + 1, (wd + pads[2] + pads[3] - k) // stride + 1
    y = b.op("Conv2D", [x, w], (2, oh, ow, o), "float32", stride=[1, 1, stride, stride], pad_list=pads,
             **({"groups": group} if group != 1 else {}))
    b.output(b.minimum(b.maximum(y, 0.0), 6.0))
    g = b.build()
    prog = akgpy.fuse(g, schedule=schedule)
    assert check_program(g, prog) == []
    (k,) = prog.kernels
    if schedule == "poly":
        assert k.schedule_path.fallback is None
    # the padding is no zero-filled buffer of the padded input's shape: the conv reads x guarded
    padded = f"(2, {h + pads[0] + pads[1]}, {wd + pads[2] + pads[3]}, {c})"
    assert padded not in k.tir and "if_then_else" in k.tir


def test_conv2d_pad_list_runs_as_a_library_contraction():
    b = GraphBuilder("padlib", model=True)
    x, w = b.input("x", (1, 6, 7, 4), "float32"), b.input("w", (5, 3, 3, 4), "float32")
    b.output(b.op("Conv2D", [x, w], (1, 3, 4, 5), "float32", stride=[1, 1, 2, 2], pad_list=[1, 0, 1, 1]))
    g = b.build()
    prog = akgpy.fuse(g, contraction="library")
    assert [st.group.kind for st in prog.steps] == ["library"]
    args = [RNG.standard_normal(t.shape).astype(np.float32) for t in (g.tensors[n] for n in g.free_inputs)]
    np.testing.assert_allclose(prog(*args)[0], akgpy.reference.run(g, args)[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("pads,match", [([1, 1, 1], "pad_list"), ([1, -1, 0, 0], "non-negative")])
def test_bad_pad_list_names_conv2d(pads, match):
    b = GraphBuilder("badpad")
    x, w = b.input("x", (1, 6, 6, 4), "float32"), b.input("w", (4, 3, 3, 4), "float32")
    b.op("Conv2D", [x, w], (1, 4, 4, 4), "float32", pad_list=pads)
    with pytest.raises(AttrError, match=match) as e:
        b.build()
    assert "Conv2D" in str(e.value)


# -- torch exports ------------------------------------------------------------------------------

torch = pytest.importorskip("torch")
nn = torch.nn


def _randomise_bn(model):
    gen = torch.Generator().manual_seed(5)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.rand(m.num_features, generator=gen) - 0.5)
            m.running_var.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=gen) + 0.5)
            m.bias.data.copy_(torch.rand(m.num_features, generator=gen) - 0.5)
    return model.eval()


class BasicBlock(nn.Module):
    """ResNet's basic block; stride 2 downsamples the shortcut with a strided 1x1 conv + BN."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(y)) + self.down(x))


class ResNetStem(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 7, 2, 3, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        self.block1 = BasicBlock(16, 16, 1)
        self.block2 = BasicBlock(16, 32, 2)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        y = self.block2(self.block1(self.stem(x)))
        return self.head(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))


class InvertedResidual(nn.Module):
    """MobileNetV2's block: 1x1 expand, depthwise 3x3, 1x1 project; ReLU6; residual at stride 1."""

    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        self.res = stride == 1 and cin == cout
        self.body = nn.Sequential(
            nn.Conv2d(cin, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
            nn.Conv2d(hidden, cout, 1, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        return x + self.body(x) if self.res else self.body(x)


class MobileNetBlocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = InvertedResidual(16, 16, 1, 6)
        self.b = InvertedResidual(16, 24, 2, 6)
        self.c = nn.Sequential(nn.Conv2d(24, 24, 3, 1, 1, groups=4), nn.AvgPool2d(2, 2))

    def forward(self, x):
        return self.c(self.b(self.a(x)))


def export(model, x) -> "onnx.ModelProto":
    buf = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(model, (torch.from_numpy(x),), buf, dynamo=False, opset_version=17,
                          input_names=["x"], output_names=["y"])
    return onnx.load_from_string(buf.getvalue())


@pytest.mark.parametrize("net,shape,types", [
    (ResNetStem, (2, 3, 32, 32), {"Conv", "Relu", "MaxPool", "GlobalAveragePool", "Gemm"}),
    (MobileNetBlocks, (1, 16, 14, 14), {"Conv", "Clip", "AveragePool"})])
def test_torch_cnn_export_matches_onnxruntime(net, shape, types):
    torch.manual_seed(0)
    model = _randomise_bn(net())
    x = RNG.standard_normal(shape).astype(np.float32)
    proto = export(model, x)
    assert types <= {n.op_type for n in proto.graph.node}
    g, prog = check(proto, {"x": x})
    with torch.no_grad():
        np.testing.assert_allclose(prog(x)[0], model(torch.from_numpy(x)).numpy(), rtol=1e-4, atol=1e-4)
    # BN, ReLU/ReLU6 and the residual add run as epilogues of the convolutions
    assert sum(st.group.pattern == "contraction" for st in prog.steps) >= sum(op.name in ("Conv2D", "MatMul")
                                                                              for op in g.ops)
    assert not any(op.name == "BatchNormalization" for op in g.ops)


# -- bad attributes -----------------------------------------------------------------------------

def _conv_model(c=4, o=4, group=1, **attrs):
    w = numpy_helper.from_array(signed(o, max(c // group, 1), 3, 3), "w")
    return one_node("Conv", [1, c, 8, 8], inits=[w], extra_inputs=["w"], group=group, **attrs)


@pytest.mark.parametrize("model,err,match", [
    (lambda: _conv_model(dilations=[2, 2]), UnsupportedOpError, "dilated Conv"),
    (lambda: _conv_model(auto_pad="SIDEWAYS"), AttrError, "auto_pad='SIDEWAYS'"),
    (lambda: _conv_model(c=4, o=6, group=3), AttrError, "group=3 does not divide"),
    (lambda: one_node("MaxPool", [1, 2, 8, 8], kernel_shape=[3, 3], dilations=[2, 2]), UnsupportedOpError,
     "dilated pooling"),
    (lambda: one_node("MaxPool", [1, 2, 8, 8], kernel_shape=[2, 2], pads=[2, 0, 0, 0]), AttrError,
     "smaller than the kernel"),
    (lambda: one_node("AveragePool", [1, 2, 8, 8], kernel_shape=[2, 2], auto_pad="WEIRD"), AttrError,
     "auto_pad='WEIRD'"),
    (lambda: one_node("MaxPool", [1, 2, 8], kernel_shape=[2]), UnsupportedOpError, "only 2-D pooling"),
])
def test_bad_attributes_are_akgpy_errors_naming_the_node(model, err, match):
    with pytest.raises(err, match=match) as e:
        akgpy.from_onnx(model())
    assert e.value.op.startswith("ONNX ")


def test_bad_graph_attributes_name_the_op():
    b = GraphBuilder("bad")
    x = b.input("x", (1, 6, 6, 4), "float32")
    w = b.input("w", (6, 3, 3, 4), "float32")
    b.op("Conv2D", [x, w], (1, 4, 4, 6), "float32", groups=3)
    with pytest.raises(AttrError, match="groups=3 does not divide") as e:
        b.build()
    assert "Conv2D" in str(e.value)
    b = GraphBuilder("bad2")
    x = b.input("x", (1, 2, 6, 6), "float32")
    b.op("Pool2D", [x], (1, 2, 3, 3), "float32", pool_type="median", kernel=[2, 2], stride=[2, 2])
    with pytest.raises(AttrError, match="pool_type 'median'") as e:
        b.build()
    assert "Pool2D" in str(e.value)


@pytest.mark.parametrize("family", ["resnet", "mobilenet_v2"])
def test_padded_dense_convs_of_cnn_families_run_no_pad_kernel(family):
    """Every padded dense convolution of the exported nets reads its padding (Conv2D pad_list):
    the only PadAkg ops left feed depthwise convolutions (GraphBuilder.conv2d_nchw's rule)."""
    from akgpy import zoo_torch
    proto, ex = zoo_torch.exported(family, "torchscript", 1, 32)
    model = onnx.load_from_string(proto)

    def padded(n):
        return any(a.name == "pads" and any(a.ints) for a in n.attribute)

    def depthwise(n):
        group = next((a.i for a in n.attribute if a.name == "group"), 1)
        return group > 1 and group == next(i.dims[0] for i in model.graph.initializer if i.name == n.input[1])
    convs = [n for n in model.graph.node if n.op_type == "Conv" and padded(n)]
    dense, dw = [n for n in convs if not depthwise(n)], [n for n in convs if depthwise(n)]
    g = akgpy.from_onnx(model)
    prog = akgpy.fuse(g)
    with_pad_list = [op for op in g.ops if op.name == "Conv2D" and any(op.attrs.get("pad_list", [0]))]
    assert len(dense) > 0 and len(with_pad_list) == len(dense)
    pad_ops = [op for st in prog.steps for op in prog.partition.subgraph(st.group).ops if op.name == "PadAkg"]
    assert len(pad_ops) == len(dw) and prog.fallbacks() == []
    args = [ex[n] for n in g.free_inputs]
    np.testing.assert_allclose(prog(*args)[0], ort_run(model, ex)[0], rtol=1e-4, atol=1e-4)


_FENCED_CHILD = """
import sys
import numpy as np
import akgpy
from akgpy import GraphBuilder
from akgpy.reference import run
from akgpy.testing import random_inputs, run_fenced
for schedule in ("poly", "plain"):
    for c, o, group, k, s, pads in [(64, 64, 64, 3, 1, [1, 1, 1, 1]), (32, 32, 32, 3, 2, [0, 1, 0, 1]),
                                    (16, 32, 1, 3, 1, [1, 1, 1, 1]), (3, 16, 1, 7, 2, [3, 3, 3, 3])]:
        b = GraphBuilder("fenced")
        x, w = b.input("x", (1, 7, 9, c)), b.input("w", (o, k, k, c // group))
        oh, ow = (7 + pads[0] + pads[1] - k) // s + 1, (9 + pads[2] + pads[3] - k) // s + 1
        b.output(b.op("Conv2D", [x, w], (1, oh, ow, o), "float32", stride=[1, 1, s, s], pad_list=pads,
                      **({"groups": group} if group != 1 else {})))
        g = b.build()
        arrays = random_inputs(g)
        got = run_fenced(akgpy.fuse(g, schedule=schedule), arrays)
        assert np.allclose(got[0], run(g, arrays)[0], rtol=1e-4, atol=1e-4), (schedule, c, o, k, s, pads)
        print("ok", flush=True)
"""


def test_padded_conv_reads_only_inside_its_input():
    """The padding's loads are guarded (if_then_else loads only inside), so a padded conv reads
    no byte outside x: every argument fenced by no-access pages, in a child process."""
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-c", _FENCED_CHILD], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and done.stdout.count("ok") == 8, (done.returncode, done.stdout, done.stderr[-2000:])
