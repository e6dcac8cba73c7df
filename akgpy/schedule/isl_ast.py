"""isl AST -> TIR: the loop nest of a poly-scheduled kernel, generated from the final isl schedule.

isl's AST build turns the schedule tree into loops, guards and statement calls; each call
`S(e0, e1, ...)` becomes a TIR block realize whose iter values are the call's arguments, and
whose body is the statement's: the block body of a compute statement, the init of a reduction
(as its own block over the spatial iters) or the update (the block body without its init).
Loops under a `parallel` mark become parallel loops, loops under a `vector` mark vectorised
ones (isl proved them coincident, tree.py made their extent a constant). Intermediate buffers
stay allocated at the root block: TVM's buffer-allocation planning then moves each to the
innermost loop that encloses all its uses and compacts it to the region used there, which is
what makes a fused row's intermediates row-sized.
"""
from __future__ import annotations

import islpy as isl
import tvm_ffi
from tvm import s_tir, tirx
from tvm.sym import Analyzer

from ..errors import CompileError
from ..poly.model import PolyModel
from ..poly.tree import PARALLEL, VECTOR

_N, _E, _O = isl.ast_node_type, isl.ast_expr_type, isl.ast_expr_op_type


def build_ast(schedule: isl.Schedule) -> isl.AstNode:
    ctx = schedule.get_ctx()
    return isl.AstBuild.from_context(isl.Set("{ : }", context=ctx)).node_from_schedule(schedule)


def realize(func, model: PolyModel, schedule: isl.Schedule,
            coalesced: dict | None = None) -> tuple[tirx.PrimFunc, str]:
    """(the PrimFunc whose body is the isl AST of `schedule`, the AST as C text for explain).
    `coalesced`: tree.Coalesced records; those statements get their coalesced dims from the
    loop iterators (isl names the iterator of schedule depth d `c<d>`)."""
    ast = build_ast(schedule)
    gen = _Gen(func, model, coalesced or {})
    body = gen.node(ast)
    root = gen.root
    new_root = s_tir.SBlock([], [], [], "root", body, None, list(root.alloc_buffers), list(root.match_buffers))
    return func.with_body(s_tir.SBlockRealize([], True, new_root)), ast.to_C_str()


