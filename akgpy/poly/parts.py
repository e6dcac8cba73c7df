"""isl's top-level parts that can share their outer loop (`tree.shape` step 0, docs/poly.md).

isl may return a sequence of parts, each running over all rows; when the parts walk the same
rows and depend on each other only within a row, one loop over the rows can run them all, so
each row is read from memory once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import islpy as isl

from .access import array_size, extents, single_dim, stride1_dims
from .deps import Deps
from .isl_util import maps_of, sets_of
from .model import PolyModel


def member_dims(upa: isl.UnionPwAff) -> dict[str, tuple[int, int] | None]:
    """Per statement, (its dim, constant) when the member is that dim plus a constant, else None."""
    out = {}
    lst = upa.get_pw_aff_list()
    for q in range(lst.n_pw_aff()):
        pa = lst.get_at(q)
        out[pa.get_domain_space().get_tuple_name(isl.dim_type.set)] = single_dim(pa)
    return out


@dataclass
class Merged:
    """Consecutive top-level parts of isl's tree run under one shared outer loop."""
    upas: list  # the shared members (isl.UnionPwAff, outermost first), every statement of every part
    rows: dict[str, tuple[int, ...]]  # statement -> its dims that the shared loops run
    parts: list  # [(filter, isl's band of the part or None)], in isl's order


def split_serial(model: PolyModel, deps: Deps, groups, notes: list[str]):
    """`groups` with each part whose band isl made serial by folding in a reduction across its
    first member (a chunked full sum's final scalar sum, run as each chunk is done) cut in two:
    the statements that have that member as a dim of their own and carry no dependence along it,
    under isl's band restricted to them (its coincidence recomputed for them: now parallel), then
    the rest, each in its own nest (`_group` with no band). Only where some statement lacks the
    member, which already kept `_group` from sharing any loop, and only when nothing in the
    second half feeds the first. A [8, 26, 26, 3, 80] loss sum came back so: each statement ran
    its own nest and the chunks' [8, 26, 13, 80] float64 lane partials went through memory."""
    out = []
    for filt, band in groups:
        got = _split_serial(model, deps, filt, band)
        if got:
            tail = sorted(st.get_tuple_name() for st in sets_of(got[1][0]))
            notes.append(f"fusion: isl's band over {len(sets_of(filt))} statements is serial in its first member, which "
                         f"{', '.join(tail)} lack or carry a dependence along; they run after the rest, whose band "
                         "is kept (its parallel members recomputed)")
        out += got or [(filt, band)]
    return out


def _split_serial(model: PolyModel, deps: Deps, filt, band):
    if band is None:
        return None
    mupa = band.band_get_partial_schedule()
    first = mupa.get_at(0)
    hits = member_dims(first)
    if all(h is not None for h in hits.values()):
        return None
    step = isl.UnionMap.from_union_pw_aff(first)
    zero = isl.UnionSet.read_from_str(model.ctx, "{ [0] }")

    def carries(n: str) -> bool:
        mine = isl.UnionSet.from_set(model.statement(n).domain)
        own = deps.validity.intersect_domain(mine).intersect_range(mine)
        return not own.apply_domain(step).apply_range(step).deltas().is_subset(zero)
    head = [n for n, h in hits.items() if h is not None and not carries(n)]
    if not head or len(head) == len(hits) or len({hits[n][1] for n in head}) != 1:
        return None
    head_set = union_of(model, head)
    # isl's filters name whole statement spaces: subtracted from one, the head's domains would
    # leave their complements in the tail, where a later pass schedules that statement a second
    # time (empty there, yet realised with the other schedule's loop bindings)
    tail_set = filt.intersect(model.domain).subtract(head_set)
    if not deps.validity.intersect_domain(tail_set).intersect_range(head_set).is_empty():
        return None
    # isl's bands nested right below this one, as one band: without the tail they may permute
    n = band.band_n_member()
    while band.n_children() == 1 and band.child(0).get_type() == isl.schedule_node_type.band:
        band = band.child(0)
        mupa, n = mupa.flat_range_product(band.band_get_partial_schedule()), n + band.band_n_member()
    part = mupa.intersect_domain(head_set)
    inner = deps.validity.intersect_domain(head_set).intersect_range(head_set)
    gaps = inner.apply_domain(isl.UnionMap.from_multi_union_pw_aff(part)).apply_range(
        isl.UnionMap.from_multi_union_pw_aff(part)).deltas()
    ids = ", ".join(f"d{q}" for q in range(n))
    ahead = isl.UnionSet.read_from_str(model.ctx, f"{{ [{ids}] : " + " and ".join(f"d{q} >= 0" for q in range(n)) + " }")
    node = isl.Schedule.from_domain(head_set).get_root().child(0).insert_partial_schedule(part)
    node = node.band_set_permutable(int(gaps.is_subset(ahead)))
    for q in range(n):  # coincident: every dependence stays in one iteration of members 0..q
        zeros = isl.UnionSet.read_from_str(model.ctx, f"{{ [{ids}] : " + " and ".join(f"d{k} = 0" for k in range(q + 1)) + " }")
        node = node.band_member_set_coincident(q, int(gaps.is_subset(zeros)))
    return [(head_set, node), (tail_set, None)]


