"""Coalescing of a band's trailing members into one linear member (`tree.shape` step 5,
docs/poly.md): a [..., 3, 3] tail holds no vector; 9*i1 + 3*i2 + i3 walks the arrays with
stride 1 and does. Which members may join, and where a broadcast operand says stop.
"""
from __future__ import annotations

from math import lcm, prod

import islpy as isl

from .access import big_accesses, extents, pow2_lanes, single_dim, stride1_dim
from .isl_util import maps_of
from .model import PolyModel, Statement


def extent_of(model: PolyModel, stmts, exprs, q) -> int:
    ext = 0
    for s in stmts:
        text = f"{{ {s.name}[{', '.join(s.dims)}] -> [({exprs[s.name][q]})] }}"
        r = isl.Map(text, context=model.ctx).intersect_domain(s.domain).range()
        ext = max(ext, int(r.dim_max_val(0).to_python() - r.dim_min_val(0).to_python() + 1))
    return ext


def coalesce_tail(model, stmts, exprs, coincident, opts, notes, where, first: int):
    """Trailing members too short to vectorise (a [..., 3, 3] tail) become one linear member
    9*i2 + 3*i3 + i4 when they are every statement's trailing dims and its written array's
    trailing indices, so the linear member walks that array with stride 1; members before
    `first` (the parallel one) join only when the rest holds no vector of half a register.
    Returns (exprs, coincident, {statement: coalesced dim indices} or None)."""
    lanes = min(opts.lanes.get(s.name, 1) for s in stmts)
    last = len(coincident) - 1
    if lanes < 4 or last < 1:
        return exprs, coincident, None
    ext = extent_of(model, stmts, exprs, last)
    if pow2_lanes(ext, lanes) >= max(4, lanes // 2):  # already a good vector
        return exprs, coincident, None
    q, total, rows = last, ext, False
    # the parallel member joins too when the vector would stay under half a register without it
    # (yolo [32, 26, 26, 3, 1]: 2028 = 4 x 507 took 13-lane vectors, 1.9x the plain schedule),
    # unless a read varies along one of it and the rest but not the other ([32, 84] + [84]
    # would read bias[L mod 84] lane by lane)
    while q - 1 >= (first if pow2_lanes(total, lanes) >= max(4, lanes // 2) else 0) and \
            pow2_lanes(total, lanes) < lanes and coincident[q - 1] and \
            all(_contiguous_tail(s, exprs[s.name][q - 1:], opts.shapes) for s in stmts):
        # rows of a register or more whose broadcast operand changes between them stay rows
        rows = total >= lanes and any(_broadcast_above(s, exprs[s.name][q - 1], exprs[s.name][q:]) for s in stmts)
        # joining a member to a tail that vectorises must not gather an operand: the tail does
        # when a power of two of 4 lanes or more divides it, or, still the innermost member
        # alone, as whole registers and a shorter remainder loop when it holds two
        # (tree._vector_split; yolo's bias [255] on [32, 26, 26, 255] coalesced to 172380 read
        # bias[L mod 255] lane by lane, 3.6x slower than 7 registers and a remainder of 31 per
        # row); a tail that stays scalar without it gains from any vector
        if rows or ((pow2_lanes(total, lanes) >= 4 or (q == last and total >= 2 * lanes)) and
                    any(_broadcast_below(s, exprs[s.name][q - 1], exprs[s.name][q:], lanes) for s in stmts)):
            break
        q -= 1
        total *= extent_of(model, stmts, exprs, q)
    if q == last or (pow2_lanes(total, lanes) <= pow2_lanes(ext, lanes) and not rows):
        return exprs, coincident, None
    new, dims = {}, {}
    for s in stmts:
        exts = dict(zip(s.dims, extents(s)))
        terms, stride = [], 1
        for d in reversed(exprs[s.name][q:]):
            terms.append(f"{stride} * {d}")
            stride *= exts[d]
        new[s.name] = exprs[s.name][:q] + [" + ".join(reversed(terms))]
        dims[s.name] = [s.dims.index(d) for d in exprs[s.name][q:]]
    notes.append(f"order: {where}: members {q}..{last} coalesced into one of {total} iterations "
                 f"(the innermost had {ext}, no power-of-two vector of half a register)")
    return new, coincident[:q] + [all(coincident[q:])], dims


def _contiguous_tail(s: Statement, dims: list[str], shapes: dict) -> bool:
    """Are `dims` the statement's trailing dims and its writes' trailing indices, in order, and
    the trailing indices of each big read that walks the innermost of them with stride 1? A
    read contiguous along the innermost dim only would become a gather in the linear member
    (lstm [64, 500, 300] -> [500, 64, 300] ~5129: 16-lane gathers, 1.5x plain's 15-lane loads).
    Indices, not extents: an access to part of a wider array (an UnPad's [.., 3, 3] of [.., 4, 4])
    passes and is gathered; `shapes` (kernel arguments only) serves to skip a constant index
    into a dim of 1."""
    ext = extents(s)
    unit = {q for q, e in enumerate(ext) if e == 1 and s.dims[q] not in dims}  # isl keeps no loop for them
    if [d for q, d in enumerate(s.dims) if q not in unit][-len(dims):] != dims:
        return False
    inner = s.dims.index(dims[-1])
    writes = maps_of(s.writes)
    written = {m.get_tuple_name(isl.dim_type.out) for m in writes}
    reads = [m for m in big_accesses(s) if m.get_tuple_name(isl.dim_type.out) not in written]
    for m in writes + [r for r in reads if stride1_dim(r) == inner]:
        if not m.is_single_valued():  # a gather's read of a whole dim
            return False
        pma = isl.PwMultiAff.from_map(m)
        shape = shapes.get(m.get_tuple_name(isl.dim_type.out))
        # a unit dim's index, or a constant index into an array dim of 1, is 0 throughout
        hits = [single_dim(pma.get_pw_aff(q)) for q in range(pma.dim(isl.dim_type.out))
                if not (shape is not None and shape[q] == 1 and pma.get_pw_aff(q).is_cst())]
        hits = [h for h in hits if h is None or h[0] not in unit]
        if len(hits) < len(dims):
            return False
        for k, d in enumerate(dims):
            hit = hits[len(hits) - len(dims) + k]
            if hit is None or hit != (s.dims.index(d), 0):
                return False
    return True


def _involved(m: isl.Map, dims: list[int]) -> list[bool]:
    """Which of `dims` the index expressions of access `m` use (not its bounds)."""
    m = m.gist_domain(m.domain())
    if not m.is_single_valued():  # a gather's read of a whole dim: what its constraints use
        return [m.involves_dims(isl.dim_type.in_, j, 1) for j in dims]
    pma = isl.PwMultiAff.from_map(m)
    return [pma.involves_dims(isl.dim_type.in_, j, 1) for j in dims]


def _broadcast_above(s: Statement, dim: str, tail: list[str]) -> bool:
    """Does a read of `s` vary along `dim` but along none of `tail`? Coalesced with the tail,
    its index would be the linear member divided by the tail's size, loaded lane by lane
    (alexnet's BiasAdd [32, 192, 13, 13] + [192, 1, 1]: 0.36 ms coalesced across the 192
    channels, against 0.13 plain); kept apart, it is one scalar per row of the tail."""
    at = [s.dims.index(d) for d in [dim] + tail]
    return any(hit[0] and not any(hit[1:]) for hit in (_involved(m, at) for m in maps_of(s.reads)))


def _broadcast_below(s: Statement, dim: str, tail: list[str], lanes: int) -> bool:
    """Does a read of `s` vary along `tail` but not along `dim`, with a period (the extents of
    the tail from the first dim it uses inward) whose vectors do not repeat within 4 registers?
    Coalesced with `dim`, its index would be the linear member modulo that period: yolo's
    [3, 2] anchors (period 6, every 48 lanes) load as a vector and a shuffle, a bias of 84 on
    [32, 84] lane by lane."""
    at = [s.dims.index(d) for d in [dim] + tail]
    exts = extents(s)
    for m in maps_of(s.reads):
        hit = _involved(m, at)
        if hit[0] or not any(hit[1:]):
            continue
        first = hit[1:].index(True)
        period = prod(exts[j] for j in at[1 + first:])
        if lcm(period, lanes) > 4 * lanes:
            return True
    return False
