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


def elem(ty) -> str:
    return str(ty.dtype if hasattr(ty, "dtype") else ty).split("x")[0]


def lanes(ty) -> int:
    s = str(ty.dtype if hasattr(ty, "dtype") else ty)
    return int(s.split("x")[1]) if "x" in s else 1


def is_float(e) -> bool:
    return elem(e.ty).startswith(("float", "bfloat"))


def const(value: float, like):
    """`value` in the type of `like`, broadcast when `like` is a vector."""
    c = tirx.FloatImm(elem(like.ty), value)
    n = lanes(like.ty)
    return tirx.Broadcast(c, n) if n > 1 else c


def const_value(e):
    """The value of a float constant or its broadcast, else None."""
    if isinstance(e, tirx.Broadcast):
        e = e.value
    return float(e.value) if isinstance(e, tirx.FloatImm) else None


def nan_extremum(a, b, is_max: bool, *, b_nan_makes_a_nan: bool = False):
    """max(a, b) (min when not is_max), NaN when either is. `b_nan_makes_a_nan`: a NaN b always
    makes a NaN, so one select keeps every NaN; so does a non-NaN constant b (either side)."""
    if not is_float(a):
        return tirx.max(a, b) if is_max else tirx.min(a, b)
    if const_value(a) is not None:
        a, b = b, a
    c = const_value(b)
    if (c is not None and c == c) or b_nan_makes_a_nan:
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
    if elem(b.ty) != "float32":
        return tirx.abs(b) <= const(float("inf"), b)
    n = lanes(b.ty)

    def i32(v):
        c = tirx.IntImm("int32", v)
        return tirx.Broadcast(c, n) if n > 1 else c
    bits = tirx.reinterpret("int32" if n == 1 else f"int32x{n}", b)
    return tirx.bitwise_and(bits, i32(0x7FFFFFFF)) <= i32(0x7F800000)
