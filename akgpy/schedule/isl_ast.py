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

from math import prod

import islpy as isl
import tvm_ffi
from tvm import ir, s_tir, tirx
from tvm.sym import Analyzer

from ..errors import CompileError
from ..poly.isl_util import affine
from ..poly.model import PolyModel
from ..poly.tree import PARALLEL, TRANSPOSE, VECTOR
from ..te.index import digit_groups
from .transpose import register_transpose

_N, _E, _O = isl.ast_node_type, isl.ast_expr_type, isl.ast_expr_op_type


def build_ast(schedule: isl.Schedule) -> isl.AstNode:
    ctx = schedule.get_ctx()
    return isl.AstBuild.from_context(isl.Set("{ : }", context=ctx)).node_from_schedule(schedule)


def realize(func, model: PolyModel, schedule: isl.Schedule,
            coalesced: dict | None = None) -> tuple[tirx.PrimFunc, str, list[str]]:
    """(the PrimFunc whose body is the isl AST of `schedule`, the AST as C text for explain, notes
    on where code generation departed from the tree's plan).
    `coalesced`: tree.Coalesced records; those statements get their coalesced dims from the
    loop iterators (isl names the iterator of schedule depth d `c<d>`)."""
    ast = build_ast(schedule)
    gen = _Gen(func, model, coalesced or {})
    body = gen.node(ast)
    if gen.views:
        body = tirx.SeqStmt([tirx.DeclBuffer(v, data=src.data) for v, src in gen.views.values()] + [body])
    root = gen.root
    new_root = s_tir.SBlock([], [], [], "root", body, None, list(root.alloc_buffers), list(root.match_buffers))
    return func.with_body(s_tir.SBlockRealize([], True, new_root)), ast.to_C_str(), gen.notes


