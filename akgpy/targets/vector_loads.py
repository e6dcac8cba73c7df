"""Vector loads of broadcast operands: one contiguous load and a shuffle, not a gather.

A vector loop over a coalesced tail (`[.., 52, 3, 2]` walked as one flat index L) reads a
broadcast operand at an index that is not a ramp: a `[.., 3, 1]` operand at `L // 2`, a
`[1, 52, 52, 1, 2]` grid at `2 * (L // 6) + L % 2`, a `[2]` vector at `L % 2`. TVM's code
generator then computes every lane's address and loads lane by lane (16 scalar loads and 16
inserts per vector). When the lanes' offsets from lane 0 are constants (the vector starts at a
multiple of the index's period: the tree passes choose the vector width so, see
`poly/tree._gather_registers` and `te/builders._lane_split`), the lanes read a short contiguous span of the operand: this pass,
run at the end of TVM's lowering (after vectorisation), loads that span as one vector and
shuffles it into the lanes. The span lies between addresses the lanes read, so the load stays
in bounds. On the yolo loss graph `~3153` (one thread) its elementwise statement went from
0.66 to 0.24 ms (the same statement with full-size operands: 0.23 ms).
"""
from __future__ import annotations

import tvm_ffi
from tvm import ir, tirx
from tvm.sym import Analyzer

from .rewrite import lanes, let_values

# a span wider than this many lanes is a strided read (a transpose's column), not a broadcast
MAX_SPAN_PER_LANE = 1


def _lane(e, i: int, lets: dict):
    """The scalar expression lane i of the vector integer expression `e` computes, or None."""
    if isinstance(e, tirx.Ramp):
        return e.base + e.stride * i
    if isinstance(e, tirx.Broadcast):
        return e.value
    if isinstance(e, tirx.Var):
        if lanes(e.ty) == 1:
            return e
        v = lets.get(e)
        return None if v is None else _lane(v, i, lets)
    if isinstance(e, tirx.IntImm):
        return e
    for cls in (tirx.Add, tirx.Sub, tirx.Mul, tirx.FloorDiv, tirx.FloorMod, tirx.Min, tirx.Max):
        if isinstance(e, cls):
            a, b = _lane(e.a, i, lets), _lane(e.b, i, lets)
            return None if a is None or b is None else cls(a, b)
    return None


def _pattern(index, lets: dict, ana) -> tuple | None:
    """(lane 0's scalar index, each lane's constant offset from it) of a vector index whose
    lanes differ by constants, else None."""
    n = lanes(index.ty)
    first = _lane(index, 0, lets)
    if first is None:
        return None
    offs = []
    for i in range(n):
        e = _lane(index, i, lets)
        if e is None:
            return None
        d = ana.simplify(e - first)
        if not isinstance(d, tirx.IntImm):
            return None
        offs.append(int(d.value))
    return ana.simplify(first), offs


def shuffle_loads(func):
    """`func` with every vector load of constant lane offsets over a short span replaced by a
    contiguous load of the span and a shuffle; unchanged when there is none."""
    lets = let_values(func.body)
    ana = Analyzer()
    count = [0]

    def on_load(ld, mut):
        idx = list(ld.indices)
        n = lanes(ld.ty)
        if n < 2 or len(idx) != 1 or (isinstance(idx[0], tirx.Ramp) and _is_int(idx[0].stride)) \
                or isinstance(idx[0], tirx.Broadcast):
            return mut.default_mutate(ld)
        got = _pattern(idx[0], lets, ana)
        if got is None:
            return mut.default_mutate(ld)
        first, offs = got
        lo, hi = min(offs), max(offs)
        span = hi - lo + 1
        if span < 2 or span > MAX_SPAN_PER_LANE * n:
            return mut.default_mutate(ld)
        count[0] += 1
        base = ana.simplify(first + lo)
        load = tirx.BufferLoad(ld.source, [tirx.Ramp(base, 1, span)])
        # a shuffle gives at most as many lanes as its inputs hold: repeat the short load
        copies = -(-n // span)
        return tirx.Shuffle([load] * copies, [tirx.IntImm("int32", o - lo) for o in offs])

    body = tvm_ffi.structural_mutate(func.body, [(ir.TensorLoad, on_load)])
    return func.with_body(body) if count[0] else func


def _is_int(x) -> bool:
    return isinstance(x, tirx.IntImm)
