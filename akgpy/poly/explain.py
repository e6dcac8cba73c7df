"""Human-readable dumps of a model, its dependences and an isl schedule tree (for debugging
and for the dump folder); nothing here is parsed back."""
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
