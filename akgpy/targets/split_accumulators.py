"""Loop-carried vector accumulators split into power-of-two chunks.

A reduction's lane partials (`te/builders._lane_split`) are as wide as the period of the
broadcast operands the loop reads: yolo's loss sums over a `[.., 3, 2]` tail with a `[.., 3, 1]`
operand get 48 float64 lanes. TVM writes the update as one `float64x48` load, add and store;
LLVM keeps the partial in registers across the reduction loop as one `<48 x double>` phi, and
its type legaliser splits a vector whose length is not a power of two into halves down to
`<6 x double>`, then into `<4 x double>` and `<2 x double>` pieces. Every iteration then takes
the pieces apart and puts them back together to add full registers: on yolo ~3153 about 150 of
the loop's 390 instructions were such extracts, inserts and spills.

This pass, run after TVM's lowering, rewrites such an update `acc[R] = acc[R] op x` (R a ramp of
n lanes, n not a power of two) into n / c updates of c lanes, c the largest power of two that
divides n and fits a 512-bit register (`x` bound once, each chunk shuffled out of it), so each
chunk's phi is a whole register. Results are unchanged: each lane's operation is the same.
A split that would leave chunks under 128 bits (a 7-lane tail) is not made.
"""
from __future__ import annotations

import tvm
from tvm import tirx

from .rewrite import is_one, lanes, rewrite_each, update_parts

MAX_CHUNK_BITS = 512
MIN_CHUNK_BITS = 128
_OPS = (tirx.Add, tirx.Mul, tirx.Max, tirx.Min)


def _chunk(n: int, bits: int) -> int:
    c = n & -n  # the largest power of two dividing n
    while c * bits > MAX_CHUNK_BITS:
        c //= 2
    return c if c * bits >= MIN_CHUNK_BITS else 0


def _split(store):
    """The chunked statements for a loop-carried update `store`, or None when it is not one."""
    v = store.value
    if len(store.indices) != 1 or not isinstance(store.indices[0], tirx.Ramp) or not isinstance(v, _OPS):
        return None
    ramp = store.indices[0]
    if not is_one(ramp.stride):
        return None
    n = lanes(v.ty)
    if n & (n - 1) == 0:
        return None
    c = _chunk(n, tvm.runtime.DataType(str(store.buffer.dtype)).bits)
    if not c:
        return None
    parts = update_parts(store, _OPS)
    if parts is None:
        return None
    _, other, acc_first = parts
    x = tirx.Var("acc_in", other.ty)
    stmts = [tirx.Bind(x, other)]
    for j in range(0, n, c):
        r = tirx.Ramp(ramp.base + j, 1, c)
        acc = tirx.BufferLoad(store.buffer, [r])
        part = tirx.Shuffle([x], [tirx.IntImm("int32", j + i) for i in range(c)])
        # operands in their order: a float max/min of a NaN depends on it
        stmts.append(tirx.BufferStore(store.buffer, type(v)(acc, part) if acc_first else type(v)(part, acc), [r]))
    return tirx.SeqStmt(stmts)


def split_func(func):
    """`func` with every loop-carried vector update of a non-power-of-two width split into
    register-sized chunks; unchanged when there is none."""
    return rewrite_each(func, tirx.BufferStore, _split)
