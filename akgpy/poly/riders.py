"""Riders: an elementwise statement run inside the loops of a reduction that computes the same
vector math, so that the two share one loop body and LLVM computes the chain once.

yolo's loss `~5495` sums sq(log(x / a) - b) over every element and writes an elementwise output
from the same log(x / a) - b. Both are statements under the shared batch loop, but they ran as
two loops over the batch row: the output's loop coalesced into 338 vectors of 48, the sum's
partials in 13 chunks of 26 vectors of 48, each computing the log. The sum walks each input
with a mixed radix (chunk * 1248 + step * 48 + lane) that covers the row exactly once, so the
output's flat offset L within the row can run in those loops: the chunk is floor(L / 1248), the
step floor(L / 48) mod 26, the lane L mod 48. Kernel alone, 2 threads, 31 interleaved runs:
0.77x and 0.78x with the LLC flushed, 0.70x cached. Hand-written in one loop but reading
through views of its own (another pointer each), LLVM had computed the chain twice: 0.84x
flushed, 0.72x cached; hence a rider reads through its host's views (schedule/isl_ast.py).

Only where the two share an inlined block of vector math (kept.math_sources): co-located with
nothing shared, yolo's `~3153` (loss and gradient loops over the same rows; stop 45's
hand-written fusion, whose exp LLVM did not share through separate views) measured 1.01-1.04x.
Its gradient now shares the loss's exp(-|x|) (graph/algebra.py share_exp) and rides: 0.84x.
The rider's instances then run interleaved with the
host's; the rider shares no array that it or a statement it moves past writes, so no
dependence orders them (the final schedule is checked anyway).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import islpy as isl

from .access import extents, flat_strides, stride1_dims
from .isl_util import maps_of, sets_of
from .model import PolyModel, Statement


@dataclass(frozen=True)
class Rider:
    stmt: Statement  # the elementwise statement run in the host's loops
    host: str  # the reduction update whose loops it runs in
    digits: dict  # host dim name -> the rider's expression (its own dims) for the same point
    linear: str  # the rider's flat offset below the shared loops, over its own dims
    dims: tuple[int, ...]  # the rider dims that offset covers, outermost first
    array: str  # the array both walk alike (what the notes name)


def find_riders(model: PolyModel, parts, rows: dict, opts, arrays_of) -> dict[str, Rider]:
    """{host update: Rider} for the parts `parts` ([(filter, band)]) run in sequence under
    shared loops (`rows`: statement -> its dims those loops run). `arrays_of(union map)`: the
    arrays a statement's accesses name."""
    names = [sorted(st.get_tuple_name() for st in sets_of(f)) for f, _ in parts]
    out: dict[str, Rider] = {}
    for k, part in enumerate(names):
        e = model.statement(part[0])
        if len(part) != 1 or e.kind != "compute" or not opts.math.get(e.name):
            continue
        r = _first_host(model, e, k, names, rows, opts, arrays_of, taken=out)
        if r is not None:
            out[r.host] = r
    return out


def _first_host(model, e: Statement, k: int, names, rows, opts, arrays_of, taken) -> Rider | None:
    """E (part k of `names`) riding in the first update of another part that it can, or None."""
    for j, other in enumerate(names):
        span = names[k + 1:j + 1] if j > k else names[j:k]  # the parts E moves past, the host's too
        if j == k or not _independent(e, [model.statement(n) for p in span for n in p], arrays_of):
            continue
        for u in map(model.statement, other):
            if u.kind == "update" and u.name not in taken and opts.math.get(u.name, frozenset()) & opts.math[e.name]:
                r = _ride(e, u, rows, opts)
                if r is not None:
                    return r
    return None


def _independent(e: Statement, others: list[Statement], arrays_of) -> bool:
    """No array that `e` writes is touched by `others`, and none they write is read by `e`."""
    ew, er = arrays_of(e.writes), arrays_of(e.reads)
    return all(not (ew & (arrays_of(s.reads) | arrays_of(s.writes))) and not (arrays_of(s.writes) & er)
               for s in others if s is not e)


