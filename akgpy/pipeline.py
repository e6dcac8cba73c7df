"""The compiler pipeline, one readable list of stages:

    load     frontend        composite JSON (or a GraphBuilder graph) -> Graph, validated
    lower    te.lower        Graph -> TE tensors -> one PrimFunc, unscheduled
    schedule schedule.poly   PrimFunc -> isl model, isl schedule, akgpy tree passes, isl AST -> TIR
                             (schedule.plain: the s_tir baseline, and the fallback)
    codegen  targets         scheduled IRModule -> the target's backend (targets/cpu: LLVM, the CPU)
    wrap     runtime         Executable -> Program (the calling convention)

A composite graph is one kernel: the framework already chose the grouping. With
AKGPY_DUMP=<dir>, each stage writes what it produced into <dir>/<kernel>/ (files are
numbered in stage order).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from . import config
from .errors import AkgpyError, CompileError
from .graph.ir import Graph
from .target import Target, resolve_target


def dump(kernel: str, stage: str, produce) -> None:
    """Write a stage's product when AKGPY_DUMP is set; `produce` is only called then."""
    root = config.DUMP.get()
    if not root:
        return
    d = Path(root) / kernel
    d.mkdir(parents=True, exist_ok=True)
    (d / stage).write_text(produce())


def compile_graph(graph: Any, target=None, *, schedule: str = "poly", config=None, cache: bool = True):
    """`target`: what akgpy.resolve_target accepts (None: this machine), resolved once here;
    `config`: an akgpy.ScheduleConfig (schedule choices); None: the target backend's defaults.
    `cache`: look the kernel up in the compile cache ($AKGPY_CACHE, docs/cache.md) first and
    store what was compiled; False compiles and stores nothing."""
    from .frontends.composite import load_composite

    if cache:
        # before anything that imports tvm: a cached kernel loads without it
        from .tune.cache import compile_cached
        if schedule not in ("plain", "poly"):
            raise CompileError(f"unknown schedule {schedule!r}; available: 'plain', 'poly'")
        g = graph if isinstance(graph, Graph) else load_composite(graph)
        return compile_cached(g, target, schedule=schedule, config=config,
                              compile=lambda t, cfg: compile_graph(g, t, schedule=schedule, config=cfg, cache=False))
    from .graph.algebra import exp_blocks, share_exp
    from .graph.collapse import collapse_dims
    from .runtime.program import Program
    from .targets import backend_for
    from .te.lower import ident

    if schedule not in ("plain", "poly"):
        raise CompileError(f"unknown schedule {schedule!r}; available: 'plain', 'poly'")
    target = resolve_target(target)
    backend = backend_for(target)
    g = graph if isinstance(graph, Graph) else load_composite(graph)
    dump(ident(g.name), "0_graph.txt", g.describe)
    cfg = config or backend.default_config(target)
    # the kernel runs on the collapsed graph; Program keeps g: it checks and returns g's shapes
    kg, graph_note = (cfg.collapse_dims and collapse_dims(g)) or (g, None)
    shared = share_exp(kg) if cfg.inexact_math else None
    # sharing an exp(-|x|) that a reduction reads pays only where its consumers ride in the
    # reduction's loops (graph/algebra.py): compiled that way first, kept only if one does
    bolder = share_exp(kg, reduced=True) if schedule == "poly" and cfg.share_math and cfg.inexact_math else None
    if bolder is not None and (shared is None or bolder[0].ops != shared[0].ops):
        kernel = _kernel(g, bolder[0], _joined(graph_note, bolder[1]), target, schedule, cfg,
                         riding=exp_blocks(bolder[0]))
        if kernel is not None:
            return Program(g, [kernel], target)
    if shared:
        kg, graph_note = shared[0], _joined(graph_note, shared[1])
    return Program(g, [_kernel(g, kg, graph_note, target, schedule, cfg)], target)


def _joined(note: str | None, more: str) -> str:
    return f"{note}\n{more}" if note else more


def _kernel(g: Graph, kg: Graph, graph_note: str | None, target: Target, schedule: str, cfg, riding=None):
    """The kernel of graph `g` compiled from `kg` (g collapsed and rewritten; `graph_note` says
    how). With `riding` (math block names): None, before code generation, unless a statement
    shares one of them with a reduction in whose loops it runs (poly/riders.py)."""
    from .runtime.program import Kernel
    from .schedule.poly import RIDERS_ATTR
    from .schedule.plain import plain_schedule
    from .targets import backend_for
    from .te.abi import stack_outputs
    from .te.lower import ident, lower

    if graph_note:
        dump(ident(g.name), "0_graph_rewritten.txt", lambda: f"{graph_note}\n{kg.describe()}")
    low = lower(kg, vector_math=schedule == "poly", output_align=cfg.output_align)
    dump(low.name, "1_te.py", low.func.script)

    backend = backend_for(target)
    report = None
    try:
        if schedule == "poly":
            from .schedule.poly import poly_schedule
            mod, report = poly_schedule(low, cfg, target, relower=lambda: lower(kg, vector_math=False, output_align=cfg.output_align),
                                        streams=backend.streams(low, cfg, target))
        else:
            mod = plain_schedule(low, cfg, target).mod
        (gv, func), = mod.functions_items()
        func, params = stack_outputs(func, low.params, low.output_stacks, low.index_dtype)
        mod, passed = mod.__class__({gv: func}), replace(low, func=func, params=params)
        mod, target_notes = backend.prepare(mod, passed, cfg, target)
        report = report and "\n".join([report, *target_notes])
    except AkgpyError:
        raise
    except Exception as e:  # a TVM failure while scheduling a valid graph is a compiler bug: name the graph
        raise CompileError(f"scheduling {g.name} failed: {type(e).__name__}: {e}") from None
    if riding is not None and not riding & set(str(mod["main"].attrs.get(RIDERS_ATTR, "")).split(",")):
        return None
    dump(low.name, "2_scheduled.py", mod.script)

    executable = _on_deep_stack(lambda: backend.build(mod, target), len(passed.params))
    kernel = Kernel(low.name, passed.params, executable, mod, low, report, graph_note)
    dump(low.name, "3_source.ll", lambda: kernel.source)
    dump(low.name, "4_explain.txt", kernel.explain)
    return kernel