class _Gen:
    def __init__(self, func, model: PolyModel, coalesced: dict):
        self.coalesced = coalesced
        self.model = model
        self.analyzer = Analyzer()  # one per kernel: it keeps state, compiles may run on threads
        realizes = []
        tvm_ffi.structural_walk(func.body, [(s_tir.SBlockRealize, realizes.append)], order="pre")
        self.root = next(r.block for r in realizes if r.block.name_hint == "root")
        self.intermediates = {b.name for b in self.root.alloc_buffers}
        blocks = {r.block.name_hint: r.block for r in realizes if r.block.name_hint != "root"}
        self.stmts = {}
        for s in model.statements:
            self.stmts[s.name] = _statement_block(blocks[s.block], s.kind)
        dtypes = {str(iv.var.ty) for b in blocks.values() for iv in b.iter_vars}
        self.index = "int64" if "int64" in dtypes else "int32"
        self.vars: dict[str, tirx.Var] = {}
        self.kind: tuple | None = None  # (ForKind of the enclosing mark, its loop's iterator once seen)
        self.params = list(func.params)
        self.views: dict[tuple[str, int], tuple] = {}  # (param, position) -> (view, param)
        self.flat: dict = {}  # statement -> its block with kernel arguments read through views
        self.notes: list[str] = []  # what code generation did differently from what the tree said

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
            if name == TRANSPOSE:
                loops = self.node(nd.mark_get_node())
                got = register_transpose(loops, self.flat_view, self.analyzer)
                if got is None:  # the tree promised this shape: say so, keep the (correct) loops
                    self.notes.append("transpose: a tile's point loops are not a transposing copy; "
                                      "generated as loops")
                return got or loops
            kind = {PARALLEL: tirx.ForKind.PARALLEL, VECTOR: tirx.ForKind.VECTORIZED}.get(name)
            outer, self.kind = self.kind, (kind, None) if kind is not None else None
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
        shadowed = self.vars.get(it)
        lo = self.expr(nd.for_get_init())
        cond = nd.for_get_cond()
        op = cond.get_op_type() if cond.get_type() == _E.op else None
        if op not in (_O.le, _O.lt) or cond.get_op_arg(0).get_type() != _E.id \
                or cond.get_op_arg(0).get_id().get_name() != it:
            raise CompileError(f"isl AST loop {it}: condition {cond.to_C_str()} is not an upper bound")
        hi = self.expr(cond.get_op_arg(1))
        extent = hi - lo + (1 if op == _O.le else 0)
        # a mark applies to the loop right below it only; when isl isolated full blocks of the
        # marked member, the mark's child is a block: the first loop is the marked member's, and
        # a later loop is only if it has the same iterator (the remainder's vector loop), never
        # one of the remainder's inner loops (its marked member has one iteration and no loop)
        mark, self.kind = self.kind, None
        kind = mark[0] if mark is not None and mark[1] in (None, it) else None
        self.vars[it] = var  # only inside the loop: isl reuses c<d> in later loops, or elides them
        try:
            body = self.node(nd.for_get_body())
        finally:
            self.kind = (mark[0], mark[1] or it) if mark is not None else None
            if shadowed is None:
                del self.vars[it]
            else:
                self.vars[it] = shadowed
        extent = self.analyzer.simplify(extent)  # vector loops need a constant extent
        if kind == tirx.ForKind.VECTORIZED and not isinstance(extent, tirx.IntImm):
            kind = tirx.ForKind.SERIAL
        if kind == tirx.ForKind.VECTORIZED:
            return self.vector_loops(var, lo, extent, body)
        return tirx.For(var, lo, extent, kind or tirx.ForKind.SERIAL, body)

    def vector_loops(self, var, lo, extent, body):
        """The vector loop, distributed where a statement reads an intermediate that an earlier
        one in the same loop writes. TVM would allocate that intermediate inside the loop (the
        innermost one enclosing its uses), one element, and its vectoriser then gives every lane
        the same element (x [1, 1, 4] -> exp(-|x|) -> transpose: 3 of 4 values wrong). A vector
        loop carries no dependence (isl proved it coincident), so every producer instance may
        run before every consumer's; the intermediate then lives outside, a vector long."""
        segments, written = [[]], set()
        for st in (list(body.seq) if isinstance(body, tirx.SeqStmt) else [body]):
            reads, writes = _accessed(st, self.intermediates)
            if reads & written:
                segments.append([])
                written = set()
            segments[-1].append(st)
            written |= writes
        if len(segments) > 1:
            self.notes.append(f"vector: loop {var.name} distributed into {len(segments)} loops "
                              "(an intermediate produced and consumed in it)")
        loops = []
        for i, seg in enumerate(segments):
            v, stmt = var, (seg[0] if len(seg) == 1 else tirx.SeqStmt(seg))
            if i:  # every loop binds its own iterator
                v = tirx.Var(var.name, var.ty)
                stmt = tvm_ffi.structural_mutate(stmt, [(tirx.Var, lambda x, mut: v if x.same_as(var) else x)])
            loops.append(tirx.For(v, lo, extent, tirx.ForKind.VECTORIZED, stmt))
        return loops[0] if len(loops) == 1 else tirx.SeqStmt(loops)

    def call(self, e):
        name = e.get_op_arg(0).get_id().get_name()
        block = self.stmts[name]
        args = [self.expr(e.get_op_arg(q)) for q in range(1, e.get_op_n_arg())]
        c = self.coalesced.get(name)
        if c is None:
            block = self.rewritten(name, lambda: self.folded_block(name, block))
        elif (lin := self.linear(c)) is not None:  # else a degenerate loop: the dims as isl gives them
            args = self.uncoalesce(c, args, lin)
            flat = self.rewritten(name, lambda: self.flat_block(block, c))
            if flat is not block:
                block, args = flat, args + [lin]
        values = [a if str(a.ty) == str(iv.var.ty) else tirx.Cast(str(iv.var.ty), a)
                  for a, iv in zip(args, block.iter_vars)]
        return s_tir.SBlockRealize(values, True, block)

    def rewritten(self, name: str, make):
        """A statement's rewritten block, made once: isl's AST may call the statement in many places."""
        if name not in self.flat:
            self.flat[name] = make()
        return self.flat[name]

    def linear(self, c):
        """The coalesced linear iterator L = c<d> * lanes + c<d+1> (or the sum of c.terms);
        None when a loop was degenerate and has no iterator."""
        if c.terms:
            if not all(f"c{k}" in self.vars for k, _ in c.terms):
                return None
            lin = None
            for k, coef in c.terms:
                t = self.vars[f"c{k}"] if coef == 1 else self.vars[f"c{k}"] * tirx.IntImm(self.index, coef)
                lin = t if lin is None else lin + t
            return lin
        names = [f"c{c.depth}"] + ([f"c{c.depth + 1}"] if c.lanes > 1 else [])
        if not all(n in self.vars for n in names):
            return None
        lin = self.vars[names[0]]
        if c.lanes > 1:
            lin = lin * tirx.IntImm(self.index, c.lanes) + self.vars[names[1]]
        return lin

    def flat_block(self, block, c):
        """The statement's block with one more iter var, L, and every access to a kernel
        argument that uses the coalesced dims only in its trailing indices (unit dims between
        them allowed) rewritten to a view of that argument with those indices flattened,
        indexed by L's digits as the operand stores them (`te/index.digit_groups`): L for
        the written array, L // 2 for a [..., 3, 1] operand under [..., 3, 2], 2 * (L // 6) +
        L % 2 for a [1, 52, 52, 1, 2] grid. TVM cannot fold the mixed-radix digits of L back
        into a flat address once L is split into vector lanes that do not divide the inner
        extents (52*3*2 by 16): every lane became a scalar load. Through the view the written
        array and same-shaped operands are one vector load, and a broadcast operand's lanes
        differ by constants when the vector width is a multiple of its digits' period (the
        tree passes choose it so), which `targets/vector_loads` turns into a load and a shuffle."""
        dvars = [block.iter_vars[d].var for d in c.dims]
        vlin = tirx.Var("v_lin", self.index)
        total = prod(c.extents)

        def flat_access(buf, indices):
            shape = [int(e.value) if hasattr(e, "value") else None for e in buf.ty.shape]
            idx = list(indices)
            pos = next((q for q, i in enumerate(idx) if _uses(i, dvars)), None)
            if pos is None:
                return None
            terms = []
            for q in range(pos, len(idx)):
                k = next((k for k, v in enumerate(dvars) if idx[q].same_as(v)), None)
                if k is not None and shape[q] == c.extents[k]:
                    terms.append((k, prod(shape[q + 1:])))
                elif not (isinstance(idx[q], tirx.IntImm) and int(idx[q].value) == 0 and shape[q] == 1):
                    return None
            flat = None
            for size, span, w in digit_groups(terms, c.extents):
                d = vlin if size == 1 else tirx.FloorDiv(vlin, tirx.IntImm(self.index, size))
                if size * span != total:
                    d = tirx.FloorMod(d, tirx.IntImm(self.index, span))
                d = d if w == 1 else d * tirx.IntImm(self.index, w)
                flat = d if flat is None else flat + d
            if c.terms:
                # a rider (poly/riders.py) reads what its host reads through the host's buffers:
                # the 1-D view its folded reads use, a 1-D argument itself. Each other view is
                # another pointer in the kernel, and LLVM would not see the two loads of an
                # element as one (nor then the math on them)
                for q in range(pos):
                    flat = flat + idx[q] * tirx.IntImm(self.index, prod(shape[q + 1:]))
                return (buf if len(shape) == 1 else self.flat_view(buf)), [flat]
            return self.view(buf, pos, prod(shape[pos:])), [*idx[:pos], flat]
        return self.rewrite(block, flat_access, [tirx.IterVar(ir.Range(0, total), vlin, 0)])

    def folded_block(self, name: str, block):
        """The statement's block with every kernel-argument access whose indices divide or take
        remainders (the digits of a flat offset: a Reshape, an interleaved sum) rewritten as
        a 1-D view indexed by the offset, when isl proves the offset affine in the block's
        iters: (8k+l) // 312, (8k+l) % 312 // 6, (4k + l//2) % 3, l % 2 of a [.., 52, 3, 2]
        array is the address 8k + l + ..., one vector load in a loop over l, where TVM emits
        a scalar load per lane."""
        st = self.model.statement(name)
        env = {iv.var.name: d for iv, d in zip(block.iter_vars, st.dims)}
        ty = str(block.iter_vars[0].var.ty) if block.iter_vars else self.index

        def fold(buf, indices):
            if len(indices) < 2 or not _divides(indices) or any(_loads(i) for i in indices):
                return None  # a gather's loaded index is no offset isl can prove affine
            shape = [int(e.value) for e in buf.ty.shape]
            terms, stride = [], 1
            for i, e in zip(reversed(list(indices)), reversed(shape)):
                terms.append(f"{stride} * ({affine(i, env, block.name_hint)})")
                stride *= e
            try:
                offset = isl.Map(f"{{ {st.name}[{', '.join(st.dims)}] -> [{' + '.join(terms)}] }}",
                                 context=self.model.ctx).intersect_domain(st.domain)
            except (CompileError, isl.Error):
                return None
            pa = isl.PwMultiAff.from_map(offset).get_pw_aff(0)
            pieces = []
            pa.foreach_piece(lambda _s, aff: pieces.append(aff))
            if len(pieces) != 1 or not pieces[0].get_denominator_val().is_one():
                return None
            aff = pieces[0]
            if aff.dim(isl.dim_type.div):
                return self.view(buf, 0, stride), [self.quasi_affine(pa, block)]
            flat = tirx.IntImm(ty, int(aff.get_constant_val().to_python()))
            for q, iv in enumerate(block.iter_vars):
                k = int(aff.get_coefficient_val(isl.dim_type.in_, q).to_python())
                if k:
                    flat = flat + (iv.var if k == 1 else iv.var * tirx.IntImm(ty, k))
            return self.view(buf, 0, stride), [flat]
        return self.rewrite(block, fold)

    def quasi_affine(self, pa: isl.PwAff, block):
        """`pa` (over the block's iters, with floor divisions) as a TIR expression in the block's
        iter vars, in isl's simplified form: a [1, 52, 52, 1, 2] grid read at the digits of
        24k + l is 8k + 2 * (l // 6) + l % 2, whose lanes over l differ by constants (one load
        and a shuffle, `targets/vector_loads`) where the digits' own form does not show it."""
        n = pa.dim(isl.dim_type.in_)
        names = [f"akgpy_iv{q}" for q in range(n)]
        for q, nm in enumerate(names):
            pa = pa.set_dim_id(isl.dim_type.in_, q, isl.Id(nm, context=self.model.ctx))
        params = pa.move_dims(isl.dim_type.param, 0, isl.dim_type.in_, 0, n)
        e = isl.AstBuild.from_context(params.domain()).expr_from_pw_aff(params)
        saved = dict(self.vars)
        self.vars.update({nm: iv.var for nm, iv in zip(names, block.iter_vars)})
        try:
            return self.expr(e)
        finally:
            self.vars = saved

    def view(self, buf, pos: int, inner: int):
        """`buf` with its dims from `pos` on flattened into one of `inner` elements (same data)."""
        key = (buf.name, pos)
        if key not in self.views:
            view = tirx.decl_buffer([*buf.ty.shape[:pos], inner], buf.ty.dtype, f"{buf.name}_flat{pos}",
                                    data=buf.data)
            self.views[key] = (view, buf)
        return self.views[key][0]

    def flat_view(self, buf):
        """A 1-D view of kernel argument `buf`; None for an intermediate."""
        return self.view(buf, 0, prod(buf.ty.shape)) if self.is_param(buf) else None

    def is_param(self, buf) -> bool:
        return any(buf.same_as(p) for p in self.params)

    def rewrite(self, block, access, extra_ivs=()):
        """`block` with each load/store of a kernel argument that `access(buffer, indices)` maps
        to (view, indices) rewritten and its regions updated; `block` itself when none was."""
        viewed: list = []

        def hit(buf, indices):
            if not self.is_param(buf):
                return None
            got = access(buf, indices)
            if got is not None and not any(got[0].same_as(v) for v in viewed):
                viewed.append(got[0])
            return got

        def on_load(ld, mut):
            got = hit(ld.source, ld.indices)
            return mut.default_mutate(ld) if got is None else tirx.BufferLoad(*got)

        def on_store(st, mut):
            got = hit(st.buffer, st.indices)
            buf, idx = got if got is not None else (st.buffer, list(st.indices))
            return tirx.BufferStore(buf, mut.mutate(st.value), idx)
        body = tvm_ffi.structural_mutate(block.body, [(ir.TensorLoad, on_load), (tirx.BufferStore, on_store)])
        if not viewed:
            return block
        loads, stores = [], []
        tvm_ffi.structural_walk(body, [(ir.TensorLoad, loads.append), (tirx.BufferStore, stores.append)])
        reads = _regions(block.reads, [(ld.source, ld.indices) for ld in loads], viewed)
        writes = _regions(block.writes, [(st.buffer, st.indices) for st in stores], viewed)
        return s_tir.SBlock(list(block.iter_vars) + list(extra_ivs), reads, writes, block.name_hint, body,
                            block.init, list(block.alloc_buffers), list(block.match_buffers), block.annotations)

    def uncoalesce(self, c, args: list, lin) -> list:
        """dims = digits of the linear iterator L in the mixed radix of their extents:
        floor(L / 9), floor(L / 3) mod 3, L mod 3."""
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


