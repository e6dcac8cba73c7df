"""isl's top-level parts that can share their outer loop (`tree.shape` step 0, docs/poly.md).

isl may return a sequence of parts, each running over all rows; when the parts walk the same
rows and depend on each other only within a row, one loop over the rows can run them all, so
each row is read from memory once.
"""
from __future__ import annotations

from dataclasses import dataclass

import islpy as isl

from .access import extents, single_dim
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
    upa: isl.UnionPwAff  # the shared member, every statement of every part
    rows: dict[str, int]  # statement -> its dim that the shared loop runs
    parts: list  # [(filter, isl's band of the part or None)], in isl's order


def merge_parts(model: PolyModel, deps: Deps, groups, independent: bool):
    """isl sometimes runs a row-wise elementwise part and a row reduction that reads the same
    rows as two parts in sequence, each over all rows (bert's layernorm backward: its inputs
    read from memory twice). Consecutive parts whose first band member is, for every statement,
    one of its own dims with the same extent and constant, coincident in each, and along which
    every dependence between the parts stays in one iteration, run under one loop of that
    member; below it each part keeps its own structure. Parts with no dependence between them
    (they only share inputs) merge only when `independent` (ScheduleConfig.input_fusion)."""
    out = [groups[0]]
    for filt, band in groups[1:]:
        pfilt, prev = out[-1]
        parts = prev.parts if isinstance(prev, Merged) else [(pfilt, prev)]
        got = _shared_member(model, [b for _, b in parts] + [band])
        fwd = deps.validity.intersect_domain(pfilt).intersect_range(filt)
        if got is not None and (independent or not fwd.is_empty()) \
                and _same_iteration(model, deps, got[0], fwd, pfilt, filt):
            out[-1] = (pfilt.union(filt), Merged(got[0], got[1], parts + [(filt, band)]))
            continue
        out.append((filt, band))
    return out


def _shared_member(model, bands):
    """(union of the bands' first members, {statement: its dim}) when each maps every statement
    to one of its own dims, with one constant and one extent across all, and each is coincident."""
    upa, rows, seen = None, {}, set()
    for band in bands:
        if band is None or not band.band_member_get_coincident(0):
            return None
        member = band.band_get_partial_schedule().get_at(0)
        for name, hit in member_dims(member).items():
            if hit is None:
                return None
            rows[name] = hit[0]
            seen.add((hit[1], extents(model.statement(name))[hit[0]]))
        upa = member if upa is None else upa.union_add(member)
    return (upa, rows) if len(seen) == 1 else None


def _same_iteration(model, deps: Deps, upa, fwd, before, after) -> bool:
    """No dependence from `after` back to `before`, and every one from `before` to `after`
    (`fwd`) joins two instances with the same value of `upa`."""
    if not deps.validity.intersect_domain(after).intersect_range(before).is_empty():
        return False
    umap = isl.UnionMap.from_multi_union_pw_aff(isl.MultiUnionPwAff.from_union_pw_aff(upa))
    return fwd.apply_domain(umap).apply_range(umap).deltas().is_subset(
        isl.UnionSet.read_from_str(model.ctx, "{ [0] }"))