def union_of(model: PolyModel, names) -> isl.UnionSet:
    """The domains of the statements `names`, as one union set."""
    out = None
    for n in names:
        u = isl.UnionSet.from_set(model.statement(n).domain)
        out = u if out is None else out.union(u)
    return out


def merge_parts(model: PolyModel, deps: Deps, groups, independent: bool):
    """isl sometimes runs a row-wise elementwise part and a row reduction that reads the same
    rows as two parts in sequence, each over all rows (bert's layernorm backward: its inputs
    read from memory twice). Consecutive parts whose leading band members are, for every
    statement, one of its own dims with the same extent and constant, coincident in each, and
    along which every dependence between the parts stays in one iteration, run under loops of
    those members: as many as all parts share (bert ~4253: batch and row, so the row sum reads
    the row its producer just wrote, from L1, not the 2.3 MB of rows a batch wrote before);
    below them each part keeps its own structure. Parts with no dependence between them (they
    only share inputs) merge only when `independent` (ScheduleConfig.input_fusion).
    A group's depth bounds every later member's, so the order of merges matters: an NZ
    softmax's small mask part, merged first at one loop, held its max/exp and sum/divide parts
    to that loop (~1004), the exp rows going through memory. Three ways are tried and the one
    sharing the most loops wins (ties: the first): one pass over all neighbours; the dependent
    neighbours first, then the independent ones into groups of one shared loop at most; the
    same, where a part does not join the group before it in fewer loops than it would share
    with the part after it (`ahead`)."""
    def two_pass(groups, ahead):
        out = _merge(model, deps, groups, False, ahead=ahead)
        return _merge(model, deps, out, True, light=True) if independent else out
    best = None
    for order in [groups] + ([moved] if independent and (moved := _beside_readers(model, deps, groups)) else []):
        # without independent merges the plain two-pass order is the one pass; `ahead` needs a
        # part with neighbours on both sides
        for out in [_merge(model, deps, order, independent)] + [
                two_pass(order, ahead) for ahead in ([False] if independent else []) + ([True] if len(order) > 2 else [])]:
            if best is None or _shared(out) > _shared(best):
                best = out
    return best


def _beside_readers(model: PolyModel, deps: Deps, groups):
    """`groups` with each part moved up to just after the nearest earlier part that reads an
    input it reads, past parts it has no dependence with either way (their order is free); None
    when no part moves. yolo's loss graphs (~3153) read their inputs in a sum's chunk loop and
    again in an elementwise gradient, with the sum's final scalar reduction between them: as
    neighbours the two can share their batch loop, and the gradient reads what the sum just read."""
    out, moved = list(groups), False
    for j in range(1, len(out)):
        filt = out[j][0]
        for i in range(j - 1, -1, -1):
            other = out[i][0]
            if not (deps.validity.intersect_domain(other).intersect_range(filt).is_empty()
                    and deps.validity.intersect_domain(filt).intersect_range(other).is_empty()):
                break
            if _read_arrays(model, other) & _read_arrays(model, filt):
                if i < j - 1:
                    out.insert(i + 1, out.pop(j))
                    moved = True
                break
    return out if moved else None


def _shared(groups) -> int:
    """The loops merging saves: per group, its shared loops times the parts beyond its first."""
    return sum(len(g.upas) * (len(g.parts) - 1) for _, g in groups if isinstance(g, Merged))


