"""numpy interpreter of a Graph: the oracle every kernel is checked against.

Independence is the point: this module imports neither tvm nor akgpy's TE builders, and it
computes each op in float64 (complex128 for complex, int64 for ints) and rounds the result
to the tensor's declared dtype, so a kernel that keeps every declared rounding matches it
to within last-place differences of transcendental functions and summation order.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from . import dtypes
from .errors import ArgumentError, UnsupportedOpError
from .graph.ir import NZ, Graph, Op, Tensor
from .ops.registry import canonical, matmul_dims, reduce_axes, uses_logical_broadcast


def _wide(x: np.ndarray) -> np.ndarray:
    if x.dtype.kind == "f":
        return x.astype(np.float64)
    if x.dtype.kind == "c":
        return x.astype(np.complex128)
    if x.dtype.kind in "iu":
        return x.astype(np.int64)
    return x


def nz_to_logical(x: np.ndarray) -> np.ndarray:
    *b, n1, m1, m0, n0 = x.shape
    r = len(b)
    return x.transpose(*range(r), r + 1, r + 2, r, r + 3).reshape(*b, m1 * m0, n1 * n0)


def logical_to_nz(x: np.ndarray, shape: Sequence[int]) -> np.ndarray:
    *b, n1, m1, m0, n0 = shape
    r = len(b)
    return x.reshape(*b, m1, m0, n1, n0).transpose(*range(r), r + 2, r, r + 1, r + 3)


def _elementwise(fn: Callable) -> Callable:
    """Apply fn with numpy broadcasting, or FRACTAL_NZ logical broadcasting when formats mix."""
    def run(op: Op, args: list, ins: list[Tensor], out: Tensor):
        if uses_logical_broadcast(ins, out):
            args = [nz_to_logical(a) if t.format == NZ and not t.is_const else a for a, t in zip(args, ins)]
            r = np.asarray(fn(*args))
            return logical_to_nz(np.broadcast_to(r, out.logical_shape), out.shape) if out.format == NZ else r
        return fn(*args)
    return run


def _truediv(a, b):
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        return _int_div(a, b)
    with np.errstate(divide="ignore", invalid="ignore"):
        return a / b


def _int_div(a, b):
    """Integer division truncated toward zero, exactly (not through float64), with numpy's
    integer answers where C's are undefined: a / 0 is 0, and INT_MIN / -1 wraps to INT_MIN
    (docs/semantics.md)."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    d = np.where(b == 0, 1, b)
    with np.errstate(all="ignore"):
        q = a // d
        q = q + ((a - q * d != 0) & ((a < 0) != (d < 0)))  # floor -> toward zero
    return np.where(b == 0, 0, q)


def _reciprocal(x):
    return _int_div(np.ones_like(x), x) if x.dtype.kind in "iu" else 1.0 / x


def _reduce(fn):
    def run(op, args, ins, out):
        axes = reduce_axes(op, ins[0])
        x = args[0]
        if x.ndim == 0:
            return x
        return fn(x, axis=axes, keepdims=True)
    return run


def _matmul(op, args, ins, out):
    a, b = args[0], args[1]
    if ins[0].format == NZ:
        a = nz_to_logical(a)
    if ins[1].format == NZ:
        b = nz_to_logical(b)
    matmul_dims(op, ins[0], ins[1])
    if op.attrs.get("transpose_a", False):
        a = np.swapaxes(a, -1, -2)
    if op.attrs.get("transpose_b", False):
        b = np.swapaxes(b, -1, -2)
    c = np.matmul(a, b)
    if len(args) == 3:
        c = c + args[2]
    return logical_to_nz(c, out.shape) if out.format == NZ else c