# The packed-call wrapper TVM builds around a kernel nests a statement per argument, and TVM's
# passes and akgpy's TIR rewrites (targets/rewrite.py) recurse through that nesting: 1,000
# outputs went about 2 Python frames and a few KiB of C stack deep per argument, past Python's
# limit. Expression depth is bounded by the schedule (schedule/plain.py INLINE_MAX_DEPTH), so
# the build runs in a thread whose stack and recursion limit grow with the argument count.
FRAMES_PER_ARG, STACK_PER_FRAME = 4, 8 << 10


def _on_deep_stack(fn, n_args: int):
    import sys
    import threading

    from .schedule.plain import INLINE_MAX_DEPTH
    frames = sys.getrecursionlimit() + FRAMES_PER_ARG * (n_args + INLINE_MAX_DEPTH)
    result: list = []

    def run():
        try:
            result.append((True, fn()))
        except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
            result.append((False, e))
    old_limit, old_stack = sys.getrecursionlimit(), threading.stack_size()
    sys.setrecursionlimit(frames)
    threading.stack_size(max(old_stack, (frames * STACK_PER_FRAME + (1 << 20) - 1) & ~((1 << 20) - 1)))
    try:
        worker = threading.Thread(target=run, name="akgpy-build")
        worker.start()
    finally:
        threading.stack_size(old_stack)
    worker.join()
    sys.setrecursionlimit(old_limit)
    ok, value = result[0]
    if ok:
        return value
    raise value


# -- whole model graphs ------------------------------------------------------------------------

def compile_model(graph: Graph, target=None, *, schedule: str = "poly", config=None,
                  contraction: str = "generated", fuse: bool = True, limits=None):
    """Partition a model graph (akgpy/fusion) and compile each group; returns a ModelProgram.

    contraction: "generated" (akgpy's register-tiled MatMul/Conv2D kernels, epilogues fused)
    or "library" (numpy's BLAS for every float MatMul/Conv2D, epilogues in the next group).
    Measured on this 2-core host (docs/fusion.md): akgpy's kernels are within 10% of OpenBLAS
    on BERT's shapes, and each switch between BLAS's and TVM's spinning thread pools costs
    ~4 ms, so "generated" is the default. fuse=False compiles one kernel per op (the unfused
    baseline)."""
    from .fusion import Limits, partition
    from .graph.layout import sink_transposes
    from .runtime.library import fallback, library_contraction, supports_library
    from .runtime.model import ModelProgram, Step
    from .runtime.picture import to_dot
    from .te.lower import ident

    if contraction not in ("generated", "library"):
        raise CompileError(f"unknown contraction policy {contraction!r}; available: 'generated', 'library'")
    target = resolve_target(target)  # once, and refused here too: a model of library steps builds no kernel
    # NCHW models reach akgpy's NHWC convolutions through Transposes; moved and cancelled here,
    # once for every frontend (ONNX, torch.compile), a conv chain runs NHWC throughout
    graph = sink_transposes(graph)
    library = set()
    if contraction == "library":
        library = {i for i, op in enumerate(graph.ops)
                   if supports_library(op, [graph.tensors[t] for t in op.inputs], graph.tensors[op.outputs[0]])}
    part = partition(graph, library=library, limits=limits or Limits(), fuse=fuse)
    dump(ident(graph.name), "0_partition.txt", part.describe)
    dump(ident(graph.name), "0_partition.dot", lambda: to_dot(part))
    steps = []
    for grp in part.groups:
        if grp.kind == "kernel":
            prog = compile_graph(part.subgraph(grp), target, schedule=schedule, config=config)
            steps.append(Step(grp, _kernel_run(prog), prog))
        elif grp.kind == "view":
            shapes = [graph.tensors[t].shape for t in grp.outputs]
            steps.append(Step(grp, _view_run(shapes), note="reshape: a view of the same bytes"))
        elif grp.kind == "library":
            op = graph.ops[grp.ops[0]]
            steps.append(Step(grp, library_contraction(graph, op, grp.inputs), note="numpy BLAS"))
        else:
            op = graph.ops[grp.ops[0]]
            steps.append(Step(grp, fallback(graph, op, grp.inputs), note=f"{op.name} has no TE lowering: numpy"))
    return ModelProgram(part, steps, target)


def _kernel_run(prog):
    return lambda args: prog(*args)


def _view_run(shapes):
    return lambda args: tuple(args[0].reshape(s) for s in shapes)