def _merge(model, deps, groups, independent: bool, ahead: bool = False, light: bool = False):
    """One pass of merge_parts over `groups`. `light`: a pass after the dependent merges,
    which leaves a group of more than one shared loop as it is. `ahead`: a part does not join
    the group before it in fewer loops than it would share with the part after it (that
    group's depth bounds every later member's)."""
    deeper = [0] * len(groups)
    if ahead:
        for i in range(1, len(groups) - 1):
            pair = _merge(model, deps, groups[i:i + 2], independent)
            deeper[i] = len(pair[0][1].upas) if len(pair) == 1 else 0
    out = [groups[0]]
    for i, (filt, band) in enumerate(groups[1:], 1):
        pfilt, prev = out[-1]
        parts = prev.parts if isinstance(prev, Merged) else [(pfilt, prev)]
        fwd = deps.validity.intersect_domain(pfilt).intersect_range(filt)
        if light and (isinstance(band, Merged) or (isinstance(prev, Merged) and len(prev.upas) > 1)):
            out.append((filt, band))
            continue
        upas, rows, dependent = [], {}, not fwd.is_empty()
        # a band that a merge aligned keeps its order (its shared members lead); the others'
        # members may be matched in any order where the band is permutable and a dependence
        # ties the parts' dims together (without one, any two dims of one extent would match:
        # yolo's independent transposes then shared a loop over 3 channels with 3 kernel rows)
        free = dependent and not isinstance(prev, Merged)
        bands = [(b, _order(b) if free else None) for _, b in parts] + [(band, _order(band) if dependent else None)]
        if independent or dependent:
            # parts that only share inputs keep one shared loop: deeper, yolo ~1373's seven
            # independent transposes ran 10.6 instead of 7.6 ms
            most = math.inf if dependent else 1

            def fits(upa, got):
                # the first shared loop may walk a stride-1 dim when the parts depend on each
                # other (the consumer reads what its producer just wrote); independent parts gain
                # nothing from it and would lose their vector loops (resnet's 7 elementwise parts
                # of [1024, 256] / [256, 1024] each, ~2248: 7.7 ms, 13x the plain schedule)
                return ((not upas and dependent) or not _walks_stride1(model, rows, got)) \
                    and _same_iteration(model, deps, upas + [upa], fwd, pfilt, filt)
            while len(upas) < most and (got := _shared_member(model, bands, len(upas), fits)):
                upas.append(got[0])
                for n, d in got[1].items():
                    rows[n] = rows.get(n, ()) + (d,)
            tie = _read_pairs(model, pfilt, filt) if not (upas or dependent or isinstance(prev, Merged)) else None
            if tie is not None and not tie.is_empty():
                # no member q of each part has one extent, but both read the same input: a member
                # of each, in any order, under which every element both read is read in the same
                # iteration (yolo ~3153: a sum's chunk loop (chunk, batch) and a gradient's
                # (batch, ...) share the batch; the gradient re-reads the batch's inputs from L2)
                bands = [(b, _order(b)) for _, b in parts] + [(band, _order(band))]
                got = _shared_member(model, bands, 0, lambda upa, got: not _walks_stride1(model, rows, got)
                                     and _same_iteration(model, deps, [upa], tie, pfilt, filt))
                if got:
                    upas, rows = [got[0]], {n: (d,) for n, d in got[1].items()}
            # an earlier merge of these parts may have shared fewer loops: keep that depth at most
            if isinstance(prev, Merged):
                upas = upas[:len(prev.upas)]
                rows = {n: d[:len(upas)] for n, d in rows.items()}
        if upas and len(upas) >= deeper[i]:
            aligned = [_permuted(b, order) if order and order != sorted(order) else b for b, order in bands]
            out[-1] = (pfilt.union(filt), Merged(upas, rows, [(f, b) for (f, _), b in zip(parts + [(filt, band)], aligned)]))
            continue
        out.append((filt, band))
    return out


def _read_pairs(model: PolyModel, before, after) -> isl.UnionMap | None:
    """Instance pairs of the parts `before` and `after` that read one element of the largest
    array both read, from `before` to `after`; None when they read no array in common. (Not
    every shared input: a scalar or a broadcast row both read ties each instance to all.)"""
    mine, theirs = _by_array(model.reads.intersect_domain(before)), _by_array(model.reads.intersect_domain(after))
    common = sorted(set(mine) & set(theirs))
    if not common:
        return None
    big = max(common, key=lambda a: array_size(maps_of(mine[a])[0]))
    return mine[big].apply_range(theirs[big].reverse())


def _read_arrays(model: PolyModel, part) -> set[str]:
    return {m.get_tuple_name(isl.dim_type.out) for m in maps_of(model.reads.intersect_domain(part))}


