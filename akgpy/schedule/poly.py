"""The polyhedral schedule, first realisation path: row fusion decided by isl, realised with
s_tir primitives where isl's tree maps onto them exactly.

    model, deps  <- akgpy.poly (unscheduled PrimFunc)
    isl tree     <- compute_schedule_bounded (worker process, wall-clock bound)
    decision     <- the outermost band: if its first member is, for every statement, one of the
                    statement's own dims with coefficient 1 and no shift (a shared row index),
                    all statements run fused under one loop over that dim
    realisation  <- inline injective blocks; compute_at every remaining block under the last
                    block's outer loop; parallel outer loop; vectorised inner slices
    check        <- the schedule the realisation implements, { S[d] -> [row, block, d] }, is
                    checked against the dependences (IllegalSchedule, never code)

Anything else (a timeout, a skewed or shifted band, a block TVM cannot move) falls back to the
plain schedule, and the report says why. Opt-in: akgpy.fuse(g, schedule="poly").
"""
from __future__ import annotations

import islpy as isl
from tvm import s_tir

from ..errors import AkgpyError
from ..poly import IllegalSchedule, check_legal, compute_schedule_bounded, dependences, describe, extract
from ..poly.isl_util import union_map
from ..te.lower import Lowered
from .config import ScheduleConfig, default_config
from .plain import _parallel, inline_injective, plain_schedule, vectorize_innermost


def _row_dims(tree: isl.Schedule) -> dict[str, int] | str:
    """statement -> index of the dim that the outermost band's first member is, or a reason."""
    node = tree.get_root()
    while node.get_type() != isl.schedule_node_type.band:
        if node.n_children() != 1:
            return f"the tree splits into a {str(node.get_type()).split('.')[-1]} before any band"
        node = node.child(0)
    member = node.band_get_partial_schedule().get_at(0)
    rows: dict[str, int] = {}
    problems: list[str] = []

    def visit(pa: isl.PwAff) -> None:
        name = pa.get_domain_space().get_tuple_name(isl.dim_type.set)
        pieces = []
        pa.foreach_piece(lambda _set, aff: pieces.append(aff))
        if len(pieces) != 1:
            problems.append(f"{name}: piecewise")
            return
        aff = pieces[0]
        n = aff.dim(isl.dim_type.in_)
        coef = [aff.get_coefficient_val(isl.dim_type.in_, q).to_python() for q in range(n)]
        if aff.get_constant_val().to_python() != 0 or sorted(coef) != [0] * (n - 1) + [1]:
            problems.append(f"{name}: {aff}")
            return
        rows[name] = coef.index(1)

    member.foreach_pw_aff(visit)
    if problems:
        return "outer band member is not a plain row index for " + "; ".join(problems[:3])
    return rows


def _implemented_map(model, rows: dict[str, int]) -> isl.UnionMap:
    """The order the realisation runs: row first, then blocks in program order, then the
    statement's own iteration order (init before update at the same point)."""
    n = 1 + max(len(s.dims) for s in model.statements)
    maps = []
    for s in model.statements:
        r = s.dims[rows[s.name]]
        tie = "1" if s.kind == "update" else "0"
        vec = [r, str(s.position), *s.times, tie] + ["0"] * (n - len(s.times))
        maps.append(isl.Map(f"{{ {s.name}[{', '.join(s.dims)}] -> [{', '.join(vec)}] }}",
                            context=model.ctx).intersect_domain(s.domain))
    return union_map(model.ctx, maps)


def poly_schedule(low: Lowered, cfg: ScheduleConfig | None = None, *, timeout_s: float = 5.0):
    """(schedule, report): the report is the explain() text of this decision."""
    cfg = cfg or default_config()
    report = []

    def fallback(reason: str):
        report.insert(0, f"schedule path: plain (poly fell back: {reason})")
        return plain_schedule(low, cfg), "\n".join(report)

    try:
        model = extract(low.func, low.roles)
        deps = dependences(model)
        biggest = max(e for s in model.statements for e in _extents(s)) if model.statements else 1
        # bounding constant shifts by the largest extent keeps isl from searching for minutes
        # (layernorm.json: 10.5 s -> 0.18 s) and still lets it fuse
        tree = compute_schedule_bounded(model, deps, timeout_s=timeout_s,
                                        options={"schedule_max_constant_term": biggest})
    except TimeoutError:
        return fallback(f"isl scheduler gave no answer within {timeout_s} s")
    except AkgpyError as e:
        return fallback(f"polyhedral analysis failed: {e}")
    except Exception as e:  # the optional analysis must never stop a graph from compiling
        return fallback(f"polyhedral analysis failed: {type(e).__name__}: {e}")
    report.append(describe(model, deps, tree))
    rows = _row_dims(tree)
    if isinstance(rows, str):
        return fallback(rows)
    block_row = {}
    for s in model.statements:
        if block_row.setdefault(s.block, rows[s.name]) != rows[s.name]:
            return fallback(f"block {s.block}: its statements disagree on the row dim")
    if any(q != 0 for q in block_row.values()):
        return fallback("the row dim is not every block's outermost loop")
    implemented = _implemented_map(model, rows)
    try:
        check_legal(implemented, deps)
    except IllegalSchedule as e:
        return fallback(f"row fusion would be illegal: {e}")
    # compute_at recomputes whatever a row of the consumer needs: a value flowing from one row
    # to another (legal, e.g. a prefix) would be recomputed per row. Only row-local flow fuses.
    shift = deps.raw.apply_domain(implemented).apply_range(implemented).deltas()
    n = 1 + max(len(st.dims) for st in model.statements) + 3
    cross = isl.Set(f"{{ [{', '.join(f'd{q}' for q in range(n))}] : d0 != 0 }}", context=model.ctx)
    if not shift.intersect(isl.UnionSet.from_set(cross)).is_empty():
        return fallback("a value flows between different rows; fusing would recompute it per row")

    sch = s_tir.Schedule(low.func)
    left = inline_injective(sch, low)
    anchor = sch.get_sblock(left[-1])
    row_loop = sch.get_loops(anchor)[0]
    for name in reversed(left[:-1]):
        try:
            sch.compute_at(sch.get_sblock(name), row_loop, preserve_unit_loops=True)
        except s_tir.ScheduleError as e:
            return fallback(f"TVM cannot move block {name} under the row loop: "
                            f"{str(e).strip().splitlines()[-1][:160]}")
    _parallel(sch, row_loop, cfg)
    for name in left:  # inside the row: vectorise each spatial block's innermost loop
        b = sch.get_sblock(name)
        if len(sch.get_loops(b)) > 1 and all(int(iv.iter_type) == 0 for iv in sch.get(b).iter_vars):
            vectorize_innermost(sch, b, cfg)
    report.insert(0, f"schedule path: poly/s_tir: isl fused all {len(model.statements)} statements "
                     f"under one parallel loop over their row dim ({len(left)} blocks after inlining, "
                     f"computed at the row loop of {left[-1]}); implemented order checked against "
                     "the dependences")
    return sch, "\n".join(report)


def _extents(s) -> list[int]:
    out = []
    for q in range(s.domain.dim(isl.dim_type.set)):
        lo, hi = s.domain.dim_min_val(q).to_python(), s.domain.dim_max_val(q).to_python()
        out.append(int(hi - lo + 1))
    return out

