"""isl's top-level parts that can share their outer loop (`tree.shape` step 0, docs/poly.md).

isl may return a sequence of parts, each running over all rows; when the parts walk the same
rows and depend on each other only within a row, one loop over the rows can run them all, so
each row is read from memory once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import islpy as isl

from .access import extents, single_dim, stride1_dims
from .deps import Deps
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


def merge_parts(model: PolyModel, deps: Deps, groups, independent: bool):
    """isl sometimes runs a row-wise elementwise part and a row reduction that reads the same
    rows as two parts in sequence, each over all rows (bert's layernorm backward: its inputs
    read from memory twice). Consecutive parts whose leading band members are, for every
    statement, one of its own dims with the same extent and constant, coincident in each, and
    along which every dependence between the parts stays in one iteration, run under loops of
    those members: as many as all parts share (bert ~4253: batch and row, so the row sum reads
    the row its producer just wrote, from L1, not the 2.3 MB of rows a batch wrote before);
    below them each part keeps its own structure. Parts with no dependence between them (they
    only share inputs) merge only when `independent` (ScheduleConfig.input_fusion)."""
    out = [groups[0]]
    for filt, band in groups[1:]:
        pfilt, prev = out[-1]
        parts = prev.parts if isinstance(prev, Merged) else [(pfilt, prev)]
        fwd = deps.validity.intersect_domain(pfilt).intersect_range(filt)
        bands = [b for _, b in parts] + [band]
        upas, rows, dependent = [], {}, not fwd.is_empty()
        if independent or dependent:
            # parts that only share inputs keep one shared loop: deeper, yolo ~1373's seven
            # independent transposes ran 10.6 instead of 7.6 ms
            most = math.inf if dependent else 1
            # the first shared loop may walk a stride-1 dim when the parts depend on each other
            # (the consumer reads what its producer just wrote); independent parts gain nothing
            # from it and would lose their vector loops (resnet's 7 elementwise parts of
            # [1024, 256] / [256, 1024] each, ~2248: 7.7 ms, 13x the plain schedule)
            while len(upas) < most and (got := _shared_member(model, bands, len(upas))) is not None \
                    and ((not upas and dependent) or not _walks_stride1(model, rows, got[1])) \
                    and _same_iteration(model, deps, upas + [got[0]], fwd, pfilt, filt):
                upas.append(got[0])
                for n, d in got[1].items():
                    rows[n] = rows.get(n, ()) + (d,)
            # an earlier merge of these parts may have shared fewer loops: keep that depth at most
            if isinstance(prev, Merged):
                upas = upas[:len(prev.upas)]
                rows = {n: d[:len(upas)] for n, d in rows.items()}
        if upas:
            out[-1] = (pfilt.union(filt), Merged(upas, rows, parts + [(filt, band)]))
            continue
        out.append((filt, band))
    return out


def _shared_member(model, bands, q: int):
    """(union of the bands' members q, {statement: its dim}) when each maps every statement to
    one of its own dims, with one constant and one extent across all, and each is coincident."""
    upa, rows, seen = None, {}, set()
    for band in bands:
        if band is None or band.band_n_member() <= q or not band.band_member_get_coincident(q):
            return None
        member = band.band_get_partial_schedule().get_at(q)
        for name, hit in member_dims(member).items():
            if hit is None:
                return None
            rows[name] = hit[0]
            seen.add((hit[1], extents(model.statement(name))[hit[0]]))
        upa = member if upa is None else upa.union_add(member)
    return (upa, rows) if len(seen) == 1 else None


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
