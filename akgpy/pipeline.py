"""The compiler pipeline, one readable list of stages:

    load     frontend        composite JSON (or a GraphBuilder graph) -> Graph, validated
    lower    te.lower        Graph -> TE tensors -> one PrimFunc, unscheduled
    schedule schedule.poly   PrimFunc -> isl model, isl schedule, akgpy tree passes, isl AST -> TIR
                             (schedule.plain: the s_tir baseline, and the fallback)
    codegen  targets.llvm    scheduled IRModule -> machine code for the host CPU
    wrap     runtime         Executable -> Program (the calling convention)

A composite graph is one kernel: the framework already chose the grouping. With
AKGPY_DUMP=<dir>, each stage writes what it produced into <dir>/<kernel>/ (files are
numbered in stage order).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from . import config
from .errors import AkgpyError, CompileError
from .graph.ir import Graph


def dump(kernel: str, stage: str, produce) -> None:
    """Write a stage's product when AKGPY_DUMP is set; `produce` is only called then."""
    root = config.DUMP.get()
    if not root:
        return
    d = Path(root) / kernel
    d.mkdir(parents=True, exist_ok=True)
    (d / stage).write_text(produce())


def compile_graph(graph: Any, target: str = "llvm", *, schedule: str = "poly", config=None):
    """`config`: an akgpy.ScheduleConfig (schedule knobs); None picks the target's defaults."""
    from .frontends.composite import load_composite
    from .runtime.program import Kernel, Program
    from .schedule.plain import plain_schedule
    from .targets import llvm
    from .te.lower import ident, lower

    if schedule not in ("plain", "poly"):
        raise CompileError(f"unknown schedule {schedule!r}; available: 'plain', 'poly'")
    g = graph if isinstance(graph, Graph) else load_composite(graph)
    dump(ident(g.name), "0_graph.txt", g.describe)

    low = lower(g, vector_math=schedule == "poly")
    dump(low.name, "1_te.py", low.func.script)

    report = None
    try:
        if schedule == "poly":
            from .schedule.poly import poly_schedule
            mod, report = poly_schedule(low, config, relower=lambda: lower(g, vector_math=False))
        else:
            mod = plain_schedule(low, config).mod
    except AkgpyError:
        raise
    except Exception as e:  # a TVM failure while scheduling a valid graph is a compiler bug: name the graph
        raise CompileError(f"scheduling {g.name} failed: {type(e).__name__}: {e}") from None
    dump(low.name, "2_scheduled.py", mod.script)

    executable = llvm.build(mod, target)
    kernel = Kernel(low.name, low.params, executable, mod, low, report)
    dump(low.name, "3_source.ll", lambda: kernel.source)
    dump(low.name, "4_explain.txt", kernel.explain)
    return Program(g, [kernel], target)