def _ride(e: Statement, u: Statement, rows: dict, opts) -> Rider | None:
    """The rider `e` in `u`'s loops when both walk an argument array alike: `e` reads it as it
    writes its own output (same flat steps), `u` reads it in a mixed radix of its own dims
    (below the shared loops) covering the same flat range once, its stride-1 dim among them."""
    ext_e, ext_u = extents(e), extents(u)
    shared_e, shared_u = rows.get(e.name, ()), rows.get(u.name, ())
    if len(shared_e) != len(shared_u):
        return None
    writes = maps_of(e.writes)
    if len(writes) != 1 or (wshape := opts.shapes.get(writes[0].get_tuple_name(isl.dim_type.out))) is None:
        return None
    walk = flat_strides(e, writes[0], wshape, signed=True)
    if walk is None:
        return None
    own = [d for d in range(len(e.dims)) if d not in shared_e and ext_e[d] > 1]
    total = _radix([(walk[d], ext_e[d]) for d in own])
    if total is None or not own:
        return None
    best = stride1_dims(u)[0]
    for m in maps_of(e.reads):
        name, shape = m.get_tuple_name(isl.dim_type.out), opts.shapes.get(m.get_tuple_name(isl.dim_type.out))
        if shape is None or flat_strides(e, m, shape, signed=True) != walk:
            continue
        for mu in maps_of(u.reads):
            if mu.get_tuple_name(isl.dim_type.out) != name:
                continue
            su = flat_strides(u, mu, shape, signed=True)
            if su is None or any(su[a] != walk[b] for a, b in zip(shared_u, shared_e)):
                continue
            mine = [d for d in range(len(u.dims)) if d not in shared_u and ext_u[d] > 1]
            if su.get(best) != 1 or best not in mine or any(su[d] <= 0 for d in mine):
                continue
            if _radix([(su[d], ext_u[d]) for d in mine]) != total:
                continue
            linear = " + ".join(f"{walk[d]} * {e.dims[d]}" for d in own)
            digits = {u.dims[a]: e.dims[b] for a, b in zip(shared_u, shared_e)}
            for d in range(len(u.dims)):
                if d in mine:
                    q = f"floor(({linear}) / {su[d]})" if su[d] > 1 else f"({linear})"
                    digits[u.dims[d]] = q if su[d] * ext_u[d] == total else f"({q}) mod {ext_u[d]}"
                elif d not in shared_u:
                    v = u.domain.dim_min_val(d)
                    if not v.is_int() or u.domain.dim_max_val(d) != v:
                        break
                    digits[u.dims[d]] = str(v.to_python())
            else:
                return Rider(e, u.name, digits, linear, tuple(sorted(own, key=lambda d: -walk[d])), name)
    return None


def _radix(steps: list[tuple[int, int]]) -> int | None:
    """The size of the range that (stride, extent) pairs cover once each, when they form a
    mixed radix (sorted by stride: 1, then each the product of the extents below it)."""
    size = 1
    for stride, ext in sorted(steps):
        if stride != size:
            return None
        size *= ext
    return size


_NAME = re.compile(r"\b[A-Za-z_]\w*\b")


def ride(expr: str, rider: Rider) -> str:
    """The host's schedule expression `expr` as the rider's: each host dim replaced by the
    rider's expression for it (floor, mod and the like are not dims and stay)."""
    return _NAME.sub(lambda m: f"({rider.digits[m.group(0)]})" if m.group(0) in rider.digits else m.group(0), expr)


def linear_terms(leaf: isl.ScheduleNode, rider: Rider) -> tuple[tuple[int, int], ...] | None:
    """The rider's flat offset as sum(coefficient * schedule dim) at `leaf` (a node below every
    band the rider is in), as ((depth, coefficient), ...): code generation adds up the loop
    iterators with them. Dims fixed over the rider's instances (a loop of one value) must
    contribute nothing; None when the offset is not such a sum."""
    e = rider.stmt
    prefix = leaf.get_prefix_schedule_union_map().intersect_domain(isl.UnionSet.from_set(e.domain))
    if prefix.is_empty():
        return None
    sched = isl.Map.from_union_map(prefix)  # the rider's alone: its domain is one space
    offset = isl.Map(f"{{ {e.name}[{', '.join(e.dims)}] -> [({rider.linear})] }}", context=e.domain.get_ctx())
    rel = sched.reverse().apply_range(offset.intersect_domain(e.domain))
    if not rel.is_single_valued():
        return None
    pieces = []
    isl.PwMultiAff.from_map(rel).get_pw_aff(0).foreach_piece(lambda _s, aff: pieces.append(aff))
    if len(pieces) != 1 or pieces[0].dim(isl.dim_type.div) or not pieces[0].get_denominator_val().is_one():
        return None
    aff, rng = pieces[0], rel.domain()
    const = aff.get_constant_val().to_python()
    terms = []
    for k in range(aff.dim(isl.dim_type.in_)):
        c = aff.get_coefficient_val(isl.dim_type.in_, k).to_python()
        if not c:
            continue
        lo, hi = rng.dim_min_val(k), rng.dim_max_val(k)
        if lo == hi:  # a loop of one value: isl's AST writes its value, not an iterator
            const += c * lo.to_python()
        else:
            terms.append((k, c))
    return tuple(terms) if const == 0 and terms else None