def _by_array(um: isl.UnionMap) -> dict[str, isl.UnionMap]:
    out: dict[str, isl.UnionMap] = {}
    for m in maps_of(um):
        name, u = m.get_tuple_name(isl.dim_type.out), isl.UnionMap.from_map(m)
        out[name] = out[name].union(u) if name in out else u
    return out


def _order(band) -> list[int] | None:
    """The band's member positions, to be reordered as members are matched; None for a band
    that keeps its order (not permutable)."""
    return list(range(band.band_n_member())) if band is not None and band.band_get_permutable() else None


def _member(band, q: int):
    """(band member q, {statement: (dim, constant)}) when it maps every statement to one of its
    own dims plus a constant and is coincident; else None."""
    if band is None or band.band_n_member() <= q or not band.band_member_get_coincident(q):
        return None
    member = band.band_get_partial_schedule().get_at(q)
    hits = member_dims(member)
    return None if any(h is None for h in hits.values()) else (member, hits)


def _shared_member(model, bands, q: int, fits):
    """(union of the bands' members q, {statement: its dim}), each member one of the
    statement's own dims with one constant and one extent across all, and coincident, and
    `fits(union, rows)`. isl orders each part's band on its own, so two parts may walk the same
    rows in other orders (an NZ softmax: (i1, i3, i4, i0) for the max and exp, (i1, i0, i3, i4)
    for the sum): for a band with an `order` the member is searched among its members not yet
    shared (order[q:]) and moved to order[q]; a band without one offers its member q only."""
    def search(k, upa, rows, seen):
        if k == len(bands):
            return (upa, rows) if len(seen) == 1 and fits(upa, rows) else None
        band, order = bands[k]
        if band is None:
            return None
        tries = range(q, len(order)) if order is not None else [q]
        for t in tries:
            got = _member(band, order[t] if order is not None else t)
            if got is None:
                continue
            keys = seen | {(c, extents(model.statement(n))[d]) for n, (d, c) in got[1].items()}
            if len(keys) != 1:
                continue
            found = search(k + 1, got[0] if upa is None else upa.union_add(got[0]),
                           dict(rows, **{n: d for n, (d, _) in got[1].items()}), keys)
            if found is not None:
                if order is not None:
                    order.insert(q, order.pop(t))
                return found
        return None
    return search(0, None, {}, set())


def _permuted(band, order: list[int]):
    """The permutable `band` with its members in `order` (each keeps its coincidence)."""
    mupa = band.band_get_partial_schedule()
    lst = isl.UnionPwAffList.alloc(mupa.get_ctx(), len(order))
    for pos in order:
        lst = lst.add(mupa.get_at(pos))
    co = [band.band_member_get_coincident(pos) for pos in order]
    node = band.delete().insert_partial_schedule(isl.MultiUnionPwAff.from_union_pw_aff_list(mupa.get_space(), lst))
    node = node.band_set_permutable(1)
    for q, c in enumerate(co):
        node = node.band_member_set_coincident(q, c)
    return node


def _walks_stride1(model, rows: dict[str, tuple[int, ...]], got: dict[str, int]) -> bool:
    """A statement's largest array is walked with stride 1 along its next shared dim while it
    has loops left below the shared ones: it would lose its vector loop (step 1's rule)."""
    for n, d in got.items():
        s = model.statement(n)
        shared = set(rows.get(n, ())) | {d}
        if stride1_dims(s)[0] == d and any(e > 1 and q not in shared for q, e in enumerate(extents(s))):
            return True
    return False


def _same_iteration(model, deps: Deps, upas, fwd, before, after) -> bool:
    """No dependence from `after` back to `before`, and every one from `before` to `after`
    (`fwd`) joins two instances with the same values of `upas`."""
    if not deps.validity.intersect_domain(after).intersect_range(before).is_empty():
        return False
    mupa = isl.MultiUnionPwAff.from_union_pw_aff(upas[0])
    for u in upas[1:]:
        mupa = mupa.flat_range_product(isl.MultiUnionPwAff.from_union_pw_aff(u))
    umap = isl.UnionMap.from_multi_union_pw_aff(mupa)
    zero = "{ [" + ", ".join("0" for _ in upas) + "] }"
    return fwd.apply_domain(umap).apply_range(umap).deltas().is_subset(isl.UnionSet.read_from_str(model.ctx, zero))
