"""Small real-shaped ONNX models built with onnx.helper: a BERT-base encoder layer, a ResNet-50
bottleneck block and an MLP. Tests, bench/bench_models.py and the docs use them; weights are
seeded, so every caller sees the same model. Each builder returns (ModelProto, inputs), with
inputs a dict of example arrays."""
from __future__ import annotations

import math

import numpy as np

OPSET = 20  # LayerNormalization (17), Gelu (20), ReduceMean with axes as an input (18)


def _helpers():
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    return onnx, TensorProto, helper, numpy_helper


class _Net:
    def __init__(self, name: str, seed: int):
        self.onnx, self.TP, self.h, self.nh = _helpers()
        self.name, self.rng = name, np.random.default_rng(seed)
        self.nodes, self.inits, self.n = [], [], 0

    def w(self, shape, scale: float | None = None, base: float = 0.0) -> str:
        scale = scale if scale is not None else 1.0 / math.sqrt(shape[0] if len(shape) > 1 else 1.0)
        arr = (base + self.rng.standard_normal(shape) * scale).astype(np.float32)
        return self.const(arr)

    def const(self, arr: np.ndarray) -> str:
        self.n += 1
        name = f"w{self.n}"
        self.inits.append(self.nh.from_array(np.asarray(arr), name))
        return name

    def node(self, op: str, ins: list[str], n_out: int = 1, **attrs) -> str | list[str]:
        self.n += 1
        outs = [f"{op.lower()}_{self.n}_{k}" for k in range(n_out)]
        self.nodes.append(self.h.make_node(op, ins, outs, name=f"{op}_{self.n}", **attrs))
        return outs[0] if n_out == 1 else outs

    def model(self, inputs: dict[str, np.ndarray], outputs: dict[str, tuple]):
        h, TP = self.h, self.TP
        g = h.make_graph(self.nodes, self.name,
                         [h.make_tensor_value_info(k, h.np_dtype_to_tensor_dtype(v.dtype), v.shape)
                          for k, v in inputs.items()],
                         [h.make_tensor_value_info(k, TP.FLOAT, s) for k, s in outputs.items()], self.inits)
        m = h.make_model(g, opset_imports=[h.make_opsetid("", OPSET)], producer_name="akgpy.zoo")
        m.ir_version = 9
        self.onnx.checker.check_model(m)
        return m, inputs


