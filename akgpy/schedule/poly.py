"""The polyhedral schedule: isl decides fusion, loop order, tiling and the CPU mapping; the loop
nest is generated from isl's AST.

    inline      injective blocks are inlined into their consumers first (as AKG does before
                its poly pass): they become expressions, not statements
    model       akgpy.poly.extract on what is left; dependences (RAW/WAR/WAW)
    isl         schedule_in_order: isl's search variants in order, each under an operation budget
    passes      akgpy.poly.tree.shape: fusion cut, stride-1 innermost, tiling, parallel and
                vector marks; the result is checked against the dependences
    codegen     isl AST -> TIR (schedule/isl_ast.py); TVM's LLVM backend compiles it

Contractions (MatMul/Conv2D) take the register-tiled template of plain.py ("poly/template").
When isl's fused search exhausts its operation budget, it searches without constant shifts,
then schedules each strongly connected component on its own and the passes fuse from there
(budgets, not time: the same graph gets the same kernel on any load); when that fails too, or
any step fails, the plain
schedule runs and explain() says why. A shaped tree that fails the legality check is replaced by
isl's own tree, also checked. Whatever tree is generated, every parallel or vector mark in it is
proved with isl to carry no dependence, or dropped (poly/checks.legal_marks).

Which path built the kernel is data as well as text: `schedule_path(func)` reads the
SchedulePath that the scheduled function carries as attributes.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from math import prod
from typing import Callable

import islpy as isl
from tvm import ir, s_tir

from ..errors import AkgpyError
from ..poly import IllegalSchedule, dependences, describe, extract
from ..poly.checks import legal_marks
from ..poly.explain import WHO_DECIDES, band_lines, tree_lines
from ..poly.isl_util import BudgetExhausted, maps_of, sets_of
from ..poly.model import statement_count
from ..poly.scheduler import GuardFired, ModelTooLarge, check_size, schedule_in_order
from ..poly.access import array_size, extents
from ..poly.tree import PARALLEL, VECTOR, TreeOptions, shape
from ..te.builders import LANE_PARTIALS
from ..te.lower import Lowered
from ..target import Target
from .config import ScheduleConfig
from .isl_ast import realize
from .kept import WIDE_MATH_INSTANCES, blocks_of, kept_blocks, math_sources, roundings
from .plain import inline_injective, plain_schedule, root_blocks, tvm_dtype_bits
from .prepass import chunk_column_sums, rfactor_rows, uses_vector_math, wide_partials
from .attrs import LATENCY_ATTR
from .transpose import copy_parts

# the math blocks that statements share with the reductions in whose loops they run
# (poly/riders.py), comma-separated: the pipeline keeps a graph rewrite that pays only then
# (graph/algebra.py)
RIDERS_ATTR = "akgpy.riders"
# which schedule built the function (SchedulePath's fields)
PATH_ATTR, FALLBACK_ATTR, ISL_TREE_ATTR, DROPPED_ATTR, GUARD_ATTR = (
    "akgpy.schedule_path", "akgpy.poly_fallback", "akgpy.isl_tree_as_is", "akgpy.dropped_marks",
    "akgpy.time_bound")


@dataclass(frozen=True)
class SchedulePath:
    """Which schedule built a kernel (explain()'s first line says the same in words)."""
    path: str  # "poly/isl-ast", "poly/template" (a contraction's template) or "plain"
    fallback: str | None = None  # why the poly schedule fell back to plain; None when it did not
    isl_tree_as_is: str | None = None  # why the tree passes' result was not used; None when it was
    dropped_marks: int = 0  # parallel/vector marks the legality check refused
    # why a wall-clock safety net (poly/scheduler: WALL_CLOCK_GUARD_S, MIXED_FULL_GUARD_S) decided; None when only counts
    # did, so the same graph, target and config give this kernel on any machine load
    guard: str | None = None

    @property
    def deterministic(self) -> bool:
        """True when no time bound shaped this kernel (a cache may store it)."""
        return self.guard is None


def schedule_path(func) -> SchedulePath:
    """The SchedulePath a scheduled PrimFunc carries; "plain" for schedule='plain'."""
    attrs = func.attrs or {}

    def get(key):
        return str(attrs[key]) if key in attrs else None
    return SchedulePath(get(PATH_ATTR) or "plain", get(FALLBACK_ATTR), get(ISL_TREE_ATTR),
                        int(attrs[DROPPED_ATTR]) if DROPPED_ATTR in attrs else 0, get(GUARD_ATTR))


def _with_path(mod: ir.IRModule, path: SchedulePath) -> ir.IRModule:
    func = mod["main"].with_attr(PATH_ATTR, path.path).with_attr(DROPPED_ATTR, path.dropped_marks)
    for key, value in ((FALLBACK_ATTR, path.fallback), (ISL_TREE_ATTR, path.isl_tree_as_is), (GUARD_ATTR, path.guard)):
        if value is not None:
            func = func.with_attr(key, value)
    return ir.IRModule({"main": func})


def poly_schedule(low: Lowered, cfg: ScheduleConfig, target: Target, *,
                  relower: Callable[[], Lowered] | None = None, decided: dict | None = None,
                  streams: bool = False):
    """(IRModule, report): the report is the explain() text of the decisions. `target` gives the
    hardware facts (vector width, caches, threads). `relower` gives the graph lowered for scalar
    loops (libm math), which the plain fallback runs faster. `streams`: the target's backend will
    write some outputs with streaming stores (Backend.streams), which the tree passes plan for. `decided`,
    when given, receives {band key: poly.tree.BandFacts} of the tree passes (what a tuner may
    override, akgpy.tune.space)."""
    report: list[str] = []

    def fallback(reason: str, guard: str | None = None):
        report.insert(0, f"schedule path: plain (poly fell back: {reason})")
        if guard:
            report.insert(1, f"not deterministic: {guard}")
        mod = plain_schedule(relower() if relower else low, cfg, target).mod
        return _with_path(mod, SchedulePath("plain", fallback=reason, guard=guard)), "\n".join(report)

    if any(r == "contract" for r in low.roles.values()):
        notes: list[str] = []
        mod = _with_path(plain_schedule(low, cfg, target, notes).mod, SchedulePath("poly/template"))
        return mod, "\n".join([
            "schedule path: poly/template: a contraction (MatMul/Conv2D) runs the register-tiled "
            "template (parallel tiles, epilogue blocks vectorised inside the tile loop)", *notes])
    t0 = time.perf_counter()
    try:
        func, inlined, rfactored, chunked, math, model, deps, searched = _isl_schedule(low, cfg, target, report)
        tree = searched.schedule
    except ModelTooLarge as e:
        return fallback(f"the model is too large for isl: {e}")
    except GuardFired as e:
        return fallback(f"isl scheduler stopped by the wall-clock guard: {e}", guard=str(e))
    except BudgetExhausted as e:
        return fallback(f"every isl search variant exhausted its operation budget (the last: {e})")
    except AkgpyError as e:
        return fallback(f"polyhedral analysis failed: {e}")
    except Exception as e:  # the analysis must never stop a valid graph from compiling
        return fallback(f"polyhedral analysis failed: {type(e).__name__}: {e}")
    t1 = time.perf_counter()
    opts = _tree_options(func, model, cfg, target, streams=streams, chunked=chunked, math=math)
    as_is = None
    bands: dict = {}
    try:
        shaped = shape(model, deps, tree, opts)
        final, notes, passes, coalesced = shaped.schedule, shaped.notes, "akgpy passes", shaped.coalesced
        bands = shaped.bands
        if decided is not None:
            decided.update(bands)
    except IllegalSchedule as e:
        as_is = f"passes rejected by the legality check ({e})"
    except Exception as e:
        as_is = f"passes failed ({type(e).__name__}: {e})"
    if as_is is not None:
        final, notes, passes, coalesced = tree, [f"{as_is}; isl's tree used as is"], "none", {}
    # the proof covers the marks as placed, whoever placed them
    final, dropped = legal_marks(final, deps, frozenset({PARALLEL, VECTOR}))
    notes = [*notes, *dropped]
    math_note = "float32 exp/log/tanh: vector math (polynomials)"
    if relower is not None:
        try:  # the schedule carries over only to the same statements: same domains and accesses
            scalar = _scalar_math_statements(func, model, final)
            if scalar is not None:
                libm_low = relower()
                libm_func, *_ = _prepass(libm_low, cfg, target)
                # block names alone are not enough: a row sum of vector math is cut into wider
                # partials (prepass.wide_partials) than its libm twin, and the tree then indexes
                # the narrower partials buffer out of bounds
                why = _model_differs(model, extract(libm_func, libm_low.roles, ctx=model.ctx))
                if why is None:
                    func = libm_func
                    math_note = (f"float32 exp/log/tanh: libm (no statement using them is vectorised: "
                                 f"{', '.join(scalar)}; polynomials pay off only in vector loops)")
                else:
                    math_note += f" (kept although no statement using it is vectorised: the libm lowering {why})"
        except Exception as e:  # keep the vector-math function: correct, maybe slower
            math_note += f" (libm check failed: {type(e).__name__}: {e})"
    try:  # `final` is checked: by shape(), or (isl's own tree) by schedule_in_order
        new_func, ast_text, codegen_notes = realize(func, model, final, coalesced)
    except Exception as e:
        return fallback(f"code generation from the isl AST failed: {type(e).__name__}: {e}")
    shares = sorted(set().union(*(c.shares for c in coalesced.values())))
    if shares:  # statements ride in a reduction's loops, sharing these math blocks
        new_func = new_func.with_attr(RIDERS_ATTR, ",".join(shares))
    if opts.rounding_chains:
        new_func = new_func.with_attr(LATENCY_ATTR, True)
        codegen_notes = [*codegen_notes, f"float16 rounding chains ({', '.join(sorted(opts.rounding_chains))}): "
                         "LLVM's instruction scheduler asked for parallelism over register pressure (targets/cpu/llvm.py)"]
    t2 = time.perf_counter()
    report[:0] = [f"schedule path: poly/isl-ast: loop nest generated from the isl AST of the final schedule "
                  f"({len(model.statements)} statements; isl {1e3 * (t1 - t0):.0f} ms, passes+codegen "
                  f"{1e3 * (t2 - t1):.0f} ms; final schedule checked against the dependences, its parallel "
                  f"and vector loops proved to carry none"
                  + (f", {len(dropped)} mark(s) dropped" if dropped else "") + ")"]
    report += ["inlined before scheduling (injective, recomputed in their consumers): "
               + (", ".join(inlined) or "none"),
               "row reductions split into vector partial sums (rfactor): " + (", ".join(rfactored) or "none"),
               "column sums cut into per-chunk partials beside their producer (rfactor): "
               + (", ".join(f"{r} of {p}" for r, p in chunked.items()) or "none"),
               math_note,
               "== decisions (" + passes + ")", WHO_DECIDES, *notes, *(f"codegen: {n}" for n in codegen_notes),
               "== bands (the decisions a config's bands may override)", *band_lines(bands),
               describe(model, deps, tree).replace("== schedule tree", "== isl schedule tree (before passes)"),
               "== schedule tree (after passes)", *tree_lines(final.get_root()),
               "== isl AST", ast_text.rstrip()]
    path = SchedulePath("poly/isl-ast", isl_tree_as_is=as_is, dropped_marks=len(dropped), guard=searched.guard)
    return _with_path(ir.IRModule({"main": new_func}), path), "\n".join(report)


def _isl_schedule(low: Lowered, cfg: ScheduleConfig, target: Target, report: list[str]):
    """The pre-passes, the model, its dependences and isl's tree (BudgetExhausted when every
    search variant runs out of operations, GuardFired past the wall-clock guard).

    isl's default search merges clusters of statements into shared bands, and a dependence
    that mixes dims (S[i, j] -> T[13i + j]: a Reshape between two computed statements, or a
    row cut into interleaved partials) can keep that search going for minutes on a graph of
    three statements. So the variants run in order, each under an operation budget (poly/
    scheduler.searches): the full search, then one without constant shifts (the search that
    ran out was looking for shifts these graphs do not need: bert's row sums cut into
    partials answer in 0.04-0.21 s with a fused schedule, `~18132029375129556574` 2.27 ->
    0.27 ms), then each strongly connected component on its own, which akgpy's passes fuse
    from there. The search without shifts does not go first: the NZ softmaxes
    (`~16754049541375441580`, `~17435194477088541004`) ran 1.09-1.14x slower without their
    shifts; nor does the serialized one: on yolo ~3153 the full search gave code 3x faster.
    Budgets count isl's own operations, so the variant depends on the model alone, not on
    the machine's load; explain() says which variant answered and which ran out. Where a
    dependence mixes dims, isl's count does not track the full search's time, so a rule over
    the model (poly/scheduler: a coefficient above 1 and shifts above 512) skips the full
    search; only the wall-clock safety net, when it fires, marks a kernel not deterministic."""
    func, inlined, rfactored, chunked, math = _prepass(low, cfg, target)
    check_size(statement_count(func))
    model = extract(func, low.roles)
    deps = dependences(model)
    biggest = max((e for s in model.statements for e in extents(s)), default=1)
    searched = schedule_in_order(model, deps, biggest=biggest, input_reuse=cfg.input_fusion)
    report.extend(searched.lines())
    return func, inlined, rfactored, chunked, math, model, deps, searched


def _lane_partials(blocks: dict) -> dict[str, int]:
    """Block name -> lanes of each interleaved partial sum (te/builders._lane_split)."""
    return {n: int(b.writes[0].source.shape[-1]) for n, b in blocks.items()
            if n.endswith(LANE_PARTIALS) and b.writes}


def _prepass(low: Lowered, cfg: ScheduleConfig, target: Target):
    """(func after inlining and row rfactor, inlined block names, rfactored block names, the
    chunked column sums: partials block -> producer block, {block: the inlined vector-math
    blocks it evaluates} (kept.math_sources; an rfactored block's partials evaluate its))."""
    before = [b.name_hint for b in root_blocks(low.func)]
    sch, left = inline_injective(low, keep=kept_blocks(low.func, low.roles, max(target.vector_bytes // 4, 1)))
    inlined = [n for n in before if n not in set(left)]
    math = math_sources(low.func, set(inlined)) if cfg.share_math else {}
    rfactored = rfactor_rows(sch, left, low.roles, cfg, target)
    chunked = chunk_column_sums(sch, left, low.roles, target)
    math.update({f"{n}_rf": math[n] for n in rfactored if n in math})
    return sch.mod["main"], inlined, rfactored, chunked, math


def _model_differs(model, other) -> str | None:
    """Why `other`'s statements are not `model`'s (names, domains, accesses); None when equal,
    so that a schedule of one is a schedule of the other."""
    mine = {s.name: s for s in model.statements}
    theirs = {s.name: s for s in other.statements}
    if list(mine) != list(theirs):
        return "has other statements"
    for name, s in mine.items():
        t = theirs[name]
        for what in ("domain", "reads", "writes"):
            if not getattr(s, what).is_equal(getattr(t, what)):
                return f"gives {name} another {'iteration domain' if what == 'domain' else what}"
    return None


def _scalar_math_statements(func, model, schedule: isl.Schedule) -> list[str] | None:
    """Statements computing vector math (te/fastmath.py's lets) when none of them sits under a
    vector mark; None when there are none, or some are vectorised."""
    blocks = blocks_of(func)
    math = {st.name for st in model.statements if st.block in blocks and uses_vector_math(blocks[st.block])}
    if not math:
        return None
    vectorised: set[str] = set()

    def visit(node):
        if node.get_type() == isl.schedule_node_type.mark and node.mark_get_id().get_name() == VECTOR:
            vectorised.update(st.get_tuple_name() for st in sets_of(node.get_domain()))
        for c in range(node.n_children()):
            visit(node.child(c))
    visit(schedule.get_root())
    return None if math & vectorised else sorted(math)


# an elementwise statement that rounds to a 16-bit float this often is a latency-bound chain of
# conversion pairs: 4 registers per op ran the bert GELU graphs 21-26% faster (A/B timed), while
# plain float32 math and reductions gained nothing or lost
CHAIN_ROUNDINGS = 6
# a column reduction's vector covers two cache lines of its input per row step, in at most this
# many registers of float64 partials. bert's [2048, 3072] float16 column sum (AVX2, 2 threads):
# 4 columns per step (one register; every step another page, one add chain) 5.7 ms, one line
# 1.1-2.5 ms, two lines 0.6-0.7 ms
LINE_BITS, COLUMN_REGISTERS = 1024, 16


def _tree_options(func, model, cfg: ScheduleConfig, target: Target, streams: bool = False, chunked: dict | None = None,
                  math: dict | None = None) -> TreeOptions:
    bits, shapes = {}, {}
    blocks = blocks_of(func)
    allocs = [buf for b in blocks.values() for buf in b.alloc_buffers]
    for buf in [p for p in func.params if hasattr(p, "dtype") and hasattr(p, "shape")] + allocs:
        bits[buf.name] = tvm_dtype_bits(buf.dtype)
    params = {p.name: tuple(int(e) for e in p.shape) for p in func.params if hasattr(p, "shape")}
    for isl_name, buf in model.arrays.items():
        if buf in params:
            shapes[isl_name] = params[buf]
    lanes, partials = {}, _lane_partials(blocks)
    bits_of = {a: bits.get(b, 32) for a, b in model.arrays.items()}  # isl array -> element bits

    def array_bits(m) -> int:
        return bits_of.get(m.get_tuple_name(isl.dim_type.out), 32)

    for s in model.statements:
        wide = max(map(array_bits, maps_of(s.writes)), default=32)
        math_rf = s.kind == "update" and s.block.endswith("_rf") and s.block in blocks and wide_partials(blocks[s.block])
        if math_rf:
            wide //= 2  # the partials of vector math: as many lanes as their float32 source
        lanes[s.name] = max(target.vector_bytes * 8 // max(wide, 8), 1)
        # interleaved partials wider than a register (te/builders._lane_split widens them so
        # that broadcast operands repeat their lane offsets) run as one vector of them all; so do
        # the partials of a vector-math row sum (prepass: up to math_registers float32 registers
        # a step), whose math then interleaves its registers' chains (a register-wide vector
        # and a loop over the registers ran them one after another: softplus row sums of 64, 240,
        # 256 went 54 -> 45, 57 -> 42, 57 -> 41 cycles per 16 elements, 2 threads)
        n = partials.get(s.block, 0) or (int(blocks[s.block].writes[0].source.shape[-1]) if math_rf else 0)
        if n > lanes[s.name] and n % lanes[s.name] == 0:
            lanes[s.name] = n
    column = {}
    for s in model.statements:
        big = max(maps_of(s.reads), key=array_size, default=None) if s.kind == "update" else None
        if big is not None:
            column[s.name] = max(1, min(COLUMN_REGISTERS, LINE_BITS // (lanes[s.name] * array_bits(big))))
    rounding = frozenset(s.name for s in model.statements
                         if s.block in blocks and roundings(blocks[s.block]) >= CHAIN_ROUNDINGS)
    registers, chains = {}, {}
    for s in model.statements:
        if s.kind != "compute" or s.block not in blocks:
            continue
        if s.name in rounding and cfg.chain_registers > 1:
            registers[s.name], chains[s.name] = cfg.chain_registers, "a latency-bound chain of float16 roundings"
        if cfg.math_registers > registers.get(s.name, 1) and uses_vector_math(blocks[s.block]) \
                and prod(extents(s)) >= WIDE_MATH_INSTANCES:
            registers[s.name], chains[s.name] = cfg.math_registers, "a latency-bound chain of vector math (exp/log/tanh)"
    # only reductions' updates ask (poly/columns.py); compute statements were walked above
    heavy = frozenset(s.name for s in model.statements if s.kind == "update" and s.block in blocks and (
        uses_vector_math(blocks[s.block]) or s.name in rounding))
    copies = frozenset(s.name for s in model.statements
                       if s.kind == "compute" and s.block in blocks and copy_parts(blocks[s.block]) is not None)
    narrow = {}  # copies of elements under 32 bits: their register transposes' lanes
    if cfg.narrow_transpose_bytes:
        for s in (s for s in model.statements if s.name in copies):
            elem = max(map(array_bits, maps_of(s.writes.union(s.reads))))
            if elem < 32:
                narrow[s.name] = min(lanes[s.name], max(cfg.narrow_transpose_bytes * 8 // elem, 1))
    return TreeOptions(lanes=lanes, registers=registers, chains=chains, column_registers=column, heavy=heavy,
                       rounding_chains=rounding, copies=copies,
                       transpose_lanes=narrow, tile=cfg.tile,
                       l1_bytes=target.l1_bytes, l2_bytes=target.l2_bytes, stride1_innermost=cfg.stride1_innermost,
                       fusion_depth=cfg.fusion_depth, parallel=cfg.parallel, min_parallel=cfg.min_parallel,
                       min_parallel_work=cfg.min_parallel_work, input_fusion=cfg.input_fusion, shapes=shapes,
                       array_bits=bits_of, streams=streams, chunked=dict(chunked or {}),
                       math={s.name: math[s.block] for s in model.statements if s.block in (math or {})},
                       bands={c.key: c for c in cfg.bands})


def _block_names(sch) -> list[str]:
    return [sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))]
