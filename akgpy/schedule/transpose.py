"""In-register transpose of one tile: the code generation behind the tree's `transpose` mark.

Below the mark isl's AST has the tile's point loops: R rows (one or more loops) around W
elements, for a copy `out[..] = in[..]` (maybe cast) that reads the W elements contiguously and
writes the R rows contiguously. Scalar, that is 2 x W x R single-element moves; TVM has no
transpose of its own and its vectoriser makes the side that strides a gather or scatter of
single lanes. Here the R rows are W-lane vector loads and the output is assembled with
`tirx.Shuffle` (LLVM's shufflevector: permutes within and across registers) and written with
vector stores: R stores of W lanes when the tile's output is one contiguous block, else W stores
of R lanes. A standalone [1024, 9, 512] -> [1024, 512, 9] float16 transpose took 1.37 ms as
scalar loops, 0.93 ms as vector loads with scattered stores, and 0.24 ms this way.
"""
from __future__ import annotations

import math

import tvm_ffi
from tvm import ir, s_tir, tirx
from tvm.sym import detect_linear_equation


def _substitute(expr, mapping: dict):
    return tvm_ffi.structural_mutate(expr, [(tirx.Var, lambda v, mut: mapping.get(v, v))])


def _flat(buf, indices):
    """Row-major flat offset of `indices` into `buf`."""
    off, stride = 0, 1
    for i, n in zip(reversed(list(indices)), reversed(list(buf.ty.shape))):
        off, stride = off + i * stride, stride * n
    return off


def _coeffs(expr, loop_vars):
    """Integer coefficients of each loop var in `expr`, and the rest; None when not linear."""
    got = detect_linear_equation(expr, loop_vars)
    if len(got) != len(loop_vars) + 1:
        return None
    cs = []
    for c in got[:-1]:
        if not isinstance(c, tirx.IntImm):
            return None
        cs.append(int(c.value))
    return cs, got[-1]


def copy_parts(block):
    """(store, load, cast dtype or None) when the block stores one load, maybe cast: a copy,
    what this module moves as whole vectors; else None."""
    store = block.body
    if not isinstance(store, tirx.BufferStore):
        return None
    value, cast = store.value, None
    if isinstance(value, tirx.Cast):
        value, cast = value.value, str(value.ty)
    return (store, value, cast) if isinstance(value, ir.TensorLoad) else None


