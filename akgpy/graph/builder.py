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

import contextlib
import math
import numbers
import operator
from typing import Any, Sequence

import numpy as np

from ..errors import AkgpyError, AttrError, ShapeError
from ..ops.registry import broadcast_shapes, matmul_dims, normalize_axis, pool_extent
from .ir import Graph, Op, Tensor


def _index(v: Any) -> int:
    """An int, or a numpy integer, as an int; a bool or a float is refused (4.7 is not a dim)."""
    if isinstance(v, (bool, np.bool_)):
        raise TypeError(f"{v!r} is a bool")
    return operator.index(v)


def _dims(shape: Any, *, tensor: str) -> tuple[int, ...]:
    """A shape as a tuple of non-negative ints, refusing what numpy would refuse or truncate."""
    if not isinstance(shape, (list, tuple)) and not (isinstance(shape, np.ndarray) and shape.ndim == 1):
        raise ShapeError(f"shape must be a list or tuple of ints, got {shape!r:.60}", tensor=tensor)
    try:
        dims = tuple(_index(s) for s in shape)
    except TypeError:
        raise ShapeError(f"shape {list(shape)!r:.60} must hold ints", tensor=tensor) from None
    if any(s < 0 for s in dims):
        raise ShapeError(f"shape {list(dims)} has a negative dim", tensor=tensor)
    return dims


def _ints(values: Any, what: str, *, tensor: str) -> list[int]:
    """An int or a list of ints (numpy integers included) for an axis-like argument."""
    seq = values if isinstance(values, (list, tuple)) else [values]
    try:
        return [_index(v) for v in seq]
    except TypeError:
        raise AttrError(f"{what} must be an int or a list of ints, got {values!r:.60}", tensor=tensor) from None


def _distinct_axes(axes: list[int], rank: int, *, tensor: str) -> list[int]:
    """numpy's reading of a reduction's axes: an axis named twice (1 and -1 too) is refused."""
    out = [normalize_axis(a, rank, tensor=tensor) for a in axes]
    if len(set(out)) != len(out):
        raise AttrError(f"axis {axes} names an axis twice", tensor=tensor)
    return sorted(out)


def _reshape_dims(size: int, spec: Any, *, tensor: str) -> list[int]:
    """numpy's reshape spec: at most one -1, which takes the size the other dims leave."""
    if isinstance(spec, np.ndarray) and spec.ndim == 1:
        spec = spec.tolist()
    if not isinstance(spec, (list, tuple)):
        raise ShapeError(f"shape must be a list or tuple of ints, got {spec!r:.60}", tensor=tensor)
    unknown = [d for d, s in enumerate(spec) if not isinstance(s, bool) and isinstance(s, numbers.Integral) and s == -1]
    if len(unknown) > 1:
        raise ShapeError(f"shape {list(spec)} has more than one -1", tensor=tensor)
    dims = list(_dims([1 if d in unknown else s for d, s in enumerate(spec)], tensor=tensor))
    if unknown:
        rest = math.prod(dims)
        if rest == 0 or size % rest:
            raise ShapeError(f"cannot reshape {size} elements to {list(spec)}", tensor=tensor)
        dims[unknown[0]] = size // rest
    return dims


def _dtype_name(dtype: Any) -> Any:
    """A dtype as the format spells it: np.float32 and np.dtype("float16") are read as numpy reads
    them; a string, or anything numpy cannot read, is left for the validator to check."""
    if isinstance(dtype, str):
        return dtype
    from .. import dtypes
    try:
        return dtypes.from_numpy(np.dtype(dtype))
    except (TypeError, AkgpyError):
        return dtype


def _need_value(x: Any, op: str) -> None:
    if not isinstance(x, Value):
        raise ShapeError(f"expected a Value of this builder, got {type(x).__name__} {x!r:.40}", op=op)


