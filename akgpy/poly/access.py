"""What a statement's accesses say, read off its isl relations: extents, the dims that walk
an array with stride 1, the order of the written array's indices. The tree passes
(`tree.py`) and the tile shapes (`tiles.py`) decide from these."""
from __future__ import annotations

from math import prod

import islpy as isl

from .isl_util import maps_of
from .model import Statement


def single_dim(pa: isl.PwAff) -> tuple[int, int] | None:
    """(dim index, constant) when `pa` is exactly dim + constant on its whole domain."""
    pieces = []
    pa.foreach_piece(lambda _s, aff: pieces.append(aff))
    if len(pieces) != 1:
        return None
    aff = pieces[0]
    if aff.dim(isl.dim_type.div) != 0 or not aff.get_denominator_val().is_one():
        return None
    hit = None
    for q in range(aff.dim(isl.dim_type.in_)):
        c = aff.get_coefficient_val(isl.dim_type.in_, q).to_python()
        if c == 0:
            continue
        if c != 1 or hit is not None:
            return None
        hit = q
    return None if hit is None else (hit, int(aff.get_constant_val().to_python()))


def extents(s: Statement) -> list[int]:
    """Extent of each dim of the statement's (box) domain."""
    return [int(s.domain.dim_max_val(q).to_python() - s.domain.dim_min_val(q).to_python() + 1)
            for q in range(len(s.dims))]


def array_size(m: isl.Map) -> int:
    r = m.range()
    n = 1
    for q in range(r.dim(isl.dim_type.set)):
        n *= int(r.dim_max_val(q).to_python() - r.dim_min_val(q).to_python() + 1)
    return n


def stride1_dim(m: isl.Map) -> int | None:
    """The statement dim that moves the access's innermost non-unit index by 1 (8*ko + l: l),
    if exactly one does."""
    if not m.is_single_valued():  # a gather's read of a whole dim: no index expression
        return None
    r = m.range()
    n = r.dim(isl.dim_type.set)
    pma = isl.PwMultiAff.from_map(m)
    for q in reversed(range(n)):
        if r.dim_max_val(q).to_python() != r.dim_min_val(q).to_python():
            break
    else:
        return None
    pieces = []
    pma.get_pw_aff(q).foreach_piece(lambda _s, aff: pieces.append(aff))
    if len(pieces) != 1 or pieces[0].dim(isl.dim_type.div) != 0 or not pieces[0].get_denominator_val().is_one():
        return None
    aff = pieces[0]
    ones = [d for d in range(aff.dim(isl.dim_type.in_))
            if aff.get_coefficient_val(isl.dim_type.in_, d).to_python() == 1]
    return ones[0] if len(ones) == 1 else None


def stride1_dims(s: Statement) -> tuple[int | None, set[int]]:
    """(dim walking the statement's largest array with stride 1, the stride-1 dims of its writes)."""
    best, size, writes = None, -1, set()
    for m in maps_of(s.writes):
        d = stride1_dim(m)
        if d is not None:
            writes.add(d)
    for m, is_write in [(m, True) for m in maps_of(s.writes)] + [(m, False) for m in maps_of(s.reads)]:
        d = stride1_dim(m)
        n = array_size(m) + (1 if is_write else 0)  # ties: the written array
        if d is not None and n > size:
            best, size = d, n
    return best, writes


def pow2_lanes(ext: int, lanes: int) -> int:
    """The largest power of two <= lanes that divides ext."""
    p = 1
    while p * 2 <= lanes and ext % (p * 2) == 0:
        p *= 2
    return p


def pow2_at_least(n: int) -> int:
    """The smallest power of two >= n (the lanes a vector of n elements is padded to)."""
    return 1 << max(n - 1, 0).bit_length()


def big_accesses(s: Statement) -> list[isl.Map]:
    """Accesses to arrays at least half the size of the statement's largest: broadcast operands
    are small and stay in cache whatever the loop order, so they never ask for tiling."""
    maps = maps_of(s.writes) + maps_of(s.reads)
    biggest = max((array_size(m) for m in maps), default=0)
    return [m for m in maps if 2 * array_size(m) >= biggest]


def write_order(m: isl.Map) -> list[int] | None:
    """The statement dims in the order of the written array's indices (each index one dim)."""
    pma = isl.PwMultiAff.from_map(m)
    out = []
    for q in range(pma.dim(isl.dim_type.out)):
        pa = pma.get_pw_aff(q)
        if pa.is_cst():  # a unit dim
            continue
        hit = single_dim(pa)
        if hit is None:
            return None
        out.append(hit[0])
    return out


def flat_strides(s: Statement, m: isl.Map, shape, signed: bool = False) -> dict[int, int] | None:
    """Each dim's step in the flat offset of access `m` into an array of `shape`, when affine
    (its size unless `signed`)."""
    if not m.is_single_valued():  # a gather's read of a whole dim
        return None
    pma = isl.PwMultiAff.from_map(m)
    flat = None
    for q in range(pma.dim(isl.dim_type.out)):
        pa = pma.get_pw_aff(q).scale_val(isl.Val.int_from_si(m.get_ctx(), prod(shape[q + 1:])))
        flat = pa if flat is None else flat.add(pa)
    if flat is None:
        return None
    pieces = []
    flat.foreach_piece(lambda _s, aff: pieces.append(aff))
    if len(pieces) != 1 or pieces[0].dim(isl.dim_type.div) or not pieces[0].get_denominator_val().is_one():
        return None
    steps = {q: int(pieces[0].get_coefficient_val(isl.dim_type.in_, q).to_python()) for q in range(len(s.dims))}
    return steps if signed else {q: abs(v) for q, v in steps.items()}
