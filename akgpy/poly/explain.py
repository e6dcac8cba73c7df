"""Human-readable dumps of a model, its dependences and an isl schedule tree (for debugging
and for the dump folder), and the decisions made for each band in the words a tuned config's
overrides use; nothing here is parsed back."""
from __future__ import annotations

import islpy as isl

from .deps import Deps
from .isl_util import maps_of
from .model import PolyModel

_T = isl.schedule_node_type


def describe(model: PolyModel, deps: Deps | None = None, schedule: isl.Schedule | None = None) -> str:
    out = ["== statements (program order)"]
    for s in model.statements:
        role = f", role {s.role}" if s.role else ""
        out.append(f"{s.name}  [{s.kind}{role}, block {s.block}]")
        out.append(f"  domain  {s.domain}")
        out += [f"  write   {m}" for m in maps_of(s.writes)]
        out += [f"  read    {m}" for m in maps_of(s.reads)]
    if deps is not None:
        out.append("== dependences")
        for kind in ("raw", "war", "waw"):
            maps = maps_of(getattr(deps, kind))
            out.append(f"{kind.upper()} ({len(maps)} statement pair(s))")
            out += [f"  {m}" for m in maps]
    if schedule is not None:
        out.append("== schedule tree")
        out += tree_lines(schedule.get_root())
    return "\n".join(out)


def tree_lines(node: isl.ScheduleNode, depth: int = 0) -> list[str]:
    """One line per node: bands show each member's partial schedule and coincident flag."""
    pad, t = "  " * depth, node.get_type()
    lines = []
    if t == _T.band:
        n = node.band_n_member()
        lines.append(f"{pad}band ({n} member(s), permutable={bool(node.band_get_permutable())})")
        mupa = node.band_get_partial_schedule()
        for q in range(n):
            tag = "coincident" if node.band_member_get_coincident(q) else "sequential"
            lines.append(f"{pad}  [{q}] {tag}: {mupa.get_at(q)}")
    elif t == _T.filter:
        lines.append(f"{pad}filter {node.filter_get_filter()}")
    elif t == _T.domain:
        lines.append(f"{pad}domain {node.domain_get_domain()}")
    elif t == _T.mark:
        lines.append(f"{pad}mark {node.mark_get_id().get_name()}")
    elif t == _T.leaf:
        return []  # every filter ends in one; it adds nothing to read
    else:  # sequence, set, context, guard, extension, expansion
        lines.append(pad + str(t).split(".")[-1])
    for c in range(node.n_children()):
        lines += tree_lines(node.child(c), depth + 1)
    return lines


# who makes which decision, as explain() states it before the decisions
WHO_DECIDES = ("who decides: isl's scheduler chooses which statements fuse and the outer loops they share "
               "(its outermost band, constant shifts between statements); akgpy's passes choose how many of "
               "those loops stay shared (fusion depth), the loop order, tiling, coalescing and the parallel, "
               "vector and transpose marks; a band's override in ScheduleConfig.bands replaces a pass's choice "
               "and reads '(tuned)'")


def band_lines(bands: dict) -> list[str]:
    """One line per band (poly/tree.BandFacts): its statements and what was decided for it, in
    the terms of a BandChoice ("band [S0,S1]: tile 32x64 (tuned)")."""
    out = []
    for key, b in bands.items():
        kind, names = key.split(":", 1)
        tuned = set(b.tuned)

        def by(field: str) -> str:
            return " (tuned)" if field in tuned else ""
        parts = []
        if kind == "shared":
            parts.append(f"fusion depth {b.kept} of isl's {b.isl_members} member(s){by('fusion_depth')}")
        if b.dims:
            parts.append(f"order {','.join(b.dims[q] for q in b.order)}{by('order')}")
        if b.tile:
            parts.append(f"tile {'x'.join(map(str, b.tile))}{by('tile')}")
        parts.append((f"parallel member {b.parallel}" if b.parallel >= 0 else "serial") + by("parallel"))
        parts.append(("vector innermost" if b.vector else "scalar innermost") + by("vector"))
        out.append(f"band [{names}] ({kind}, {b.members} loop(s)): " + "; ".join(parts))
    return out
