"""Polyhedral analysis of a lowered (unscheduled) PrimFunc: model -> dependences -> isl
schedule -> legality check. akgpy/schedule/poly.py runs it for every poly kernel.

    low = akgpy.te.lower.lower(graph)
    model = extract(low.func, low.roles)
    deps = dependences(model)
    schedule = compute_schedule(model, deps)      # checked with check_legal
    print(describe(model, deps, schedule))
"""
from .checks import IllegalSchedule, check_legal, violations
from .deps import Deps, dependences
from .explain import describe, tree_lines
from .model import PolyModel, Statement, extract
from .scheduler import (DEFAULT_MAX_OPERATIONS, compute_schedule, compute_schedule_bounded, run_bounded,
                        schedule_text)

__all__ = ["IllegalSchedule", "check_legal", "violations", "Deps", "dependences", "describe", "tree_lines",
           "PolyModel", "Statement", "extract", "DEFAULT_MAX_OPERATIONS", "compute_schedule",
           "compute_schedule_bounded", "run_bounded", "schedule_text"]
