"""Float max and min with numpy's NaN semantics, built from selects.

TVM lowers a float `tirx.Max(a, b)` to `a > b ? a : b`, which returns b when a is NaN, where
numpy's maximum (akgpy's reference) gives NaN. `x < c ? c : x` keeps a NaN x and is still one
op against a constant c (x86 maxps(c, x)); between two values a NaN b needs a test of its own
(an ordered compare and a blend), unless a NaN b always makes a NaN too (leaky ReLU's
max(0.1 x, x)). Used by the elementwise builders and by targets/nan_extrema.py, which rewrites
the Max/Min nodes left after the schedule (reductions keep them until then: TVM's rfactor
recognises a max reduction by its Max combiner).
"""
from __future__ import annotations

from tvm import ir, tirx

from ..dtypes import vector_parts


def elem(ty) -> str:
    return vector_parts(ty)[0]


def is_float(e) -> bool:
    return elem(e.ty).startswith(("float", "bfloat"))


def const(value: float, like):
    """`value` in the type of `like`, broadcast when `like` is a vector."""
    dtype, n = vector_parts(like.ty)
    c = tirx.FloatImm(dtype, value)
    return tirx.Broadcast(c, n) if n > 1 else c


def const_value(e):
    """The value of a float constant or its broadcast, else None."""
    if isinstance(e, tirx.Broadcast):
        e = e.value
    return float(e.value) if isinstance(e, tirx.FloatImm) else None


def nan_extremum(a, b, is_max: bool, *, a_nan_in_b: bool = False, b_nan_in_a: bool = False):
    """max(a, b) (min when not is_max), NaN when either is. `a_nan_in_b`/`b_nan_in_a`: a NaN
    in that operand always makes the other NaN; then one select keeps every NaN, as it does
    against a non-NaN constant (either side)."""
    if not is_float(a):
        return tirx.max(a, b) if is_max else tirx.min(a, b)
    if const_value(a) is not None or (a_nan_in_b and not b_nan_in_a):
        a, b = b, a  # the select keeps a's NaN: b is the constant or the operand whose NaN a carries
    c = const_value(b)
    if (c is not None and c == c) or a_nan_in_b or b_nan_in_a:
        return _bind(a, lambda a: tirx.Select(a < b if is_max else a > b, b, a))
    return _bind(a, lambda a: _bind(b, lambda b: tirx.Select(
        is_number(b), tirx.Select(a < b if is_max else a > b, b, a), b)))


def _bind(value, body):
    """body(v), v bound once to `value` (each operand is used more than once)."""
    if isinstance(value, (tirx.Var, tirx.FloatImm, tirx.Broadcast, ir.TensorLoad)):
        return body(value)
    v = tirx.Var("nx", value.ty)
    return tirx.Let(v, value, body(v))


def is_number(b):
    """b is not NaN. A float32 by its bits (|bits| <= inf's, as integers): an ordered compare
    of a value widened from float16 is narrowed by LLVM to a float16 compare, whose mask it
    then packs and unpacks around every blend (bert's float16 softmaxes: 1.10-1.11x the time
    without NaN handling that way, 1.06-1.07x by the bits)."""
    dtype, n = vector_parts(b.ty)
    if dtype != "float32":
        return tirx.abs(b) <= const(float("inf"), b)

    def i32(v):
        c = tirx.IntImm("int32", v)
        return tirx.Broadcast(c, n) if n > 1 else c
    bits = tirx.reinterpret("int32" if n == 1 else f"int32x{n}", b)
    return tirx.bitwise_and(bits, i32(0x7FFFFFFF)) <= i32(0x7F800000)
