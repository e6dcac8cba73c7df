"""Float max and min with numpy's NaN and -inf semantics for what the schedule leaves as
`Max`/`Min`: reductions, and clamps in index-free math.

The elementwise builders already emit NaN-keeping selects (te/extrema.py). Reductions cannot:
TVM's rfactor and akgpy's split_accumulators recognise a max reduction by its Max combiner
and TVM's reducer registry by its -FLT_MAX identity, so a NaN in a row was dropped unless it
came last, and a row of -inf reduced to -FLT_MAX where numpy gives NaN and -inf. After the
schedule, this pass rewrites every float Max/Min with te/extrema.nan_extremum and every store
of -FLT_MAX (+FLT_MAX) into a buffer the function also updates as `B = max(B, x)` (`min`):
that is the reduction's initial value, and it becomes -inf (+inf).
"""
from __future__ import annotations

import tvm_ffi
from tvm import tirx

from ..te.extrema import const, const_value, elem, is_float, nan_extremum
from .rewrite import fence_id, unfenced, update_parts

# ops whose result is NaN whenever an operand is (so are float casts and LLVM's arithmetic fence)
_ARITH = (tirx.Add, tirx.Sub, tirx.Mul, tirx.Div)


def _nan_implies(x, e) -> bool:
    """A NaN x makes e NaN: x is e, or an operand of a NaN-propagating chain down from e."""
    if const_value(x) is not None:
        return False
    while True:
        if tvm_ffi.structural_equal(x, e):
            return True
        bare = unfenced(e, fence_id())
        if bare is not e:
            e = bare
            continue
        if isinstance(e, tirx.Cast) and is_float(e.value):
            e = e.value
            continue
        if isinstance(e, _ARITH):
            return _nan_implies(x, e.a) or _nan_implies(x, e.b)
        return False


def _accumulators(body) -> dict:
    """Buffers updated in place as `B = max(B, x)` (True) or `B = min(B, x)` (False)."""
    found = {}

    def on_store(st):
        if update_parts(st, (tirx.Max, tirx.Min)) is not None and is_float(st.value):
            found[st.buffer] = isinstance(st.value, tirx.Max)
    tvm_ffi.structural_walk(body, [(tirx.BufferStore, on_store)])
    return found


def nan_extrema(func):
    """`func` with float Max/Min that propagate NaN and max/min reductions that start from
    -inf/+inf; unchanged when it has neither."""
    accs = _accumulators(func.body)
    count = [0]

    def on_store(st, mut):
        is_max = accs.get(st.buffer)
        c = const_value(st.value)
        if is_max is not None and c is not None:
            dtype = elem(st.value.ty)
            identity = tirx.min_value(dtype) if is_max else tirx.max_value(dtype)
            if c == float(identity.value):
                count[0] += 1
                return tirx.BufferStore(st.buffer, const(float("-inf") if is_max else float("inf"), st.value),
                                        list(st.indices))
        return mut.default_mutate(st)

    def on_extremum(e, mut):
        a, b = mut.mutate(e.a), mut.mutate(e.b)
        if not is_float(e):
            return e if a.same_as(e.a) and b.same_as(e.b) else type(e)(a, b)
        count[0] += 1
        return nan_extremum(a, b, isinstance(e, tirx.Max), a_nan_in_b=_nan_implies(a, b),
                            b_nan_in_a=_nan_implies(b, a))

    body = tvm_ffi.structural_mutate(func.body, [(tirx.BufferStore, on_store), (tirx.Max, on_extremum),
                                                 (tirx.Min, on_extremum)])
    return func.with_body(body) if count[0] else func
