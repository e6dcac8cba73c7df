"""GraphBuilder: write a Graph in Python with numpy-like calls.

    b = GraphBuilder("layernorm")
    x = b.input("x", (4096, 768), "float16")
    mean = b.reduce_sum(x.astype("float32"), axis=-1, keepdims=True) * (1 / 768)
    ...
    b.output(y)
    g = b.build()

Output shapes and dtypes are inferred with the same rules the validator checks, so a
builder graph and a composite file of the same computation hash equal.
"""
from __future__ import annotations

from typing import Any, Sequence

from ..errors import ShapeError
from ..ops.registry import broadcast_shapes
from .ir import Graph, Op, Tensor


class Value:
    """A handle on a tensor being built; arithmetic operators add ops to the builder."""

    def __init__(self, b: "GraphBuilder", name: str):
        self.b, self.name = b, name

    @property
    def tensor(self) -> Tensor:
        return self.b._tensors[self.name]

    @property
    def shape(self) -> tuple[int, ...]:
        return self.tensor.shape

    @property
    def dtype(self) -> str:
        return self.tensor.dtype

    def __add__(self, o): return self.b.add(self, o)
    def __radd__(self, o): return self.b.add(o, self)
    def __sub__(self, o): return self.b.sub(self, o)
    def __rsub__(self, o): return self.b.sub(o, self)
    def __mul__(self, o): return self.b.mul(self, o)
    def __rmul__(self, o): return self.b.mul(o, self)
    def __truediv__(self, o): return self.b.div(self, o)
    def __rtruediv__(self, o): return self.b.div(o, self)
    def __neg__(self): return self.b.neg(self)
    def __pow__(self, o): return self.b.pow(self, o)
    def __gt__(self, o): return self.b._binary("Greater", self, o, "bool")
    def __ge__(self, o): return self.b._binary("GreaterEqual", self, o, "bool")
    def __lt__(self, o): return self.b._binary("Less", self, o, "bool")
    def __le__(self, o): return self.b._binary("LessEqual", self, o, "bool")
    def astype(self, dtype: str): return self.b.cast(self, dtype)
    def reshape(self, *shape): return self.b.reshape(self, shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape)
    def transpose(self, *perm): return self.b.transpose(self, perm[0] if len(perm) == 1 and isinstance(perm[0], (tuple, list)) else perm)
    def sum(self, axis=None, keepdims=False): return self.b.reduce_sum(self, axis, keepdims)
    def max(self, axis=None, keepdims=False): return self.b.reduce_max(self, axis, keepdims)

    def __repr__(self):
        t = self.tensor
        return f"Value({self.name}: {t.dtype}{list(t.shape)})"


