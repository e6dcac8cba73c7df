"""Value ranges: an interval for every tensor of a graph, propagated from constants, dtypes and
op semantics.

A range bounds the tensor's non-NaN values (NaN propagates through every op and is handled by
whoever consumes the range). The TE lowering uses it to drop special cases that cannot occur:
`log(1 + exp(-|x|))` (softplus, the yolo losses) takes its log of a value in [1, 2], so the
log needs no zero, negative, subnormal or infinity handling, and the exp of a non-positive
value needs no overflow handling. Those selects and clamps were a third of the loop body.

Bounds are computed in float64, then each op's result is widened outward by more than its
rounding to the output dtype plus the error of akgpy's exp/log (a relative 1e-6 for float32,
one ulp for float16, and the smallest subnormal, which a tiny value may round to 0 by), and a
bound past the dtype's largest finite value becomes infinite (exp(100) is inf in float32, and a
log of it must keep its inf test); a widened bound is still a sound one. An op without a rule here gives its dtype's full range.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .ir import Graph, Op
from ..ops.registry import canonical

INF = math.inf


@dataclass(frozen=True)
class Range:
    lo: float
    hi: float

    def __str__(self) -> str:
        return f"[{self.lo:g}, {self.hi:g}]"

    def within(self, lo: float, hi: float) -> bool:
        return lo <= self.lo and self.hi <= hi


FULL = Range(-INF, INF)


def _r(lo: float, hi: float) -> Range:
    """A range from computed endpoints: NaN (inf - inf, 0 * inf after the caller's handling) means
    unbounded on that side."""
    return Range(-INF if math.isnan(lo) else lo, INF if math.isnan(hi) else hi)


_REL_SLACK = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 1e-6, "float64": 1e-12}


def _widen(r: Range, dtype: str) -> Range:
    """r after rounding to `dtype` (see the module doc)."""
    rel = _REL_SLACK.get(dtype)
    if rel is None:
        return r
    tiny = float(np.finfo(np.dtype(dtype)).smallest_subnormal) if dtype != "bfloat16" else 1e-40
    lo = r.lo - abs(r.lo) * rel - tiny if math.isfinite(r.lo) else r.lo
    hi = r.hi + abs(r.hi) * rel + tiny if math.isfinite(r.hi) else r.hi
    top = _finite_max(dtype)  # past the dtype's largest finite value it rounds to inf
    return Range(-INF if lo < -top else lo, INF if hi > top else hi)


def of_dtype(dtype: str) -> Range:
    if dtype == "bool":
        return Range(0.0, 1.0)
    if dtype.startswith(("int", "uint")):
        info = np.iinfo(np.dtype(dtype))
        return Range(float(info.min), float(info.max))
    return FULL


def _finite_max(dtype: str) -> float:
    try:
        return float(np.finfo(np.dtype(dtype)).max)
    except (TypeError, ValueError):
        return INF


def _mul(a: Range, b: Range) -> Range:
    # 0 * inf is NaN in IEEE, but every finite value of one side times 0 is 0: 0 is the bound
    ps = [0.0 if (x == 0 or y == 0) else x * y for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
    return _r(min(ps), max(ps))


def _div(a: Range, b: Range) -> Range:
    if not (b.lo > 0 or b.hi < 0):
        return FULL
    qs = [x / y if math.isfinite(y) else 0.0 for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
    if any(math.isnan(q) for q in qs):
        return FULL
    return _r(min(qs), max(qs))


def _exp(v: float) -> float:
    return math.exp(v) if v < 709 else INF


def _log(v: float) -> float:
    return math.log(v) if v > 0 else -INF


def _abs(a: Range) -> Range:
    if a.lo >= 0:
        return a
    if a.hi <= 0:
        return Range(-a.hi, -a.lo)
    return Range(0.0, max(-a.lo, a.hi))


def _monotone(f: Callable[[float], float]) -> Callable[[Range], Range]:
    return lambda a: _r(f(a.lo), f(a.hi))


def _positive_decreasing(f: Callable[[float], float]) -> Callable[[Range], Range]:
    return lambda a: _r(f(a.hi), f(a.lo)) if a.lo > 0 else FULL


def _union(*rs: Range) -> Range:
    return Range(min(r.lo for r in rs), max(r.hi for r in rs))


_UNARY: dict[str, Callable[[Range], Range]] = {
    "Neg": lambda a: Range(-a.hi, -a.lo),
    "Abs": _abs,
    "Exp": _monotone(_exp),
    "Log": lambda a: _r(_log(a.lo), _log(a.hi)),
    "Sqrt": lambda a: _r(math.sqrt(max(a.lo, 0.0)), math.sqrt(max(a.hi, 0.0))),
    "Rsqrt": _positive_decreasing(lambda v: 1 / math.sqrt(v) if math.isfinite(v) else 0.0),
    "Reciprocal": _positive_decreasing(lambda v: 1 / v if math.isfinite(v) else 0.0),
    "Tanh": _monotone(math.tanh),
    "Erf": _monotone(math.erf),
}
_BINARY: dict[str, Callable[[Range, Range], Range]] = {
    "Add": lambda a, b: _r(a.lo + b.lo, a.hi + b.hi),
    "Sub": lambda a, b: _r(a.lo - b.hi, a.hi - b.lo),
    "Mul": _mul,
    "RealDiv": _div,
    "Maximum": lambda a, b: Range(max(a.lo, b.lo), max(a.hi, b.hi)),
    "Minimum": lambda a, b: Range(min(a.lo, b.lo), min(a.hi, b.hi)),
}
# ops whose values are some of their (first) input's values
_SAME = {"Reshape", "Transpose", "BroadcastTo", "ReduceMax", "UnPadAkg", "StridedSlice", "Gather", "GatherElements"}
_BOOL = {"Greater", "GreaterEqual", "Less", "LessEqual", "Equal"}


def _const(value, dtype: str) -> Range:
    a = np.asarray(value, dtype=np.float64)
    a = a[~np.isnan(a)]
    if a.size == 0:
        return of_dtype(dtype)
    return Range(float(a.min()), float(a.max()))


def _rule(op: Op, ins: list[Range], out_dtype: str) -> Range:
    name = canonical(op.name)
    if name in _UNARY:
        return _UNARY[name](ins[0])
    if name in _BINARY:
        return _BINARY[name](ins[0], ins[1])
    if op.name in _SAME:
        return ins[0]
    if op.name in ("Assign", "InplaceAssign"):  # the value passed through (lowering's rule)
        return ins[2] if op.name == "InplaceAssign" else ins[1]
    if op.name in _BOOL:
        return Range(0.0, 1.0)
    if op.name == "Concat":
        return _union(*ins)
    if op.name == "Select":
        return _union(ins[1], ins[2])
    if op.name == "AddN":
        return _r(sum(r.lo for r in ins), sum(r.hi for r in ins))
    if op.name == "Cast":
        if out_dtype == "bool":
            return Range(0.0, 1.0)
        if out_dtype.startswith(("int", "uint")):
            return of_dtype(out_dtype)
        return ins[0]  # _widen sends a value past the dtype's largest to inf
    return of_dtype(out_dtype)


def value_ranges(g: Graph) -> dict[str, Range]:
    """Range of every tensor of `g`: inputs by dtype, constants by value, op outputs by rule."""
    out: dict[str, Range] = {}

    def get(name: str) -> Range:
        if name not in out:
            t = g.tensors[name]
            out[name] = _const(t.value, t.dtype) if t.is_const else of_dtype(t.dtype)
        return out[name]

    for op in g.ops:
        ins = [get(n) for n in op.inputs]
        if op.name in ("Assign", "InplaceAssign"):  # later reads of the target see the value
            out[op.inputs[0]] = _union(ins[0], ins[1])
        for name in op.outputs:
            dtype = g.tensors[name].dtype
            r, full = _rule(op, ins, dtype), of_dtype(dtype)
            if not dtype.startswith("float") and not r.within(full.lo, full.hi):
                r = full  # integers wrap
            out[name] = _widen(r, dtype)
    return out