def bert_layer(seq: int = 128, hidden: int = 768, heads: int = 12, ffn: int = 3072, batch: int = 1, seed: int = 0):
    """One BERT encoder layer as exported by HF transformers: the attention mask arithmetic, the
    Shape->Gather->Concat subgraph feeding Reshape, erf-GELU, LayerNormalization."""
    net = _Net("bert_layer", seed)
    d = hidden // heads
    x, mask = "hidden_states", "attention_mask"
    ext = net.node("Unsqueeze", [mask, net.const(np.array([1, 2], np.int64))])
    ext = net.node("Mul", [net.node("Sub", [net.const(np.array(1.0, np.float32)), ext]),
                           net.const(np.array(-10000.0, np.float32))])

    def heads_of(t: str, perm):
        # new shape = concat(shape(t)[:2], [heads, d]) : the shape subgraph HF exports
        shp = net.node("Shape", [t])
        b_s = net.node("Slice", [shp, net.const(np.array([0], np.int64)), net.const(np.array([2], np.int64))])
        new = net.node("Concat", [b_s, net.const(np.array([heads, d], np.int64))], axis=0)
        return net.node("Transpose", [net.node("Reshape", [t, new])], perm=perm)

    def dense(t: str, n_in: int, n_out: int) -> str:
        return net.node("Add", [net.node("MatMul", [t, net.w((n_in, n_out))]), net.w((n_out,), 0.02)])

    q = heads_of(dense(x, hidden, hidden), [0, 2, 1, 3])
    k = heads_of(dense(x, hidden, hidden), [0, 2, 3, 1])
    v = heads_of(dense(x, hidden, hidden), [0, 2, 1, 3])
    scores = net.node("Div", [net.node("MatMul", [q, k]), net.const(np.array(math.sqrt(d), np.float32))])
    probs = net.node("Softmax", [net.node("Add", [scores, ext])], axis=-1)
    ctx = net.node("Transpose", [net.node("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    ctx = net.node("Reshape", [ctx, net.const(np.array([batch, seq, hidden], np.int64))])
    h1 = net.node("LayerNormalization", [net.node("Add", [dense(ctx, hidden, hidden), x]),
                                         net.w((hidden,), 0.1, 1.0), net.w((hidden,), 0.1)], epsilon=1e-12)
    f = dense(h1, hidden, ffn)
    gelu = net.node("Mul", [net.node("Mul", [f, net.node("Add", [
        net.node("Erf", [net.node("Div", [f, net.const(np.array(math.sqrt(2.0), np.float32))])]),
        net.const(np.array(1.0, np.float32))])]), net.const(np.array(0.5, np.float32))])
    out = net.node("LayerNormalization", [net.node("Add", [dense(gelu, ffn, hidden), h1]),
                                          net.w((hidden,), 0.1, 1.0), net.w((hidden,), 0.1)], epsilon=1e-12)
    net.nodes.append(net.h.make_node("Identity", [out], ["output"], name="output"))
    rng = np.random.default_rng(seed + 1)
    m = np.ones((batch, seq), np.float32)
    m[:, seq - seq // 8:] = 0.0  # padded tail
    return net.model({x: rng.standard_normal((batch, seq, hidden)).astype(np.float32), mask: m},
                     {"output": (batch, seq, hidden)})


def resnet_bottleneck(channels: int = 256, width: int = 64, size: int = 56, batch: int = 1, seed: int = 0):
    """ResNet-50's layer1 bottleneck: 1x1 -> 3x3 (pad 1) -> 1x1 convs with BatchNormalization and
    ReLU, identity shortcut, final ReLU (inference)."""
    net = _Net("resnet_bottleneck", seed)

    def conv_bn(t: str, cin: int, cout: int, k: int, relu: bool) -> str:
        w = net.w((cout, cin, k, k), math.sqrt(2.0 / (cin * k * k)))
        y = net.node("Conv", [t, w], kernel_shape=[k, k], pads=[k // 2] * 4, strides=[1, 1])
        y = net.node("BatchNormalization", [y, net.w((cout,), 0.1, 1.0), net.w((cout,), 0.1),
                                            net.w((cout,), 0.1), net.const(
                                                (0.5 + net.rng.random(cout)).astype(np.float32))], epsilon=1e-5)
        return net.node("Relu", [y]) if relu else y

    x = "x"
    y = conv_bn(conv_bn(conv_bn(x, channels, width, 1, True), width, width, 3, True), width, channels, 1, False)
    out = net.node("Relu", [net.node("Add", [y, x])])
    net.nodes.append(net.h.make_node("Identity", [out], ["output"], name="output"))
    rng = np.random.default_rng(seed + 1)
    return net.model({x: rng.standard_normal((batch, channels, size, size)).astype(np.float32)},
                     {"output": (batch, channels, size, size)})


def mlp(batch: int = 128, sizes=(784, 1024, 1024, 10), seed: int = 0):
    """An MLP as torch exports nn.Linear: Gemm(transB=1) + ReLU / GELU, softmax head."""
    net = _Net("mlp", seed)
    t = "x"
    for k, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        t = net.node("Gemm", [t, net.w((b, a), 1.0 / math.sqrt(a)), net.w((b,), 0.02)], transB=1)
        if k < len(sizes) - 2:
            t = net.node("Relu" if k % 2 == 0 else "Gelu", [t])
    out = net.node("Softmax", [t], axis=-1)
    net.nodes.append(net.h.make_node("Identity", [out], ["output"], name="output"))
    rng = np.random.default_rng(seed + 1)
    return net.model({"x": rng.standard_normal((batch, sizes[0])).astype(np.float32)}, {"output": (batch, sizes[-1])})


MODELS = {"bert_layer": bert_layer, "resnet_bottleneck": resnet_bottleneck, "mlp": mlp}


def main(argv=None) -> int:
    """python3 -m akgpy.zoo [--model bert_layer] [--save model.onnx] [--render fusion.svg]"""
    import argparse

    import akgpy
    ap = argparse.ArgumentParser(description="build a zoo model; save it, or draw its fusion groups")
    ap.add_argument("--model", default="bert_layer", choices=sorted(MODELS))
    ap.add_argument("--save", default=None, help="write the ONNX model here")
    ap.add_argument("--render", default=None, help="compile it and draw the fused groups (.svg/.png/.pdf/.dot)")
    a = ap.parse_args(argv)
    model, _ = MODELS[a.model]()
    if a.save:
        import onnx
        onnx.save(model, a.save)
    if a.render:
        prog = akgpy.fuse(akgpy.from_onnx(model))
        print(repr(prog))
        print(prog.render(a.render))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