class GraphBuilder:
    """`model=True` builds a whole model graph, which akgpy.fuse partitions into fused groups;
    otherwise the graph is one fused subgraph (one kernel)."""

    def __init__(self, name: str = "akgpy_graph", process: str = "cpu", *, model: bool = False):
        self.name, self.process, self.model = name, process, model
        self._bound: dict[str, Any] = {}
        self._tensors: dict[str, Tensor] = {}
        self._inputs: list[str] = []
        self._outputs: list[str] = []
        self._ops: list[Op] = []
        self._n = 0

    # -- plumbing ------------------------------------------------------------------------
    def _fresh(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}_{self._n}"

    def _const(self, v: Any, dtype: str) -> Value:
        name = self._fresh("const")
        self._tensors[name] = Tensor(name, (1,), dtype, value=v)
        return Value(self, name)

    def _as_value(self, x: Any, like: Value) -> Value:
        if isinstance(x, Value):
            return x
        return self._const(x, like.dtype)

    def op(self, name: str, inputs: Sequence[Value], shape: Sequence[int], dtype: str, fmt: str = "DefaultFormat",
           /, **attrs) -> Value:
        """Add any op of the table with an explicit output desc (the generic escape hatch)."""
        out = self._fresh(name.lower())
        self._tensors[out] = Tensor(out, tuple(int(s) for s in shape), dtype, fmt)
        self._ops.append(Op(name, tuple(v.name for v in inputs), (out,),
                            {k: tuple(v) if isinstance(v, list) else v for k, v in attrs.items()}))
        return Value(self, out)

    def _binary(self, name: str, a: Any, b: Any, dtype: str | None = None) -> Value:
        if not isinstance(a, Value) and not isinstance(b, Value):
            raise ShapeError(f"{name} needs at least one tensor operand")
        like = a if isinstance(a, Value) else b
        a, b = self._as_value(a, like), self._as_value(b, like)
        shapes = [v.shape for v in (a, b) if not v.tensor.is_const]
        shape = broadcast_shapes(shapes, tensor=like.name)
        return self.op(name, [a, b], shape, dtype or like.dtype)

    def _unary(self, name: str, x: Value) -> Value:
        return self.op(name, [x], x.shape, x.dtype)

    # -- public API ----------------------------------------------------------------------
    def input(self, name: str, shape: Sequence[int], dtype: str = "float32", fmt: str = "DefaultFormat") -> Value:
        if name in self._tensors:
            raise ShapeError("input name used twice", tensor=name)
        self._tensors[name] = Tensor(name, tuple(int(s) for s in shape), dtype, fmt)
        self._inputs.append(name)
        return Value(self, name)

    def weight(self, name: str, value) -> Value:
        """An input whose value is known now (a model weight): the program binds it itself."""
        import numpy as np
        from .. import dtypes
        arr = np.ascontiguousarray(value)
        v = self.input(name, arr.shape, dtypes.from_numpy(arr.dtype, tensor=name))
        self._bound[name] = arr
        return v

    def output(self, *values: Value) -> None:
        self._outputs.extend(v.name for v in values)

    def build(self) -> Graph:
        return Graph(self.name, dict(self._tensors), tuple(self._inputs), tuple(self._outputs), tuple(self._ops),
                     process=self.process, kind="model" if self.model else "fused", bound=dict(self._bound))

    def add(self, a, b): return self._binary("Add", a, b)
    def sub(self, a, b): return self._binary("Sub", a, b)
    def mul(self, a, b): return self._binary("Mul", a, b)
    def div(self, a, b): return self._binary("RealDiv", a, b)
    def pow(self, a, b): return self._binary("Pow", a, b)
    def maximum(self, a, b): return self._binary("Maximum", a, b)
    def minimum(self, a, b): return self._binary("Minimum", a, b)
    def greater(self, a, b): return self._binary("Greater", a, b, "bool")
    def less(self, a, b): return self._binary("Less", a, b, "bool")
    def equal(self, a, b): return self._binary("Equal", a, b, "bool")
    def neg(self, x): return self._unary("Neg", x)
    def abs(self, x): return self._unary("Abs", x)
    def exp(self, x): return self._unary("Exp", x)
    def log(self, x): return self._unary("Log", x)
    def sqrt(self, x): return self._unary("Sqrt", x)
    def rsqrt(self, x): return self._unary("Rsqrt", x)
    def reciprocal(self, x): return self._unary("Reciprocal", x)
    def tanh(self, x): return self._unary("Tanh", x)
    def erf(self, x): return self._unary("Erf", x)
    def relu(self, x): return self.maximum(x, 0.0)

    def cast(self, x: Value, dtype: str) -> Value:
        return self.op("Cast", [x], x.shape, dtype, dst_type=dtype)

    def select(self, cond: Value, a: Any, b: Any) -> Value:
        like = a if isinstance(a, Value) else b
        a, b = self._as_value(a, like), self._as_value(b, like)
        return self.op("Select", [cond, a, b], cond.shape, like.dtype)

    def addn(self, *xs: Value) -> Value:
        return self.op("AddN", list(xs), xs[0].shape, xs[0].dtype, n=len(xs))

    def broadcast_to(self, x: Any, shape: Sequence[int], dtype: str = "float32") -> Value:
        x = x if isinstance(x, Value) else self._const(x, dtype)
        return self.op("BroadcastTo", [x], shape, x.dtype, shape=list(shape))

    def reshape(self, x: Value, shape: Sequence[int]) -> Value:
        shape = list(shape)
        if -1 in shape:
            known = 1
            for s in shape:
                known *= s if s != -1 else 1
            shape[shape.index(-1)] = x.tensor.size // max(known, 1)
        return self.op("Reshape", [x], shape, x.dtype, shape=shape)

    def transpose(self, x: Value, perm: Sequence[int]) -> Value:
        return self.op("Transpose", [x], [x.shape[p] for p in perm], x.dtype, perm=list(perm))

    def _reduce(self, name: str, x: Value, axis, keepdims: bool) -> Value:
        rank = len(x.shape)
        axes = list(range(rank)) if axis is None else [a % rank for a in ([axis] if isinstance(axis, int) else axis)]
        shape = [1 if d in axes else s for d, s in enumerate(x.shape)] if keepdims else \
                [s for d, s in enumerate(x.shape) if d not in axes]
        return self.op(name, [x], shape, x.dtype, axis=axes, keep_dims=keepdims)

    def reduce_sum(self, x: Value, axis=None, keepdims: bool = False) -> Value:
        return self._reduce("ReduceSum", x, axis, keepdims)

    def reduce_max(self, x: Value, axis=None, keepdims: bool = False) -> Value:
        return self._reduce("ReduceMax", x, axis, keepdims)

    def matmul(self, a: Value, b: Value, *, transpose_a: bool = False, transpose_b: bool = False,
               dst_type: str | None = None, bias: Value | None = None) -> Value:
        m = a.shape[-1] if transpose_a else a.shape[-2]
        n = b.shape[-2] if transpose_b else b.shape[-1]
        ins = [a, b] + ([bias] if bias is not None else [])
        dst = dst_type or a.dtype
        return self.op("MatMul", ins, [*a.shape[:-2], m, n], dst, transpose_a=transpose_a,
                       transpose_b=transpose_b, dst_type=dst)

    def inplace_assign(self, target: Value, value: Value, passthrough: Value | None = None,
                       fake_output: bool = True) -> Value:
        p = passthrough if passthrough is not None else value
        return self.op("InplaceAssign", [target, value, p], p.shape, p.dtype, fake_output=fake_output)

    def assign(self, target: Value, value: Value) -> Value:
        return self.op("Assign", [target, value], target.shape, target.dtype)
