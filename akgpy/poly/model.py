"""The polyhedral model of an *unscheduled* lowered PrimFunc: one statement per block.

Why the unscheduled function: te.create_prim_func emits each block under its own perfect
loop nest whose loops map 1:1 onto the block's iter vars, with no predicates, so the
iter vars' dom ranges *are* the iteration domain, exactly. The model is over block iter vars
(not loop vars) so it stays meaningful whatever TVM schedule is later derived from it.

A reduction block (block.init is not None) becomes two statements: `<S>_init` over the
spatial iters only, and `<S>_update` over all iters, which reads the value it writes;
the flow analysis then sees the init -> update -> update chain that makes a reduction serial.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import islpy as isl
import tvm_ffi
from tvm import ir, s_tir, tirx

from ..errors import CompileError
from .isl_util import Namer, affine, new_context, union_map, union_set

SPATIAL, REDUCE = 0, 2  # tirx.IterVar.iter_type values that create_prim_func emits


@dataclass
class Statement:
    name: str  # isl tuple name: S_<block>, S_<block>_init, S_<block>_update
    block: str  # TIR block name it came from
    kind: str  # "compute" | "init" | "update"
    dims: list[str]  # isl dim names, in block iter var order
    domain: isl.Set
    reads: isl.UnionMap  # S[dims] -> Array[index]
    writes: isl.UnionMap
    reduction: bool
    role: str | None  # Lowered.roles[block], when given
    position: int  # index of the block in program order
    times: list[str]  # the point's place in its block's loop nest (see _order_map)


@dataclass
class PolyModel:
    ctx: isl.Context
    statements: list[Statement]
    domain: isl.UnionSet
    reads: isl.UnionMap
    writes: isl.UnionMap
    order: isl.UnionMap  # the original program order as a schedule map
    arrays: dict[str, str] = field(default_factory=dict)  # isl array name -> TIR buffer name

    def statement(self, name: str) -> Statement:
        for s in self.statements:
            if s.name == name:
                return s
        raise KeyError(name)

    def of_block(self, block: str) -> list[Statement]:
        return [s for s in self.statements if s.block == block]


def statement_count(func) -> int:
    """How many statements extract(func) makes: one per block, two per reduction block."""
    realizes: list = []
    tvm_ffi.structural_walk(func.body, [(s_tir.SBlockRealize, realizes.append)], order="pre")
    return sum(1 + (r.block.init is not None) for r in realizes if r.block.name_hint != "root")


def extract(func, roles: dict[str, str] | None = None, ctx: isl.Context | None = None) -> PolyModel:
    """PolyModel of `func` (akgpy.te.lower.lower(graph).func); `roles` is Lowered.roles."""
    ctx = ctx or new_context()
    names = Namer(ctx)
    arrays: dict[int, tuple[str, str]] = {}  # buffer handle -> (TIR name, isl name): keyed by identity
    realizes: list = []
    tvm_ffi.structural_walk(func.body, [(s_tir.SBlockRealize, realizes.append)], order="pre")
    blocks = [r for r in realizes if r.block.name_hint != "root"]
    depth = 2 + max((len(r.block.iter_vars) for r in blocks), default=0)
    stmts: list[Statement] = []
    for pos, realize in enumerate(blocks):
        stmts.extend(_block_statements(ctx, names, arrays, realize, pos, depth, roles or {}))
    order = union_map(ctx, [_order_map(ctx, s, depth) for s in stmts])
    return PolyModel(ctx, stmts, union_set(ctx, [s.domain for s in stmts]),
                     union_map(ctx, [s.reads for s in stmts]), union_map(ctx, [s.writes for s in stmts]),
                     order, {isl_name: buf for buf, isl_name in arrays.values()})


def _block_statements(ctx, names: Namer, arrays, realize, pos: int, depth: int, roles) -> list[Statement]:
    blk = realize.block
    bname = blk.name_hint
    if not (isinstance(realize.predicate, ir.prim.expr.IntImm) and int(realize.predicate.value) == 1):
        raise CompileError(f"block {bname!r} has a predicate: extract() expects an unscheduled PrimFunc")
    local = names.scope()
    dims, bounds, kinds, env = [], [], [], {}
    for iv in blk.iter_vars:
        lo, ext = iv.dom.min, iv.dom.extent
        if not (isinstance(lo, ir.prim.expr.IntImm) and isinstance(ext, ir.prim.expr.IntImm)):
            raise CompileError(f"block {bname!r}: iter var {iv.var.name} has a symbolic range "
                               "(the polyhedral model handles static shapes only)")
        if int(iv.iter_type) not in (SPATIAL, REDUCE):
            raise CompileError(f"block {bname!r}: iter var {iv.var.name} is neither spatial nor a reduction")
        d = local.fresh(iv.var.name[2:] if iv.var.name.startswith("v_") else iv.var.name, "d")
        dims.append(d)
        bounds.append((int(lo.value), int(ext.value)))
        kinds.append(int(iv.iter_type))
        env[iv.var.name] = d
    role = roles.get(bname)
    reduction = blk.init is not None
    if not reduction:
        name = names.fresh("S_" + bname, "S")
        return [_statement(ctx, names, arrays, name, bname, "compute", dims, bounds, env, blk.body, role, pos)]
    spatial = [q for q, k in enumerate(kinds) if k == SPATIAL]
    init_env = {v: d for v, d in env.items() if d in {dims[q] for q in spatial}}
    init = _statement(ctx, names, arrays, names.fresh(f"S_{bname}_init", "S"), bname, "init",
                      [dims[q] for q in spatial], [bounds[q] for q in spatial], init_env, blk.init, role, pos)
    update = _statement(ctx, names, arrays, names.fresh(f"S_{bname}_update", "S"), bname, "update",
                        dims, bounds, env, blk.body, role, pos)
    init.reduction = update.reduction = True
    # an init runs at the first iteration of the block's reduce loops, just before the update there
    it = iter(init.dims)
    init.times = [next(it) if k == SPATIAL else str(lo) for k, (lo, _) in zip(kinds, bounds)]
    return [init, update]


def _statement(ctx, names, arrays, name, bname, kind, dims, bounds, env, body, role, pos) -> Statement:
    cons = " and ".join(f"{lo} <= {d} < {lo + ext}" for d, (lo, ext) in zip(dims, bounds)) or "true"
    domain = isl.Set(f"{{ {name}[{', '.join(dims)}] : {cons} }}", context=ctx)
    loads, stores = [], []
    tvm_ffi.structural_walk(body, [(ir.TensorLoad, loads.append), (tirx.BufferStore, stores.append)])

    def access(buf, indices, read: bool) -> isl.Map:
        key = buf.__chandle__()
        if key not in arrays:
            arrays[key] = (buf.name, names.fresh(buf.name, "A"))
        outs, cons = [], []
        for q, i in enumerate(indices):
            o = f"o{q}"
            while o in dims:  # distinct from the statement's own dim names
                o += "_"
            outs.append(o)
            if read and _data_dependent(i):
                # a gather's table index is a loaded value: the read is taken as one of the whole
                # dim (an over-approximation, sound for the dependences; the index is clamped)
                cons.append(f"0 <= {o} < {int(buf.shape[q])}")
            else:
                cons.append(f"{o} = {affine(i, env, bname)}")
        text = f"{{ {name}[{', '.join(dims)}] -> {arrays[key][1]}[{', '.join(outs)}] : {' and '.join(cons) or 'true'} }}"
        return isl.Map(text, context=ctx).intersect_domain(domain)

    reads = union_map(ctx, [access(ld.source, ld.indices, True) for ld in loads])
    writes = union_map(ctx, [access(st.buffer, st.indices, False) for st in stores])
    return Statement(name, bname, kind, dims, domain, reads, writes, False, role, pos, list(dims))


def _data_dependent(index) -> bool:
    """Does an index expression read memory (a gather's index)?"""
    found: list = []
    tvm_ffi.structural_walk(index, [(ir.TensorLoad, found.append)])
    return bool(found)


def _order_map(ctx, s: Statement, depth: int) -> isl.Map:
    """S[dims] -> [position, times..., tie, 0...]: exactly the execution order of the TIR.

    An init's times hold its block's reduce iters at their lower bound, and its tie is 0
    where the update's is 1: init(i) runs right before update(i, k=0), after update(i-1, K-1).
    """
    tie = "1" if s.kind == "update" else "0"
    vec = [str(s.position), *s.times, tie] + ["0"] * (depth - 2 - len(s.times))
    return isl.Map(f"{{ {s.name}[{', '.join(s.dims)}] -> [{', '.join(vec)}] }}", context=ctx).intersect_domain(s.domain)