def _accessed(stmt, names: set) -> tuple[set, set]:
    """(read, written) buffers among `names` of the blocks realised in `stmt`."""
    reads, writes = set(), set()

    def see(r) -> None:
        reads.update(x.source.name for x in r.block.reads if x.source.name in names)
        writes.update(x.source.name for x in r.block.writes if x.source.name in names)
    tvm_ffi.structural_walk(stmt, [(s_tir.SBlockRealize, see)])
    return reads, writes


def _uses(e, vars_) -> bool:
    found = []
    tvm_ffi.structural_walk(e, [(tirx.Var, found.append)])
    return any(x.same_as(v) for x in found for v in vars_)


def _loads(index) -> bool:
    found = []
    tvm_ffi.structural_walk(index, [(ir.TensorLoad, found.append)])
    return bool(found)


def _divides(indices) -> bool:
    found = []
    for i in indices:
        tvm_ffi.structural_walk(i, [(tirx.FloorDiv, found.append), (tirx.FloorMod, found.append)])
    return bool(found)


def _regions(old, accesses, views) -> list:
    """`old` regions of buffers still accessed, plus a point region per distinct view access."""
    out = [r for r in old if any(r.source.same_as(buf) for buf, _ in accesses)]
    seen = set()
    for buf, idx in accesses:
        key = (buf.name, str(list(idx)))
        if any(buf.same_as(v) for v in views) and key not in seen:
            seen.add(key)
            out.append(tirx.BufferRegion(buf, [ir.Range.from_min_extent(i, 1) for i in idx]))
    return out


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