class _Gen:
    def __init__(self, func, model: PolyModel, coalesced: dict):
        self.coalesced = coalesced
        self.analyzer = Analyzer()  # one per kernel: it keeps state, compiles may run on threads
        realizes = []
        tvm_ffi.structural_walk(func.body, [(s_tir.SBlockRealize, realizes.append)], order="pre")
        self.root = next(r.block for r in realizes if r.block.name_hint == "root")
        blocks = {r.block.name_hint: r.block for r in realizes if r.block.name_hint != "root"}
        self.stmts = {}
        for s in model.statements:
            self.stmts[s.name] = _statement_block(blocks[s.block], s.kind)
        dtypes = {str(iv.var.ty) for b in blocks.values() for iv in b.iter_vars}
        self.index = "int64" if "int64" in dtypes else "int32"
        self.vars: dict[str, tirx.Var] = {}
        self.kind: tirx.ForKind | None = None

    # -- statements ---------------------------------------------------------------------------
    def node(self, nd):
        t = nd.get_type()
        if t == _N.block:
            ch = nd.block_get_children()
            parts = [self.node(ch.get_at(q)) for q in range(ch.n_ast_node())]
            return parts[0] if len(parts) == 1 else tirx.SeqStmt(parts)
        if t == _N.for_:
            return self.loop(nd)
        if t == _N.if_:
            then = self.node(nd.if_get_then_node())
            other = self.node(nd.if_get_else_node()) if nd.if_has_else_node() else None
            return tirx.IfThenElse(self.expr(nd.if_get_cond()), then, other)
        if t == _N.mark:
            name = nd.mark_get_id().get_name()
            outer, self.kind = self.kind, {PARALLEL: tirx.ForKind.PARALLEL,
                                          VECTOR: tirx.ForKind.VECTORIZED}.get(name)
            try:
                return self.node(nd.mark_get_node())
            finally:
                self.kind = outer
        if t == _N.user:
            return self.call(nd.user_get_expr())
        raise CompileError(f"isl AST node of type {t} is not supported")

    def loop(self, nd):
        it = nd.for_get_iterator().get_id().get_name()
        inc = nd.for_get_inc()
        if inc.get_type() != _E.int or inc.get_val().to_python() != 1:
            raise CompileError(f"isl AST loop {it} has a stride ({inc.to_C_str()}); not supported")
        var = tirx.Var(it, self.index)
        self.vars[it] = var
        lo = self.expr(nd.for_get_init())
        cond = nd.for_get_cond()
        op = cond.get_op_type() if cond.get_type() == _E.op else None
        if op not in (_O.le, _O.lt) or cond.get_op_arg(0).get_type() != _E.id \
                or cond.get_op_arg(0).get_id().get_name() != it:
            raise CompileError(f"isl AST loop {it}: condition {cond.to_C_str()} is not an upper bound")
        hi = self.expr(cond.get_op_arg(1))
        extent = hi - lo + (1 if op == _O.le else 0)
        kind, self.kind = self.kind, None  # a mark applies to the loop right below it only
        try:
            body = self.node(nd.for_get_body())
        finally:
            self.kind = kind
        extent = self.analyzer.simplify(extent)  # vector loops need a constant extent
        if kind == tirx.ForKind.VECTORIZED and not isinstance(extent, tirx.IntImm):
            kind = tirx.ForKind.SERIAL
        return tirx.For(var, lo, extent, kind or tirx.ForKind.SERIAL, body)

    def call(self, e):
        name = e.get_op_arg(0).get_id().get_name()
        block = self.stmts[name]
        args = [self.expr(e.get_op_arg(q)) for q in range(1, e.get_op_n_arg())]
        if name in self.coalesced:
            args = self.uncoalesce(self.coalesced[name], args)
        values = [a if str(a.ty) == str(iv.var.ty) else tirx.Cast(str(iv.var.ty), a)
                  for a, iv in zip(args, block.iter_vars)]
        return s_tir.SBlockRealize(values, True, block)

    def uncoalesce(self, c, args: list) -> list:
        """dims = digits of the linear iterator L = c<d> * lanes + c<d+1> in the mixed radix of
        their extents: floor(L / 9), floor(L / 3) mod 3, L mod 3 fold back into a flat address
        TVM can vectorise. Unchanged (still correct) when a loop was degenerate and has no
        iterator."""
        names = [f"c{c.depth}"] + ([f"c{c.depth + 1}"] if c.lanes > 1 else [])
        if not all(n in self.vars for n in names):
            return args
        lin = self.vars[names[0]]
        if c.lanes > 1:
            lin = lin * tirx.IntImm(self.index, c.lanes) + self.vars[names[1]]
        out = list(args)
        for k, (d, ext) in enumerate(zip(c.dims, c.extents)):
            stride = 1
            for e in c.extents[k + 1:]:
                stride *= e
            v = tirx.FloorDiv(lin, tirx.IntImm(self.index, stride)) if stride > 1 else lin
            out[d] = v if k == 0 else tirx.FloorMod(v, tirx.IntImm(self.index, ext))
        return out

    # -- expressions --------------------------------------------------------------------------
    def expr(self, e):
        t = e.get_type()
        if t == _E.int:
            return tirx.IntImm(self.index, int(e.get_val().to_python()))
        if t == _E.id:
            name = e.get_id().get_name()
            if name not in self.vars:
                raise CompileError(f"isl AST uses {name!r} outside its loop")
            return self.vars[name]
        op = e.get_op_type()
        a = [self.expr(e.get_op_arg(q)) for q in range(e.get_op_n_arg())]
        if op in _BIN:
            return _BIN[op](*a)
        if op == _O.minus:
            return tirx.Sub(tirx.IntImm(self.index, 0), a[0])
        if op in (_O.select, _O.cond):
            return tirx.Select(a[0], a[1], a[2])
        raise CompileError(f"isl AST expression {e.to_C_str()} uses an unsupported operation {op}")


_BIN = {
    _O.add: tirx.Add, _O.sub: tirx.Sub, _O.mul: tirx.Mul,
    # isl's div/pdiv_q/fdiv_q are all floor division where they appear (exact or non-negative
    # operands, or floor by definition); pdiv_r/zdiv_r are used as "== 0" tests and remainders
    _O.div: tirx.FloorDiv, _O.fdiv_q: tirx.FloorDiv, _O.pdiv_q: tirx.FloorDiv,
    _O.pdiv_r: tirx.FloorMod, _O.zdiv_r: tirx.FloorMod,
    _O.min: tirx.Min, _O.max: tirx.Max,
    _O.eq: tirx.EQ, _O.le: tirx.LE, _O.lt: tirx.LT, _O.ge: tirx.GE, _O.gt: tirx.GT,
    _O.and_: tirx.And, _O.and_then: tirx.And, _O.or_: tirx.Or, _O.or_else: tirx.Or,
}


def _statement_block(blk, kind: str):
    """The block a statement instance realises: compute as is; a reduction's init as a block over
    the spatial iters; its update as the body alone (it reads what it writes)."""
    if kind == "compute":
        return blk
    if kind == "init":
        spatial = [iv for iv in blk.iter_vars if int(iv.iter_type) == 0]
        return s_tir.SBlock(spatial, [], list(blk.writes), blk.name_hint + "_init", blk.init)
    reads = list(blk.reads) + [w for w in blk.writes]
    return s_tir.SBlock(list(blk.iter_vars), reads, list(blk.writes), blk.name_hint + "_update", blk.body)