def _conv2d(op, args, ins, out):
    x, w = args
    sh, sw = tuple(op.attrs.get("stride", (1, 1, 1, 1)))[-2:]
    pt, pb, pl, pr = op.attrs.get("pad_list", (0, 0, 0, 0))
    x = np.pad(x, [(0, 0), (pt, pb), (pl, pr), (0, 0)])
    n, oh, ow, o = out.shape
    _, kh, kw, cg = w.shape
    g = x.shape[-1] // cg  # groups: the registry checked that they divide both channel counts
    acc = np.zeros((n, oh, ow, g, o // g))
    wg = w.reshape(g, o // g, kh, kw, cg)
    for i in range(kh):  # one GEMM per filter tap keeps memory at one shifted copy of x
        for j in range(kw):
            patch = x[:, i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw, :]
            if g == 1:
                acc[..., 0, :] += patch @ w[:, i, j, :].T
            else:
                acc += np.einsum("nhwgc,goc->nhwgo", patch.reshape(n, oh, ow, g, cg), wg[:, :, i, j, :])
    return acc.reshape(n, oh, ow, o)


def _pool2d(op, args, ins, out):
    """Windows over the last two dims of x padded to cover every window; a 0/1 mask padded the
    same way counts the terms each average divides by. NHWC data: the same on an NCHW view."""
    x = args[0]
    a = op.attrs
    if a.get("data_format", "NCHW") == "NHWC":
        return _pool2d_nchw(a, x.transpose(0, 3, 1, 2), (out.shape[1], out.shape[2])).transpose(0, 2, 3, 1)
    return _pool2d_nchw(a, x, out.shape[-2:])


def _pool2d_nchw(a, x, out_hw):
    (kh, kw), (sh, sw) = a["kernel"], a.get("stride", [1, 1])
    head, tail = a.get("pad_head", [0, 0]), a.get("pad_tail", [0, 0])
    oh, ow = out_hw
    h, w = x.shape[-2:]
    # rows past the declared tail padding that ceil_mode's last window covers
    extra = [max((od - 1) * s + k - (size + ph + pt), 0)
             for od, s, k, size, ph, pt in ((oh, sh, kh, h, head[0], tail[0]), (ow, sw, kw, w, head[1], tail[1]))]
    lead = [(0, 0)] * (x.ndim - 2)
    widths = lead + [(head[0], tail[0] + extra[0]), (head[1], tail[1] + extra[1])]
    is_max = a["pool_type"] == "max"
    if is_max:
        fill = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    else:
        fill = 0
    xp = np.pad(x, widths, constant_values=fill)
    if a.get("count_include_pad", False):  # padding counts, ceil_mode's extra rows do not
        ones = np.pad(np.ones((h + head[0] + tail[0], w + head[1] + tail[1])), [(0, extra[0]), (0, extra[1])])
    else:
        ones = np.pad(np.ones((h, w)), widths[-2:])
    acc, count = None, np.zeros((oh, ow))
    for i in range(kh):
        for j in range(kw):
            win = xp[..., i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw]
            count += ones[i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw]
            acc = win if acc is None else (np.maximum(acc, win) if is_max else acc + win)
    return acc if is_max else acc / count


def _one_hot(op, args, ins, out):
    idx, on, off = args
    depth = op.attrs["depth"]
    axis = op.attrs.get("axis", -1) % (idx.ndim + 1)
    hot = np.expand_dims(idx, axis) == np.arange(depth).reshape([-1 if d == axis else 1 for d in range(idx.ndim + 1)])
    return np.where(hot, on.reshape(()), off.reshape(()))


def _custom(op, args, ins, out):
    if op.attrs.get("func_type") != "hybrid" or "func_source_str" not in op.attrs:
        raise UnsupportedOpError("only hybrid Custom ops with func_source_str have a reference", op=op.name)
    ns: dict[str, Any] = {"output_tensor": lambda shape, dtype: np.zeros(shape, np.float64),
                          "range": range, "np": np}
    exec(op.attrs["func_source_str"], ns)  # AKG's generator does the same: hybrid script is numpy-compatible
    return ns[op.attrs["func_name"]](*[a.copy() for a in args])


def _pad(op, args, ins, out):
    return np.pad(args[0], list(zip(op.attrs["head"], op.attrs["tail"])), constant_values=op.attrs.get("pad_val", 0))


def _unpad(op, args, ins, out):
    return args[0][tuple(slice(0, s) for s in out.shape)]


_erf = np.frompyfunc(math.erf, 1, 1)


def _slice(op, args, ins, out):
    a = op.attrs
    strides = a.get("strides", [1] * args[0].ndim)
    return args[0][tuple(slice(b, e, s) for b, e, s in zip(a["begin"], a["end"], strides))]


def _gather(op, args, ins, out):
    params, idx = args
    axis = op.attrs.get("axis", 0)
    n = params.shape[axis]
    if idx.size and (idx.min() < -n or idx.max() >= n):
        bad = int(idx.max() if idx.max() >= n else idx.min())
        raise ArgumentError(f"index {bad} out of range for axis {axis} of size {n}", op=op.name, tensor=ins[1].name)
    return np.take(params, idx, axis=axis)


def _gather_elements(op, args, ins, out):
    x, idx = args
    axis = op.attrs.get("axis", 0) % x.ndim
    n = x.shape[axis]
    if idx.size and (idx.min() < -n or idx.max() >= n):
        bad = int(idx.max() if idx.max() >= n else idx.min())
        raise ArgumentError(f"index {bad} out of range for axis {axis} of size {n}", op=op.name, tensor=ins[1].name)
    # the part of x that indices spans on the other axes (ONNX allows indices smaller than x there)
    part = x[tuple(slice(None) if d == axis else slice(0, s) for d, s in enumerate(idx.shape))]
    return np.take_along_axis(part, np.where(idx < 0, idx + n, idx).astype(np.int64), axis=axis)


def _cast(op, args, ins, out):
    x = args[0]
    if out.dtype == "bool":
        return x != 0
    return x


# Ops that are one numpy function in any dtype (also used by bench/peers.py's numpy peer).
UFUNCS: dict[str, Callable] = {
    "Neg": np.negative, "Abs": np.abs, "Exp": np.exp, "Log": np.log, "Sqrt": np.sqrt,
    "Rsqrt": lambda x: 1.0 / np.sqrt(x), "Reciprocal": lambda x: 1.0 / x, "Tanh": np.tanh,
    "Add": np.add, "Sub": np.subtract, "Mul": np.multiply,
    "Maximum": np.maximum, "Minimum": np.minimum, "Pow": np.power,
    "Greater": np.greater, "GreaterEqual": np.greater_equal, "Less": np.less,
    "LessEqual": np.less_equal, "Equal": np.equal,
}

E = _elementwise
REFERENCE: dict[str, Callable[[Op, list, list[Tensor], Tensor], Any]] = {
    **{name: E(fn) for name, fn in UFUNCS.items()},
    "RealDiv": E(_truediv), "Reciprocal": E(_reciprocal),
    "Erf": E(lambda x: _erf(x).astype(np.float64)),
    "Concat": lambda op, args, ins, out: np.concatenate(args, axis=op.attrs["axis"]),
    "StridedSlice": _slice, "Gather": _gather, "GatherElements": _gather_elements,
    "Select": E(lambda c, x, y: np.where(c != 0, x, y)),
    "Cast": _cast,
    "AddN": None,  # evaluate(): a left fold rounding every partial sum (topi elemwise_sum, AKG's generator)
    "Complex": E(lambda re, im: re + 1j * im), "CReal": E(np.real), "CImag": E(np.imag),
    "BroadcastTo": lambda op, args, ins, out: np.broadcast_to(args[0], out.shape),
    "OneHot": _one_hot,
    "Reshape": lambda op, args, ins, out: args[0].reshape(out.shape),
    "Transpose": lambda op, args, ins, out: np.transpose(args[0], op.attrs["perm"]),
    "PadAkg": _pad, "UnPadAkg": _unpad, "Pool2D": _pool2d,
    "ReduceSum": _reduce(np.sum), "ReduceMax": _reduce(np.max),
    "MatMul": _matmul, "Conv2D": _conv2d, "Custom": _custom,
    # InplaceAssign/Assign are handled by evaluate(): they rebind a buffer, not compute.
    "InplaceAssign": None, "Assign": None,
}


def _round(value: Any, t: Tensor) -> np.ndarray:
    arr = np.asarray(value)
    with np.errstate(invalid="ignore", over="ignore"):
        arr = arr.astype(dtypes.to_numpy(t.dtype))
    if arr.size == t.size:
        return arr.reshape(t.shape)
    return np.broadcast_to(arr, t.shape).copy()


def const_array(t: Tensor) -> np.ndarray:
    return np.full(t.shape, t.value, dtype=dtypes.to_numpy(t.dtype))


def apply_op(op: Op, args: Sequence[np.ndarray], ins: Sequence[Tensor], out: Tensor) -> np.ndarray:
    """One op on arrays: computed wide (float64/int64), rounded to the declared dtype."""
    fn = REFERENCE.get(canonical(op.name))
    if fn is None:
        raise UnsupportedOpError("no numpy implementation", op=op.name, tensor=out.name)
    with np.errstate(all="ignore"):
        return _round(fn(op, [_wide(np.asarray(a)) for a in args], list(ins), out), out)


def bind_inputs(g: Graph, inputs: Sequence[Any] | Mapping[str, Any]) -> dict[str, np.ndarray]:
    """`inputs`: all of g.inputs, or only g.free_inputs (bound values fill the rest)."""
    if isinstance(inputs, Mapping):
        inputs = {**g.bound, **inputs}
    elif g.bound and len(inputs) == len(g.free_inputs):
        given = dict(zip(g.free_inputs, inputs))
        inputs = [given[n] if n in given else g.bound[n] for n in g.inputs]
    if isinstance(inputs, Mapping):
        missing = [n for n in g.inputs if n not in inputs]
        if missing:
            raise ArgumentError(f"no value given for input(s) {missing}", tensor=missing[0])
        inputs = [inputs[n] for n in g.inputs]
    if len(inputs) != len(g.inputs):
        raise ArgumentError(f"graph {g.name} takes {len(g.inputs)} inputs, got {len(inputs)}")
    env = {}
    for name, a in zip(g.inputs, inputs):
        t = g.tensors[name]
        a = np.asarray(a)
        if a.shape != t.shape or a.dtype != dtypes.to_numpy(t.dtype):
            raise ArgumentError(f"expected {t.dtype}{list(t.shape)}, got {a.dtype}{list(a.shape)}", tensor=name)
        env[name] = a
    return env


def evaluate(g: Graph, inputs: Sequence[Any] | Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Value of every tensor after the graph ran; in-place targets hold their final value."""
    env = bind_inputs(g, inputs)
    T = g.tensors
    for i, op in enumerate(g.ops):
        ins = [T[n] for n in op.inputs]
        args = [const_array(t) if t.is_const else env[t.name] for t in ins]
        out = T[op.outputs[0]]
        if op.name == "InplaceAssign":
            env[op.inputs[0]] = _round(args[1], ins[0])
            env[out.name] = _round(args[2], out)
            continue
        if op.name == "Assign":
            env[op.inputs[0]] = _round(args[1], ins[0])
            # a fake_output slot holds nothing (never written): zeros stand for it
            fake = bool(op.attrs.get("fake_output", False))
            env[out.name] = np.zeros(out.shape, dtypes.to_numpy(out.dtype)) if fake else _round(args[1], out)
            continue
        if op.name == "AddN":
            acc = args[0]
            for a in args[1:]:
                acc = _round(np.add(_wide(acc), _wide(a)), out)
            env[out.name] = _round(acc, out)
            continue
        fn = REFERENCE.get(canonical(op.name))
        if fn is None:
            raise UnsupportedOpError("no numpy reference", op=op.label(i))
        with np.errstate(all="ignore"):
            env[out.name] = _round(fn(op, [_wide(a) for a in args], ins, out), out)
    return env


def run(g: Graph, inputs: Sequence[Any] | Mapping[str, Any]) -> tuple[np.ndarray, ...]:
    """Mirror of a compiled program's call: returns the real outputs in order and writes
    in-place (InplaceAssign/Assign) results into the given input arrays."""
    env = evaluate(g, inputs)  # validates the inputs first
    arrays = [inputs[n] for n in g.inputs] if isinstance(inputs, Mapping) else list(inputs)
    for target in g.inplace_targets():
        k = g.inputs.index(target)
        np.copyto(arrays[k], env[target])
    return tuple(env[n] for n in g.real_outputs)
