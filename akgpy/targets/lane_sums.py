"""Float64 sums over a local buffer's lanes add them as vectors, then halve the vector.

A row reduction split into vector partials (`te/builders._lane_split`, the rfactor) ends in a
loop that adds the row's partials into its float64 total, one lane a step:
`acc[R] = acc[R] + part[b + c]` for c in 0..n-1. Those n adds depend on each other, 4 cycles
each, and nothing else in the row waits for them but the next row's work: yolo's loss sums
(~2380) have 80 partial lanes per row of 240-960 floats, 320 cycles of one chain for about
1200 cycles of vector work.

Such a loop, over a buffer the kernel allocates (the partials; never an argument, whose values
the order could expose) becomes one statement: the partials loaded as vectors of L lanes,
added pairwise, the resulting vector halved lane-wise down to one value, and that added to the
accumulator. L: the largest of 8, 4, 2 that divides n with at least two vectors.

Why the sum keeps its contract: the terms are float64 partials of a float64 sum
(docs/semantics.md); adding them in another order changes the float64 total by a few units in
its last place, far below the float32 result's rounding. Infinities and NaN propagate in any
order.
"""
from __future__ import annotations

import tvm_ffi
from tvm import ir, tirx

from ..dtypes import vector_parts
from .rewrite import rewrite_each, substitute, update_parts
from .sum_runs import index_step, inlined, pairwise, uses

LANES = (8, 4, 2)


def _halved(v, lanes: int):
    """The sum of `v`'s lanes, in halves: lanes [0, h) plus lanes [h, 2h), and again."""
    while lanes > 1:
        h = lanes // 2
        x = tirx.Var("lanes", v.ty)
        v = tirx.Let(x, v, tirx.Shuffle([x], [tirx.IntImm("int32", i) for i in range(h)])
                     + tirx.Shuffle([x], [tirx.IntImm("int32", h + i) for i in range(h)]))
        lanes = h
    return v


def _vector_sum(loop, local: set):
    """The loop as one vector sum of its partials, or None when it is not such a loop."""
    if (loop.kind != tirx.ForKind.SERIAL or not isinstance(loop.extent, tirx.IntImm)
            or not isinstance(loop.min, tirx.IntImm) or int(loop.min.value) != 0):
        return None
    n = int(loop.extent.value)
    lanes = next((k for k in LANES if n % k == 0 and n >= 2 * k), 0)
    st = inlined(loop.body) if lanes else None
    if not isinstance(st, tirx.BufferStore) or str(st.buffer.dtype) != "float64" \
            or vector_parts(st.value.ty)[1] != 1:
        return None
    parts = update_parts(st, tirx.Add)
    var = loop.loop_var
    if parts is None or any(uses(i, var) for i in st.indices):
        return None
    acc, term, acc_first = parts
    if (not isinstance(term, ir.TensorLoad) or str(term.ty) != "float64" or len(term.indices) != 1
            or term.source.same_as(st.buffer) or str(term.source.data) not in local
            or index_step(term.indices[0], var) != 1):
        return None
    base = substitute(term.indices[0], {var: tirx.IntImm(var.ty, 0)})
    chunks = [tirx.BufferLoad(term.source, [tirx.Ramp(base + lanes * j, 1, lanes)]) for j in range(n // lanes)]
    total = _halved(pairwise(chunks), lanes)
    return tirx.BufferStore(st.buffer, acc + total if acc_first else total + acc, st.indices)


def lane_sums(func):
    """`func` with each qualifying lane-by-lane sum as one vector sum; unchanged when none."""
    local: set = set()
    tvm_ffi.structural_walk(func.body, [(tirx.AllocBuffer, lambda a: local.add(str(a.buffer.data)))])
    return rewrite_each(func, tirx.For, lambda loop: _vector_sum(loop, local))
