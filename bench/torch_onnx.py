"""An ONNX model as a torch.nn.Module, for the torch eager / torch.compile peers of
bench/bench_models.py: forward() interprets the nodes with torch ops (the zoo's op set), so
torch.compile traces one static graph of aten ops, as it would for the original module."""
from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from onnx import helper, numpy_helper


def _attrs(node) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _conv(x, w, b=None, *, strides=(1, 1), pads=(0, 0, 0, 0), **_):
    if pads[0] != pads[2] or pads[1] != pads[3]:
        x = F.pad(x, (pads[1], pads[3], pads[0], pads[2]))
        pads = (0, 0, 0, 0)
    return F.conv2d(x, w, b, stride=tuple(strides), padding=(pads[0], pads[1]))


def _layernorm(x, s, b, *, axis=-1, epsilon=1e-5, **_):
    return F.layer_norm(x, x.shape[axis % x.dim():], s, b, epsilon)


def _bn(x, s, b, m, v, *, epsilon=1e-5, **_):
    return F.batch_norm(x, m, v, s, b, False, 0.0, epsilon)


def _gemm(a, b, c=None, *, transA=0, transB=0, alpha=1.0, beta=1.0, **_):
    y = (a.t() if transA else a) @ (b.t() if transB else b)
    y = y * alpha if alpha != 1.0 else y
    return y if c is None else y + beta * c


def _reshape(x, shape, **_):
    shape = [x.shape[i] if int(s) == 0 else int(s) for i, s in enumerate(shape)]
    return x.reshape(shape)


def _gelu(x, *, approximate=b"none", **_):
    return F.gelu(x, approximate="tanh" if approximate in (b"tanh", "tanh") else "none")


OPS = {
    "Add": torch.add, "Sub": torch.sub, "Mul": torch.mul, "Div": torch.div, "Pow": torch.pow,
    "MatMul": torch.matmul, "Gemm": _gemm, "Conv": _conv, "Relu": F.relu, "Erf": torch.erf, "Tanh": torch.tanh,
    "Sigmoid": torch.sigmoid, "Sqrt": torch.sqrt, "Gelu": _gelu,
    "Softmax": lambda x, axis=-1, **_: torch.softmax(x, axis),
    "LayerNormalization": _layernorm, "BatchNormalization": _bn,
    "Transpose": lambda x, perm=None, **_: x.permute(*perm), "Reshape": _reshape,
    "Unsqueeze": lambda x, axes, **_: _unsqueeze(x, axes),
    "Identity": lambda x, **_: x,
    # shape arithmetic stays in numpy: host values, constants to torch.compile
    "Shape": lambda x, **_: list(x.shape),
    "Slice": lambda x, s, e, **_: x[int(s[0]):int(e[0])],
    "Concat": lambda *xs, axis=0, **_: (sum(xs, []) if isinstance(xs[0], list) else torch.cat(xs, axis)),
}


def _unsqueeze(x, axes):
    for a in sorted(a % (x.dim() + len(axes)) for a in axes):
        x = x.unsqueeze(a)
    return x


class OnnxModule(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        g = model.graph
        self.nodes = [(n.op_type, list(n.input), list(n.output), _attrs(n)) for n in g.node]
        self.inputs = [i.name for i in g.input]
        self.outputs = [o.name for o in g.output]
        self.consts, self.scalars = {}, {}
        for k, t in enumerate(g.initializer):
            arr = numpy_helper.to_array(t)
            if arr.dtype == np.int64:  # shape operands stay host values
                self.consts[t.name] = arr.tolist()
            elif arr.ndim == 0:  # python scalars, as a hand-written module would use
                self.scalars[t.name] = float(arr)
            else:
                self.register_buffer(f"c{k}", torch.from_numpy(arr.copy()))
                self.consts[t.name] = f"c{k}"

    def forward(self, *xs):
        env = dict(zip(self.inputs, xs))
        for name, v in self.consts.items():
            env[name] = getattr(self, v) if isinstance(v, str) else v
        for name in self.scalars:
            env[name] = self.scalars[name]
        for op, ins, outs, attrs in self.nodes:
            env[outs[0]] = OPS[op](*[env[i] for i in ins if i], **attrs)
        return tuple(env[o] for o in self.outputs)