@contextlib.contextmanager
def _for_op(name: str, tensor: str):
    """Name the op in an error a shared helper raised without one."""
    try:
        yield
    except AkgpyError as e:
        if e.op is not None:
            raise
        raise type(e)(e.message, op=name, tensor=e.tensor or tensor) from None


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
    def reshape(self, *shape): return self.b.reshape(self, shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list, np.ndarray)) else shape)
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
        if hasattr(v, "item") and getattr(v, "ndim", None) == 0:  # a numpy scalar
            v = v.item()
        if not isinstance(v, (bool, int, float)):
            raise ShapeError(f"an operand must be a Value or a real number, got {type(v).__name__} {v!r:.40}")
        self._tensors[name] = Tensor(name, (1,), dtype, value=v)
        return Value(self, name)

    def _as_value(self, x: Any, like: Value) -> Value:
        if isinstance(x, Value):
            return x
        return self._const(x, like.dtype)

    def op(self, name: str, inputs: Sequence[Value], shape: Sequence[int], dtype: str, fmt: str = "DefaultFormat",
           /, **attrs) -> Value:
        """Add any op of the table with an explicit output desc (the generic escape hatch)."""
        for v in inputs:
            _need_value(v, name)
        out = self._fresh(name.lower())
        self._tensors[out] = Tensor(out, _dims(shape, tensor=out), _dtype_name(dtype), fmt)
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
        _need_value(x, name)
        return self.op(name, [x], x.shape, x.dtype)

    # -- public API ----------------------------------------------------------------------
    def input(self, name: str, shape: Sequence[int], dtype: str = "float32", fmt: str = "DefaultFormat") -> Value:
        if not isinstance(name, str) or not name:
            raise ShapeError(f"an input name must be a non-empty string, got {name!r:.40}")
        if name in self._tensors:
            raise ShapeError("input name used twice", tensor=name)
        self._tensors[name] = Tensor(name, _dims(shape, tensor=name), _dtype_name(dtype), fmt)
        self._inputs.append(name)
        return Value(self, name)

    def weight(self, name: str, value) -> Value:
        """An input whose value is known now (a model weight): the program binds it itself."""
        from .. import dtypes
        arr = np.ascontiguousarray(value)
        v = self.input(name, arr.shape, dtypes.from_numpy(arr.dtype, tensor=name))
        self._bound[name] = arr
        return v

    def output(self, *values: Value) -> None:
        for v in values:
            _need_value(v, "output")
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
        _need_value(x, "Cast")
        dtype = _dtype_name(dtype)
        return self.op("Cast", [x], x.shape, dtype, dst_type=dtype)

    def select(self, cond: Value, a: Any, b: Any) -> Value:
        _need_value(cond, "Select")
        if not isinstance(a, Value) and not isinstance(b, Value):
            raise ShapeError("Select needs at least one tensor branch", op="Select", tensor=cond.name)
        like = a if isinstance(a, Value) else b
        a, b = self._as_value(a, like), self._as_value(b, like)
        return self.op("Select", [cond, a, b], cond.shape, like.dtype)

    def addn(self, *xs: Value) -> Value:
        if not xs:
            raise ShapeError("AddN needs at least one operand", op="AddN")
        for v in xs:
            _need_value(v, "AddN")
        return self.op("AddN", list(xs), xs[0].shape, xs[0].dtype, n=len(xs))

    def broadcast_to(self, x: Any, shape: Sequence[int], dtype: str = "float32") -> Value:
        x = x if isinstance(x, Value) else self._const(x, _dtype_name(dtype))
        with _for_op("BroadcastTo", x.name):
            shape = list(_dims(shape, tensor=x.name))
        return self.op("BroadcastTo", [x], shape, x.dtype, shape=shape)

    def reshape(self, x: Value, shape: Sequence[int]) -> Value:
        _need_value(x, "Reshape")
        with _for_op("Reshape", x.name):
            shape = _reshape_dims(x.tensor.size, shape, tensor=x.name)
        return self.op("Reshape", [x], shape, x.dtype, shape=shape)

    def transpose(self, x: Value, perm: Sequence[int]) -> Value:
        _need_value(x, "Transpose")
        rank = len(x.shape)
        with _for_op("Transpose", x.name):
            perm = [normalize_axis(p, rank, tensor=x.name) for p in _ints(perm, "perm", tensor=x.name)]
            if sorted(perm) != list(range(rank)):
                raise AttrError(f"perm {perm} is not a permutation of rank {rank}", tensor=x.name)
        return self.op("Transpose", [x], [x.shape[p] for p in perm], x.dtype, perm=perm)

    def _reduce(self, name: str, x: Value, axis, keepdims: bool) -> Value:
        _need_value(x, name)
        rank = len(x.shape)
        with _for_op(name, x.name):
            if isinstance(axis, (list, tuple)) and not axis:  # numpy reduces over nothing; the table, over all
                raise AttrError("axis=() reduces no axis; pass axis=None to reduce every axis", tensor=x.name)
            axes = list(range(rank)) if axis is None else _distinct_axes(_ints(axis, "axis", tensor=x.name), rank,
                                                                          tensor=x.name)
        shape = [1 if d in axes else s for d, s in enumerate(x.shape)] if keepdims else \
                [s for d, s in enumerate(x.shape) if d not in axes]
        return self.op(name, [x], shape, x.dtype, axis=axes, keep_dims=keepdims)

    def reduce_sum(self, x: Value, axis=None, keepdims: bool = False) -> Value:
        return self._reduce("ReduceSum", x, axis, keepdims)

    def reduce_max(self, x: Value, axis=None, keepdims: bool = False) -> Value:
        return self._reduce("ReduceMax", x, axis, keepdims)

    def matmul(self, a: Value, b: Value, *, transpose_a: bool = False, transpose_b: bool = False,
               dst_type: str | None = None, bias: Value | None = None) -> Value:
        ins = [a, b] + ([bias] if bias is not None else [])
        for v in ins:
            _need_value(v, "MatMul")
        attrs = {"transpose_a": bool(transpose_a), "transpose_b": bool(transpose_b)}
        with _for_op("MatMul", b.name):
            batch, m, _, n = matmul_dims(Op("MatMul", (a.name, b.name), (), attrs), a.tensor, b.tensor)
        dst = _dtype_name(dst_type) if dst_type is not None else a.dtype
        return self.op("MatMul", ins, [*batch, m, n], dst, **attrs, dst_type=dst)

    def conv2d_nchw(self, x: Value, w: Value | np.ndarray, *, stride: Sequence[int] = (1, 1),
                    pads: Sequence[int] = (0, 0, 0, 0), groups: int = 1, weight_name: str = "w") -> Value:
        """A framework's convolution (NCHW data, OIHW weight; pads top, left, bottom, right) as akgpy's
        NHWC ops: Conv2D on OHWI weights, or an NHWC GEMM x[n*h*w, c] @ W[c, o] for a dense
        unpadded 1x1 stride-1 one. Every form sits between the same two Transposes, which
        graph/layout.py cancels along a conv chain. An array weight is bound here, already in the
        form the kernel reads (`weight_name` + a suffix); a Value weight is transposed in the graph."""
        n, c, h, wd = x.shape
        o, _, kh, kw = w.shape
        sh, sw = stride
        xt = self.transpose(x, [0, 2, 3, 1])
        if kh == kw == 1 and sh == sw == 1 and not any(pads) and groups == 1:
            wm = (self.weight(weight_name + "_ci_co", np.ascontiguousarray(w.reshape(o, c).T))
                  if isinstance(w, np.ndarray) else self.transpose(self.reshape(w, [o, c]), [1, 0]))
            y = self.reshape(self.matmul(self.reshape(xt, [n * h * wd, c]), wm), [n, h, wd, o])
            return self.transpose(y, [0, 3, 1, 2])
        wt = (self.weight(weight_name + "_ohwi", np.ascontiguousarray(w.transpose(0, 2, 3, 1)))
              if isinstance(w, np.ndarray) else self.transpose(w, [0, 2, 3, 1]))
        ho, wo = (h + pads[0] + pads[2] - kh) // sh + 1, (wd + pads[1] + pads[3] - kw) // sw + 1
        if groups == c and groups > 1 and any(pads):
            # depthwise: its taps are written out elementwise, where a guard per tap read cost
            # more than one padded copy (bench/results/cnn_ops.md); dense convs read their
            # padding through pad_list (top, bottom, left, right) with no padded copy
            xt = self.op("PadAkg", [xt], [n, h + pads[0] + pads[2], wd + pads[1] + pads[3], c], xt.dtype,
                         head=[0, pads[0], pads[1], 0], tail=[0, pads[2], pads[3], 0], pad_val=0.0)
            pads = (0, 0, 0, 0)
        pad_list = [pads[0], pads[2], pads[1], pads[3]]
        y = self.op("Conv2D", [xt, wt], [n, ho, wo, o], x.dtype, stride=[1, 1, sh, sw], pad_list=pad_list,
                    dilation=[1, 1, 1, 1], **({"groups": groups} if groups != 1 else {}))
        return self.transpose(y, [0, 3, 1, 2])

    def pool2d(self, x: Value, kind: str, kernel: Sequence[int], stride: Sequence[int], pad_head: Sequence[int],
               pad_tail: Sequence[int], ceil_mode: bool = False, count_include_pad: bool = False) -> Value:
        """Pool2D ("max" or "avg") over x's last two dims, its output extents by the op table's rule."""
        out = [pool_extent(n, k, s, h, t, ceil_mode)
               for n, k, s, h, t in zip(x.shape[-2:], kernel, stride, pad_head, pad_tail)]
        return self.op("Pool2D", [x], [*x.shape[:-2], *out], x.dtype, pool_type=kind, kernel=list(kernel),
                       stride=list(stride), pad_head=list(pad_head), pad_tail=list(pad_tail), ceil_mode=bool(ceil_mode),
                       count_include_pad=bool(count_include_pad))

    def inplace_assign(self, target: Value, value: Value, passthrough: Value | None = None,
                       fake_output: bool = True) -> Value:
        p = passthrough if passthrough is not None else value
        _need_value(p, "InplaceAssign")
        return self.op("InplaceAssign", [target, value, p], p.shape, p.dtype, fake_output=fake_output)

    def assign(self, target: Value, value: Value) -> Value:
        _need_value(target, "Assign")
        return self.op("Assign", [target, value], target.shape, target.dtype)