def register_transpose(nest, flat_view, analyzer):
    """`nest` (row loops around one element loop around one block) as an in-register transpose,
    or None when it is not that shape. `flat_view(buf)` is a 1-D view of a kernel argument, None
    for an intermediate: those are indexed as they are, so TVM can still compact them."""
    loops, s = [], nest
    while isinstance(s, tirx.For):
        loops.append(s)
        s = s.body
    if not isinstance(s, s_tir.SBlockRealize) or len(loops) < 2:
        return None
    if any(not isinstance(lp.extent, tirx.IntImm) for lp in loops):
        return None
    block = s.block
    if (parts := copy_parts(block)) is None:
        return None
    store, value, cast = parts
    sub = {iv.var: v for iv, v in zip(block.iter_vars, s.iter_values)}
    # point loop var v runs [min, min + extent): offsets in terms of t = v - min
    ts = [tirx.Var(f"t{k}", lp.loop_var.ty) for k, lp in enumerate(loops)]
    sub_t = {lp.loop_var: lp.min + t for lp, t in zip(loops, ts)}

    def offset(buf, idx):
        e = _flat(buf, [_substitute(_substitute(i, sub), sub_t) for i in idx])
        return _coeffs(analyzer.simplify(e), ts)
    src, dst = offset(value.source, value.indices), offset(store.buffer, store.indices)
    if src is None or dst is None:
        return None
    (a_cs, _), (o_cs, o_base) = src, dst
    exts = [int(lp.extent.value) for lp in loops]
    W, row_exts = exts[-1], exts[:-1]
    R = math.prod(row_exts)
    if a_cs[-1] != 1 or R < 2 or W < 2:
        return None
    # the rows, in loop order, must be contiguous in the output
    stride = 1
    for c, e in zip(reversed(o_cs[:-1]), reversed(row_exts)):
        if c != stride and e > 1:
            return None
        stride *= e
    row_step = o_cs[-1]  # output distance between two of the W elements
    a_dtype = str(value.source.ty.dtype)
    o_dtype = str(store.buffer.ty.dtype)
    if (cast or a_dtype) != o_dtype:
        return None

    def at(idx, point: dict):
        """`idx` at a point of the tile: {loop offset t: its value}."""
        return [_substitute(_substitute(_substitute(i, sub), sub_t), point) for i in idx]

    def const(t, v):
        return tirx.IntImm(t.ty, v)

    def row_digits(k):
        digits = []
        for e in reversed(row_exts):
            digits.append(k % e)
            k //= e
        return digits[::-1]
    lane_var = tirx.Var("lane", ts[-1].ty)
    vs, binds = [], []
    for k in range(R):  # the source walks the element loop along its innermost non-unit dim
        point = {**{t: const(t, d) for t, d in zip(ts, row_digits(k))}, ts[-1]: lane_var}
        got = _vector_index(value.source, at(value.indices, point), lane_var, W, analyzer, flat_view)
        if got is None:
            return None
        v = tirx.Var(f"tr{k}", f"{cast or a_dtype}x{W}")
        load = tirx.BufferLoad(*got)
        binds.append(tirx.Bind(v, tirx.Cast(f"{cast}x{W}", load) if cast else load))
        vs.append(v)
    stores = []
    if row_step == R and (flat := flat_view(store.buffer)) is not None:
        # the tile's output is one block: R stores of W lanes through a flat view
        for c in range(R):
            lanes = [(t % R) * W + t // R for t in range(c * W, (c + 1) * W)]
            stores.append(_store(flat, vs, lanes, [tirx.Ramp(analyzer.simplify(o_base + c * W), 1, W)]))
    elif sum(e > 1 for e in row_exts) == 1:
        # W rows of R lanes, each along the output's innermost non-unit dim
        q = next(i for i, e in enumerate(row_exts) if e > 1)
        for j in range(W):
            point = {**{t: const(t, 0) for t in ts[:-1]}, ts[q]: lane_var, ts[-1]: const(ts[-1], j)}
            got = _vector_index(store.buffer, at(store.indices, point), lane_var, R, analyzer, flat_view)
            if got is None:
                return None
            stores.append(_store(*got[:1], vs, [k * W + j for k in range(R)], got[1]))
    else:
        return None
    return tirx.SeqStmt(binds + stores)


def _vector_index(buf, idx, lane, n, analyzer, view):
    """(buffer, indices) of the n consecutive elements `idx` (in terms of `lane`) addresses for
    lane = 0 .. n-1, or None unless lane moves exactly one index by 1 and every dim after it has
    extent 1. TVM takes a vector index only in the last dim: behind trailing unit dims a kernel
    argument is addressed through its flat view (`view(buf)`, None for an intermediate)."""
    hit = None
    for d, i in enumerate(idx):
        got = _coeffs(analyzer.simplify(i), [lane])
        if got is None:
            return None
        if got[0][0] == 0:
            continue
        if got[0][0] != 1 or hit is not None:
            return None
        hit = d
    shape = list(buf.ty.shape)
    if hit is None or any(int(e) != 1 for e in shape[hit + 1:]):
        return None
    base = [analyzer.simplify(_substitute(i, {lane: tirx.IntImm(lane.ty, 0)})) for i in idx]
    if hit == len(idx) - 1:
        return buf, [*base[:-1], tirx.Ramp(base[-1], 1, n)]
    flat = view(buf)
    if flat is None:
        return None
    return flat, [tirx.Ramp(analyzer.simplify(_flat(buf, base)), 1, n)]


def _store(buf, vs, lanes, indices):
    return tirx.BufferStore(buf, tirx.Shuffle(vs, [tirx.IntImm("int32", i) for i in lanes]), indices)
