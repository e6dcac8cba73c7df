"""A vector conversion of a comparison to a number becomes a select of 1 and 0.

TVM's LLVM code generator binds every `Let` value in its arithmetic analyzer, whose integer-set
analysis of a vector comparison (or And/Or/Not) with a load among its operands builds an
`IntImm` of the comparison's vector type and fails ("IntImm can only take scalar, but boolx16").
The comparison reaches a let value when the schedule inlines a Greater and a Cast into a NaN-
keeping max (te/extrema.py binds its operands once) or into fastmath's argument: ReduceMax and
Maximum of `(x > y).astype(float32)`, poly and plain alike. The analyzer values a select by
its two arms, never by its condition, so `Select(c, 1, 0)` is the same number, exactly, and
binds; LLVM compiles both forms to one masked blend.
"""
from __future__ import annotations

import tvm_ffi
from tvm import tirx

from ..dtypes import vector_parts


def _as_select(e, mut):
    value = mut.mutate(e.value)
    elem, lanes = vector_parts(e.ty)
    if lanes == 1 or vector_parts(value.ty)[0] != "bool" or elem == "bool":
        return e if value.same_as(e.value) else tirx.Cast(e.ty, value)
    one, zero = tirx.const(1, elem), tirx.const(0, elem)
    return tirx.Select(value, tirx.Broadcast(one, lanes), tirx.Broadcast(zero, lanes))


def bool_casts(func):
    """`func` with every vector Cast of a bool value to a number written as a select."""
    body = tvm_ffi.structural_mutate(func.body, [(tirx.Cast, _as_select)])
    return func if body.same_as(func.body) else func.with_body(body)
