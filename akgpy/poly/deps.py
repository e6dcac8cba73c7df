"""Dependences of a PolyModel under its original program order.

RAW is value-based (isl's exact last-writer flow analysis): a read depends only on the write
whose value it sees, so e.g. a reduction's k-th update depends on the (k-1)-th, not on all
earlier ones. WAR and WAW are memory-based (every earlier access to the same element), which
is what a schedule must respect as long as buffers are not renamed or expanded.
"""
from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from .isl_util import maps_of, union_map
from .model import PolyModel


@dataclass
class Deps:
    raw: isl.UnionMap  # source write -> sink read that sees its value
    war: isl.UnionMap  # read -> later write of the same element
    waw: isl.UnionMap  # write -> later write of the same element
    live_in: isl.UnionMap  # reads that see a value from before the function (inputs)
    validity: isl.UnionMap  # raw | war | waw: what every legal schedule must keep in order
    rar: isl.UnionMap  # read -> later read of one element by an unrelated statement (not a dependence)

    def kinds_of(self, pair: isl.UnionMap) -> list[str]:
        """Which dependence kinds contain (any of) the pairs in `pair`."""
        return [k for k in ("raw", "war", "waw") if not getattr(self, k).intersect(pair).is_empty()]


def dependences(model: PolyModel) -> Deps:
    order = model.order
    flow = (isl.UnionAccessInfo.from_sink(model.reads)
            .set_must_source(model.writes)
            .set_schedule_map(order)
            .compute_flow())
    raw = flow.get_must_dependence()
    # the order between only the statement pairs asked about: lex_lt_union_map of the whole
    # order builds every pair of statements, 1.4 s of the 54-statement yolo ~2380's compile
    orders = {m.get_tuple_name(isl.dim_type.in_): m for m in maps_of(order)}

    def before(pairs: isl.UnionMap) -> isl.UnionMap:
        """The pairs (a, b) of `pairs` with a executed before b."""
        return union_map(model.ctx, [m.intersect(orders[m.get_tuple_name(isl.dim_type.in_)].lex_lt_map(
            orders[m.get_tuple_name(isl.dim_type.out)])) for m in maps_of(pairs)])
    waw = before(model.writes.apply_range(model.writes.reverse())).coalesce()
    war = before(model.reads.apply_range(model.writes.reverse())).coalesce()
    # not coalesced: over boxes of extent 2, coalescing a reduction's lexicographic self-order
    # gives constraints that mix its dims (k2 <= 2 - k0 - k1) and isl's scheduler then cannot
    # carry them ("unable to carry dependences" on a max over 2x2x2)
    validity = raw.union(war).union(waw)
    rar = _input_reuse(model, raw, before)
    return Deps(raw=raw.coalesce(), war=war, waw=waw, live_in=flow.get_must_no_source(), validity=validity,
                rar=rar)


# an array read by more statements than this gets reuse pairs only between each reader and the
# next one in another RAW component (a chain, which proximity fuses all the same), not between
# every two: 1,000 outputs of `x * k` made 500,000 pairs, 60 s of isl before scheduling began
RAR_ALL_PAIRS = 32


def _input_reuse(model: PolyModel, raw: isl.UnionMap, before) -> isl.UnionMap:
    """Reads of one element by two statements with no chain of values between them (different
    components of the RAW graph), the earlier to the later. Within a component RAW proximity
    already fuses, and extra pairs there (a softmax's max and sum both reading x, through
    their rfactor partials) pull isl away from the one outer band of rows it finds without."""
    comp = {s.name: s.name for s in model.statements}

    def find(a: str) -> str:
        while comp[a] != a:
            comp[a] = comp[comp[a]]
            a = comp[a]
        return a
    for m in maps_of(raw):
        comp[find(m.get_tuple_name(isl.dim_type.in_))] = find(m.get_tuple_name(isl.dim_type.out))
    readers: dict[str, list[isl.Map]] = {}  # array -> its read maps, in program order
    for s in model.statements:
        for m in maps_of(s.reads):
            readers.setdefault(m.get_tuple_name(isl.dim_type.out), []).append(m)
    crowded = {a for a, ms in readers.items() if len(ms) > RAR_ALL_PAIRS}
    reads = model.reads if not crowded else union_map(
        model.ctx, [m for a, ms in readers.items() if a not in crowded for m in ms])
    pairs = before(reads.apply_range(reads.reverse()))
    chained = [a.apply_range(b.reverse()) for x in sorted(crowded) for a, b in _next_apart(readers[x], find)]
    # Proximity is a cost, never a constraint, so the pairs may be over-approximated: without
    # the existentially quantified divs that Reshape and interleaved partials bring
    # (floor((i3 + 48kf)/312)), isl's search on yolo ~3153 took 0.35 s instead of 2.9 s and
    # gave the same schedule, as on all other bench graphs (same tree, same or less time)
    keep = [m.remove_divs() for m in maps_of(pairs) + chained
            if find(m.get_tuple_name(isl.dim_type.in_)) != find(m.get_tuple_name(isl.dim_type.out))]
    return union_map(model.ctx, keep).coalesce()


def _next_apart(maps: list[isl.Map], find) -> list[tuple[isl.Map, isl.Map]]:
    """Each read map with the next one, in program order, of a statement in another RAW
    component. One walk from the end keeps the nearest later map and the nearest of a
    component other than its."""
    def comp(m: isl.Map) -> str:
        return find(m.get_tuple_name(isl.dim_type.in_))
    out, first, second = [], None, None
    for a in reversed(maps):
        b = first if first is not None and comp(first) != comp(a) else second
        if b is not None:
            out.append((a, b))
        if first is not None and comp(first) != comp(a):
            second = first
        first = a
    return out[::-1]
