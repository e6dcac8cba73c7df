"""Drop float16 round trips that cannot change a value.

The TE lowering rounds every float16 op's float32 result to float16, and a consumer widens it
back: `Cast(f32, Cast(f16, e))`. On a CPU without float16 arithmetic that pair is two
conversions (vcvtps2ph, vcvtph2ps), and a chain of float16 ops is bound by them. When every
value `e` can take is a float16 value, the pair is the identity and this pass replaces it
with `e`. The values it proves float16 are:

- a widened float16, bool or 8-bit integer, and a constant float16 holds exactly;
- a select, max or min of such values, fabs of one, and the arithmetic fence around one;
- the product of such a value and a -1/0/1 value (a widened bool, a select of such constants):
  the value, its negation, a signed zero, or NaN where it is inf or NaN, all float16 values.
  That is every mask a graph applies in float16 (ReLU and dropout gradients,
  `Cast(GreaterEqual(...)) * x`) and every Neg (`x * -1`).

A NaN keeps being NaN (its payload may differ; akgpy compares NaN as NaN). A widened bool
becomes a select of 1 and 0 (LLVM's int-to-float of a mask costs a conversion more).

yolo's `~4991` (a masked float16 product feeding a subtraction and a scaled copy, then a
transpose) converted 8 float16 values to float32 and 6 back per 8 elements in its elementwise
loop; with the round trips dropped, 3 and 2 (0.87x the kernel's time on 1 thread, 0.95-0.99x
on 2; docs/poly.md has the corpus A/B).
"""
from __future__ import annotations

import numpy as np
from tvm import ir, tirx

from ..dtypes import widens_exactly
from .rewrite import fence_id, let_values, rewrite_each, unfenced


def holds_in_half(v: float) -> bool:
    """Is v a float16 value (inf and NaN included)?"""
    with np.errstate(over="ignore"):  # beyond 65504 it becomes inf: not held, unless v is inf
        return bool(np.isnan(v) or float(np.float16(v)) == v)


def _ty(e) -> str:
    return str(e.ty)


class _Values:
    """What the expressions of one function can take: float16 values only, or -1/0/1 only."""

    def __init__(self, body):
        self.bound = let_values(body, expressions=True)  # let-bound var -> its value
        self.known = {}  # (var, "half" or "unit") -> the answer for its value
        self.fid = fence_id()

    def _var(self, e, test):
        # once per var and question: a let chain reading each var twice would otherwise cost
        # 2^depth walks
        key = (e, test.__name__)
        if key not in self.known:
            v = self.bound.get(e)
            self.known[key] = v is not None and test(v)
        return self.known[key]

    def unit(self, e) -> bool:
        """Every value of e is -1, 0 or 1."""
        if isinstance(e, tirx.Cast):
            return _ty(e.value) == "bool" or self.unit(e.value)
        if isinstance(e, (tirx.FloatImm, tirx.IntImm)):
            return float(e.value) in (-1.0, 0.0, 1.0)
        if isinstance(e, tirx.Select):
            return self.unit(e.true_value) and self.unit(e.false_value)
        if isinstance(e, tirx.Mul):
            return self.unit(e.a) and self.unit(e.b)
        if isinstance(e, tirx.Var):
            return self._var(e, self.unit)
        if isinstance(e, tirx.Let):
            return self.unit(e.body)
        return False

    def half(self, e) -> bool:
        """Every value of e is a float16 value."""
        t = _ty(e)
        if t == "float16" or widens_exactly(t, "float16"):  # bool, int8, uint8
            return True
        if isinstance(e, tirx.Cast):  # a float type here: the small ints returned above
            return t.startswith("float") and self.half(e.value)
        if isinstance(e, tirx.FloatImm):
            return holds_in_half(float(e.value))
        if isinstance(e, tirx.IntImm):
            return abs(int(e.value)) <= 2048
        if isinstance(e, tirx.Select):
            return self.half(e.true_value) and self.half(e.false_value)
        if isinstance(e, (tirx.Max, tirx.Min)):
            return self.half(e.a) and self.half(e.b)
        if isinstance(e, tirx.Mul):
            return (self.unit(e.a) and self.half(e.b)) or (self.unit(e.b) and self.half(e.a))
        if isinstance(e, tirx.Var):
            return self._var(e, self.half)
        if isinstance(e, tirx.Let):
            return self.half(e.body)
        if isinstance(e, ir.Call):
            bare = unfenced(e, self.fid)
            if bare is not e:
                return self.half(bare)
            if e.op.name == "tirx.fabs":
                return self.half(e.args[0])
        return False


def drop_half_round_trips(func):
    """`func` with each `Cast(T, Cast(float16, e))` whose e only takes float16 values replaced
    by e (by `Cast(T, e)` where e has another type); unchanged when there is none."""
    values = []  # the function's _Values, made at the first round trip (most kernels have none)

    def drop(c):  # inner round trips first (inner_first): a chain simplifies from its leaves up
        if not (_ty(c) in ("float32", "float64") and isinstance(c.value, tirx.Cast) and _ty(c.value) == "float16"):
            return None
        e = c.value.value
        values[:] = values or [_Values(func.body)]
        if not values[0].half(e):
            return None
        if _ty(e) == "bool":
            return tirx.Select(e, tirx.FloatImm(_ty(c), 1.0), tirx.FloatImm(_ty(c), 0.0))
        return e if _ty(e) == _ty(c) else tirx.Cast(_ty(c), e)

    return rewrite_each(func, tirx.Cast, drop, inner_first=True)
