"""The compiler pipeline, one readable list:

    frontend -> graph -> lower (TE -> PrimFunc) -> schedule -> codegen (LLVM) -> runtime Program

A composite graph is one kernel: the framework already chose the grouping. With
AKGPY_DUMP=<dir>, every stage writes what it produced into <dir>/<kernel>/.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from . import config
from .errors import AkgpyError, CompileError
from .graph.ir import Graph


def _dump(kernel: str, stage: str, text: str) -> None:
    root = config.DUMP.get()
    if not root:
        return
    d = Path(root) / kernel
    d.mkdir(parents=True, exist_ok=True)
    (d / stage).write_text(text)


def compile_graph(graph: Any, target: str = "llvm", *, schedule: str = "plain") -> "Program":
    from .frontends.composite import load_composite
    from .runtime.program import Kernel, Program
    from .schedule.plain import plain_schedule
    from .targets import llvm
    from .te.lower import lower
    import tvm

    g = graph if isinstance(graph, Graph) else load_composite(graph)
    if schedule != "plain":
        raise CompileError(f"unknown schedule {schedule!r}; available: 'plain'")
    _dump(g.name, "0_graph.txt", g.describe())
    low = lower(g)
    _dump(low.name, "1_te.py", low.func.script())
    try:
        sch = plain_schedule(low)
    except AkgpyError:
        raise
    except Exception as e:  # a TVM failure inside scheduling is a compiler bug: name the graph
        raise CompileError(f"scheduling {g.name} failed: {type(e).__name__}: {e}") from None
    tir = sch.mod.script()
    _dump(low.name, "2_scheduled.py", tir)
    ex = llvm.build(sch.mod, target)
    func = ex[low.func.attrs["global_symbol"]] if False else ex[_entry(sch.mod)]
    src = ex.mod.inspect_source("ll") if config.DUMP.get() else ""
    _dump(low.name, "3_source.ll", src)
    kernel = _LazySourceKernel(low.name, src, tir, low.params, func, ex)
    return Program(g, [kernel], target)


def _entry(mod) -> str:
    return [gv.name_hint for gv, _ in mod.functions_items()][0]


from .runtime.program import Kernel  # noqa: E402  (after the functions that import lazily)


class _LazySourceKernel(Kernel):
    """Fetching LLVM IR text costs as much as a compile; do it on first use only."""

    def __init__(self, name, source, tir, params, func, executable):
        super().__init__(name, source, tir, params, func)
        self._ex = executable

    @property
    def source(self) -> str:
        if not self._source:
            self._source = self._ex.mod.inspect_source("ll")
        return self._source

    @source.setter
    def source(self, v: str) -> None:
        self._source = v
