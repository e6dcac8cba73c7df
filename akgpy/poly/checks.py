"""Legality of a schedule: every dependence source must run strictly before its sink, and no
loop marked to run its iterations at once (parallel threads, vector lanes) carries a dependence.

A schedule found by isl, built by hand, or read back from text all pass through here, so a
wrong schedule fails loudly at compile time with a concrete violated pair, never as a wrong
answer at run time. A mark that fails is dropped (`legal_marks`): its loop runs in order.
"""
from __future__ import annotations

import islpy as isl

from ..errors import CompileError
from .deps import Deps
from .isl_util import flat_schedule_map, maps_of


class IllegalSchedule(CompileError):
    """A schedule that reorders some dependent pair of statement instances."""


def violations(schedule, deps: Deps) -> isl.UnionMap:
    """The dependences (source -> sink) that `schedule` does not run source-first.

    A pair whose source or sink the schedule does not cover counts as violated: an
    unscheduled instance is not ordered at all.
    """
    smap = flat_schedule_map(schedule)
    if _all_forward(smap, deps.validity):
        return isl.UnionMap.empty(deps.validity.get_space())
    forward = smap.lex_lt_union_map(smap)  # (a, b): time(a) < time(b)
    return deps.validity.subtract(forward)


def _all_forward(smap: isl.UnionMap, pairs: isl.UnionMap) -> bool:
    """Does every pair run source-first? The time differences of the pairs (one anonymous
    space) must all be lexicographically positive, and every instance scheduled. The cheap
    test: lex_lt_union_map builds the order between every two statements (0.57 s of a 48-
    statement kernel's compile); this touches only the pairs. The exact difference above
    runs only when this fails, to name a violated pair."""
    dom = smap.domain()
    if not pairs.domain().is_subset(dom) or not pairs.range().is_subset(dom):
        return False
    delta = pairs.apply_domain(smap).apply_range(smap).deltas()
    sets = []
    delta.foreach_set(sets.append)
    # lex_lt's differences are exactly the lexicographically positive vectors
    return all(d.is_subset(isl.Map.lex_lt(d.get_space()).deltas()) for d in sets)


def check_legal(schedule: isl.UnionMap | isl.Schedule, deps: Deps) -> None:
    """Raise IllegalSchedule naming one violated dependence; return None when legal."""
    bad = violations(schedule, deps)
    if bad.is_empty():
        return
    pair = bad.sample()  # one concrete (source, sink) instance pair
    kinds = deps.kinds_of(isl.UnionMap.from_basic_map(pair)) or ["?"]
    src, dst = pair.domain().get_tuple_name(), pair.range().get_tuple_name()
    n_stmt_pairs = len({(m.domain().get_tuple_name(), m.range().get_tuple_name())
                        for m in maps_of(bad)})
    raise IllegalSchedule(f"schedule violates a {'/'.join(k.upper() for k in kinds)} dependence "
                          f"{src} -> {dst}, e.g. {pair} ({n_stmt_pairs} statement pair(s) violated)")


def carried(band: isl.ScheduleNode, deps: Deps) -> isl.UnionMap:
    """The dependences between instances under `band` that its first member carries: source and
    sink in one iteration of every outer band, in different iterations of that member. Exact:
    isl compares the pairs' schedule values, no distance is approximated."""
    dom = band.get_domain()
    pairs = deps.validity.intersect_domain(dom).intersect_range(dom)
    if pairs.is_empty():
        return pairs
    same = pairs.eq_at_multi_union_pw_aff(band.get_prefix_schedule_multi_union_pw_aff())
    member = isl.MultiUnionPwAff.from_union_pw_aff(band.band_get_partial_schedule().get_at(0))
    return same.subtract(same.eq_at_multi_union_pw_aff(member))


def legal_marks(schedule: isl.Schedule, deps: Deps, names: frozenset[str]) -> tuple[isl.Schedule, list[str]]:
    """`schedule` with every mark in `names` whose loop carries a dependence removed, and a note
    for each naming one carried pair. A mark's loop is the first member of the first band below
    it (tree.py puts each mark right above a band of its own)."""
    notes: list[str] = []

    def visit(node: isl.ScheduleNode) -> isl.ScheduleNode:
        if node.get_type() == isl.schedule_node_type.mark and node.mark_get_id().get_name() in names:
            band = _band_below(node.child(0))
            bad = carried(band, deps) if band is not None else None
            if bad is not None and not bad.is_empty():
                notes.append(f"legality: {node.mark_get_id().get_name()} mark dropped, its loop carries "
                             f"{_named(bad, deps)}")
                node = node.delete()
                return visit(node)
        for c in range(node.n_children()):
            node = visit(node.child(c)).parent()
        return node
    root = visit(schedule.get_root())
    return root.get_schedule(), notes


def _band_below(node: isl.ScheduleNode) -> isl.ScheduleNode | None:
    """The first band below `node` in tree order: the loop a mark applies to, as code generation
    reads it (schedule/isl_ast.py marks the first loop it meets under the mark)."""
    if node.get_type() == isl.schedule_node_type.band:
        return node
    for c in range(node.n_children()):
        band = _band_below(node.child(c))
        if band is not None:
            return band
    return None


def _named(bad: isl.UnionMap, deps: Deps) -> str:
    pair = bad.sample()
    kinds = deps.kinds_of(isl.UnionMap.from_basic_map(pair)) or ["?"]
    return f"a {'/'.join(k.upper() for k in kinds)} dependence, e.g. {pair}"
