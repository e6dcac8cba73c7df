"""Eager peers for bench/bench_cpu.py: a numpy and a torch executor of an akgpy Graph.

Both compute in the graph's OWN dtypes (float16 stays float16), unlike akgpy.reference, which
computes in float64. The semantics follow akgpy/reference.py op by op: elementwise ops broadcast
numpy-style, Reshape goes to the output desc's shape, reductions keep dims and are then viewed as
the output shape (float16 sums accumulate in float32), AddN is a left fold, MatMul on
float16 accumulate in float32 (numpy/torch matmul on float32 copies), InplaceAssign/Assign rebind the target and write its final value
back into the caller's input array after the graph ran (reference.run does the same).

Each table maps an op name to a builder `(op, ins, out) -> fn(*args)`; attributes are resolved
once, when the executor is built, so that torch.compile traces plain tensor code. Intermediates
are dropped after their last use, as an eager framework's refcounting would. FRACTAL_NZ tensors,
Conv2D, Complex/CReal/CImag, OneHot and Custom are not in the bench set and raise Unsupported
(the bench prints "n/a" for that peer).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from akgpy import dtypes
from akgpy.graph.ir import NZ, Graph, Op, Tensor
from akgpy.ops.registry import matmul_dims, reduce_axes
from akgpy.reference import UFUNCS


class Unsupported(Exception):
    pass


def _plain(op: Op, ins, out) -> None:
    if any(t.format == NZ for t in [*ins, out]):
        raise Unsupported(f"{op.name} with FRACTAL_NZ operands")


def _ew(fn: Callable) -> Callable:
    def build(op, ins, out):
        _plain(op, ins, out)
        return fn
    return build


def _pad_pairs(op: Op):
    return list(zip(op.attrs["head"], op.attrs["tail"])), op.attrs.get("pad_val", 0)


# -- numpy -----------------------------------------------------------------------------------

def _np_div(a, b):
    if np.asarray(a).dtype.kind in "iu" and np.asarray(b).dtype.kind in "iu":  # TVM int div truncates
        return np.trunc(np.true_divide(a, b))
    return np.true_divide(a, b)


def _np_reduce(kind: str):
    def build(op, ins, out):
        _plain(op, ins, out)
        axes = reduce_axes(op, ins[0])
        acc = np.float32 if ins[0].dtype == "float16" else None
        if kind == "sum":
            return lambda x: x if x.ndim == 0 else np.sum(x, axis=axes, keepdims=True, dtype=acc)
        return lambda x: x if x.ndim == 0 else np.max(x, axis=axes, keepdims=True)
    return build


def _matmul_spec(op, ins, out):
    """(transpose_a, transpose_b, widen fp16 operands to fp32) for either executor."""
    _plain(op, ins, out)
    matmul_dims(op, ins[0], ins[1])
    return (bool(op.attrs.get("transpose_a", False)), bool(op.attrs.get("transpose_b", False)),
            any(t.dtype == "float16" for t in ins))


def _np_matmul(op, ins, out):
    ta, tb, wide = _matmul_spec(op, ins, out)

    def f(a, b, bias=None):
        if wide:
            a, b = a.astype(np.float32), b.astype(np.float32)
        c = np.matmul(np.swapaxes(a, -1, -2) if ta else a, np.swapaxes(b, -1, -2) if tb else b)
        return c if bias is None else c + bias
    return f


def _np_cast(op, ins, out):
    dt = dtypes.to_numpy(out.dtype)
    return (lambda x: np.not_equal(x, 0)) if out.dtype == "bool" else (lambda x: np.asarray(x).astype(dt))


def _np_addn(op, ins, out):  # shared by both tables: a left fold, each partial sum in the dtype
    def f(*xs):
        acc = xs[0]
        for x in xs[1:]:
            acc = acc + x
        return acc
    return f


def _np_pad(op, ins, out):
    pairs, val = _pad_pairs(op)
    return lambda x: np.pad(x, pairs, constant_values=val)


NUMPY_OPS: dict[str, Callable] = {
    **{name: _ew(fn) for name, fn in UFUNCS.items()},
    "RealDiv": _ew(_np_div),
    "Select": _ew(lambda c, x, y: np.where(c if np.asarray(c).dtype == np.bool_ else c != 0, x, y)),
    "Cast": _np_cast, "AddN": _np_addn,
    "BroadcastTo": lambda op, ins, out: (lambda x: np.broadcast_to(x, out.shape)),
    "Reshape": lambda op, ins, out: (lambda x: np.reshape(x, out.shape)),
    "Transpose": lambda op, ins, out: (lambda x, p=tuple(op.attrs["perm"]): np.transpose(x, p)),
    "PadAkg": _np_pad,
    "UnPadAkg": lambda op, ins, out: (lambda x, i=tuple(slice(0, n) for n in out.shape): x[i]),
    "ReduceSum": _np_reduce("sum"), "ReduceMax": _np_reduce("max"),
    "MatMul": _np_matmul,
}


class NumpyBackend:
    name = "numpy"
    table = NUMPY_OPS

    @staticmethod
    def const(t: Tensor):
        return np.asarray(t.value, dtype=dtypes.to_numpy(t.dtype))[()]  # a typed (strong) numpy scalar

    @staticmethod
    def fit(r, shape, dt, size):
        r = np.asarray(r)
        if r.dtype != dt:
            with np.errstate(all="ignore"):
                r = r.astype(dt)
        if r.shape != shape:
            r = r.reshape(shape) if r.size == size else np.broadcast_to(r, shape)
        return r

    @staticmethod
    def finish(outs, arrays, targets):
        outs = [np.ascontiguousarray(o) for o in outs]
        written = [arrays[k] for k, _ in targets]
        outs = [o.copy() if any(np.may_share_memory(o, w) for w in written) else o for o in outs]
        for k, name_value in targets:
            np.copyto(arrays[k], name_value[1])
        return tuple(outs)

    @staticmethod
    def dtype(t: Tensor):
        return dtypes.to_numpy(t.dtype)


# -- torch -----------------------------------------------------------------------------------

def torch_dtype(t: Tensor):
    import torch
    return torch.from_numpy(np.empty(0, dtypes.to_numpy(t.dtype))).dtype


def _torch_table() -> dict[str, Callable]:
    """Built on first use, so that the numpy peer runs without torch installed. Constants arrive
    as Python scalars: they keep the tensor operand's dtype and fold into inductor's kernels."""
    import torch
    F = torch.nn.functional

    def tensor(x, dt):
        return x if isinstance(x, torch.Tensor) else torch.tensor(x, dtype=dt)

    def maxmin(fn, clamp_kw):
        def build(op, ins, out):
            _plain(op, ins, out)
            if ins[0].is_const != ins[1].is_const:  # one scalar: clamp takes it without a tensor
                i = 1 if ins[0].is_const else 0
                return lambda *ab: torch.clamp(ab[i], **{clamp_kw: ab[1 - i]})
            d0, d1 = torch_dtype(ins[0]), torch_dtype(ins[1])
            return lambda a, b: fn(tensor(a, d0), tensor(b, d1))
        return build

    def div(op, ins, out):
        _plain(op, ins, out)
        if ins[0].dtype in dtypes.INTS and ins[1].dtype in dtypes.INTS:  # TVM int div truncates
            return lambda a, b, d=torch_dtype(ins[0]): torch.div(tensor(a, d), b, rounding_mode="trunc")
        return lambda a, b: a / b

    def cast(op, ins, out):
        dt, src = torch_dtype(out), torch_dtype(ins[0])
        conv = (lambda x: x != 0) if out.dtype == "bool" else (lambda x: x.to(dt))
        return (lambda x: conv(tensor(x, src))) if ins[0].is_const else conv

    def reduce(kind):
        def build(op, ins, out):
            _plain(op, ins, out)
            axes = reduce_axes(op, ins[0])
            if not ins[0].shape:
                return lambda x: x
            if kind == "max":
                return lambda x: torch.amax(x, dim=axes, keepdim=True)
            acc = torch.float32 if ins[0].dtype == "float16" else None
            return lambda x: torch.sum(x, dim=axes, keepdim=True, dtype=acc)
        return build

    def matmul(op, ins, out):
        ta, tb, wide = _matmul_spec(op, ins, out)

        def f(a, b, bias=None):
            if wide:
                a, b = a.float(), b.float()
            c = torch.matmul(a.transpose(-1, -2) if ta else a, b.transpose(-1, -2) if tb else b)
            return c if bias is None else c + bias
        return f

    def broadcast(op, ins, out):
        shape, dt = tuple(out.shape), torch_dtype(out)
        return (lambda x: torch.full(shape, x, dtype=dt)) if ins[0].is_const else (lambda x: x.expand(shape))

    def pad(op, ins, out):
        pairs, val = _pad_pairs(op)
        flat = [v for p in reversed(pairs) for v in p]
        return lambda x: F.pad(x, flat, value=val)

    def select(op, ins, out):
        _plain(op, ins, out)
        is_bool = ins[0].dtype == "bool"
        return lambda c, x, y: torch.where(c if is_bool else c != 0, x, y)

    return {
        "Neg": _ew(lambda x: -x), "Abs": _ew(torch.abs), "Exp": _ew(torch.exp), "Log": _ew(torch.log),
        "Sqrt": _ew(torch.sqrt), "Rsqrt": _ew(lambda x: 1.0 / torch.sqrt(x)), "Reciprocal": _ew(lambda x: 1.0 / x),
        "Tanh": _ew(torch.tanh),  # operators below take any mix of tensors and Python scalars
        "Add": _ew(lambda a, b: a + b), "TensorAdd": _ew(lambda a, b: a + b), "Sub": _ew(lambda a, b: a - b),
        "Mul": _ew(lambda a, b: a * b), "Pow": _ew(lambda a, b: a ** b), "RealDiv": div,
        "Maximum": maxmin(torch.maximum, "min"), "Minimum": maxmin(torch.minimum, "max"),
        "Greater": _ew(lambda a, b: a > b), "GreaterEqual": _ew(lambda a, b: a >= b), "Less": _ew(lambda a, b: a < b),
        "LessEqual": _ew(lambda a, b: a <= b), "Equal": _ew(lambda a, b: a == b),
        "Select": select, "Cast": cast, "AddN": _np_addn, "BroadcastTo": broadcast,
        "Reshape": lambda op, ins, out: (lambda x, s=tuple(out.shape): x.reshape(s)),
        "Transpose": lambda op, ins, out: (lambda x, p=tuple(op.attrs["perm"]): x.permute(p)),
        "PadAkg": pad,
        "UnPadAkg": lambda op, ins, out: (lambda x, i=tuple(slice(0, n) for n in out.shape): x[i]),
        "ReduceSum": reduce("sum"), "ReduceMax": reduce("max"), "MatMul": matmul,
    }


class TorchBackend:
    name = "torch"
    table: dict[str, Callable] = {}

    @staticmethod
    def const(t: Tensor):  # a Python scalar: it keeps the tensor operand's dtype and folds into kernels
        v = t.value
        if t.dtype == "bool":
            return bool(v)
        return int(v) if t.dtype in dtypes.INTS else float(v)

    @staticmethod
    def fit(r, shape, dt, size):
        import torch
        if not isinstance(r, torch.Tensor):
            return torch.full(shape, r, dtype=dt)
        if r.dtype != dt:
            r = r.to(dt)
        if tuple(r.shape) != shape:
            r = r.reshape(shape) if r.numel() == size else r.expand(shape)
        return r

    @staticmethod
    def finish(outs, arrays, targets):
        outs = [o.contiguous() for o in outs]
        for k, (_, value) in targets:
            arrays[k].copy_(value)
        return tuple(outs)

    dtype = staticmethod(torch_dtype)


# -- the executor ----------------------------------------------------------------------------

class Executor:
    """`ex(*arrays)`: the graph's real outputs; in-place targets are written into `arrays`."""

    def __init__(self, g: Graph, backend):
        self.g, self.b = g, backend
        T = g.tensors
        self.consts = {n: backend.const(t) for n, t in T.items() if t.is_const}
        last_use: dict[str, int] = {}
        for i, op in enumerate(g.ops):
            for n in op.inputs:
                last_use[n] = i
        keep = set(g.real_outputs) | set(g.inplace_targets())
        self.steps = []
        for i, op in enumerate(g.ops):
            ins, out = [T[n] for n in op.inputs], T[op.outputs[0]]
            o = (out.name, tuple(out.shape), backend.dtype(out), out.size)
            if op.name in ("InplaceAssign", "Assign"):
                tgt = T[op.inputs[0]]
                fn = None
                extra = (tgt.name, tuple(tgt.shape), backend.dtype(tgt), tgt.size)
            else:
                build = backend.table.get(op.name)
                if build is None:
                    raise Unsupported(f"no {backend.name} implementation of {op.name}")
                fn, extra = build(op, ins, out), None
            drop = tuple(n for n in set(op.inputs) if last_use[n] == i and n not in keep and n not in self.consts)
            self.steps.append((op.name, fn, tuple(op.inputs), o, extra, drop))
        self.outputs = g.real_outputs
        self.targets = [(g.inputs.index(t), t) for t in g.inplace_targets()]

    def __call__(self, *arrays):
        fit = self.b.fit
        env: dict[str, Any] = dict(self.consts)
        env.update(zip(self.g.inputs, arrays))
        for name, fn, inputs, (oname, oshape, odt, osize), extra, drop in self.steps:
            args = [env[n] for n in inputs]
            if name == "InplaceAssign" or name == "Assign":
                tname, tshape, tdt, tsize = extra
                env[tname] = fit(args[1], tshape, tdt, tsize)
                env[oname] = fit(args[2] if name == "InplaceAssign" else args[1], oshape, odt, osize)
            else:
                env[oname] = fit(fn(*args), oshape, odt, osize)
            for n in drop:
                del env[n]
        outs = [env[n] for n in self.outputs]
        return self.b.finish(outs, list(arrays), [(k, (t, env[t])) for k, t in self.targets])


def numpy_executor(g: Graph) -> Callable:
    ex = Executor(g, NumpyBackend)

    def run(*arrays):
        with np.errstate(all="ignore"):
            return ex(*arrays)
    return run


def torch_executor(g: Graph) -> Callable:
    if not TorchBackend.table:
        TorchBackend.table = _torch_table()
    return Executor(g, TorchBackend)
