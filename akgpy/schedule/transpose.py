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
From 4 rows up the rows first go through log2 rounds of two-register interleaves (`_network`),
so that each store shuffles a register or two per power-of-two group of rows instead of all R
rows, which LLVM lowers to element inserts and spills for odd tiles (yolo ~1373, 32 x 9
float32: 5.2 -> 4.0 ms; ~4409, 26 x 16 float16: 3.2 -> 2.1 ms).
"""
from __future__ import annotations

import math

import tvm_ffi
from tvm import ir, s_tir, tirx
from tvm.sym import detect_linear_equation

from ..poly.access import pow2_at_least


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
    # each store: (buffer, indices, the (row, element) of the tile in each of its lanes)
    stores = []
    if row_step == R and (flat := flat_view(store.buffer)) is not None:
        # the tile's output is one block: R stores of W lanes through a flat view
        for c in range(R):
            cells = [(t % R, t // R) for t in range(c * W, (c + 1) * W)]
            stores.append((flat, [tirx.Ramp(analyzer.simplify(o_base + c * W), 1, W)], cells))
    elif sum(e > 1 for e in row_exts) == 1:
        # W rows of R lanes, each along the output's innermost non-unit dim
        q = next(i for i, e in enumerate(row_exts) if e > 1)
        for j in range(W):
            point = {**{t: const(t, 0) for t in ts[:-1]}, ts[q]: lane_var, ts[-1]: const(ts[-1], j)}
            got = _vector_index(store.buffer, at(store.indices, point), lane_var, R, analyzer, flat_view)
            if got is None:
                return None
            stores.append((got[0], got[1], [(k, j) for k in range(R)]))
    else:
        return None
    net = _network(vs, W, R, cast or a_dtype)
    if net is None:  # one shuffle per store over all R rows
        sources = {(k, j): (vs, k * W + j) for k in range(R) for j in range(W)}
    else:
        more, sources = net
        binds += more
    return tirx.SeqStmt(binds + [_store(buf, idx, cells, sources) for buf, idx, cells in stores])


def _network(vs, W, R, dtype):
    """The tile's R rows of W lanes transposed by rounds of two-register interleaves (each an
    LLVM shufflevector of two vectors: one vpermt2/unpck on x86). A single shuffle of all R rows
    per store is what LLVM scalarises for odd shapes ([52 x 5] float16 tiles: element inserts
    and stack spills). The rows go in power-of-two groups (13 = 8 + 4 + 1), lanes padded to a
    power of two; a store then takes its lanes from a register or two of each group (two when
    it spans columns of the tile's output block). Returns (binds, sources), or None when R < 4:
    `binds` the lets of the rounds' registers, `sources` {(row, element): (registers, lane)}."""
    if R < 4:
        return None
    binds, sources, start = [], {}, 0
    # 8 + 4 + 1 for 13 rows (yolo ~1373, 32 x 9 float32 tiles: 4.0 ms in groups 8 + 1, 5.4 ms
    # padded to 16, 5.2 ms as one shuffle per store)
    sizes = [1 << b for b in reversed(range(R.bit_length())) if R >> b & 1]
    for P in sizes:
        if P == 1:
            group = [vs[start]]
            sources.update({(start, j): (group, j) for j in range(W)})
        else:
            sources.update(_rounds(vs, list(range(start, start + P)), W, dtype, binds))
        start += P
    return binds, sources


def _rounds(vs, rows, W, dtype, binds):
    """{(row, element): ([register], lane)} after log2(len(rows)) interleave rounds over `rows`
    (a power of two of them), binding each round's registers in `binds`."""
    P = len(rows)
    Wp = max(pow2_at_least(W), P)
    cur, tag = [], f"{rows[0]}_"
    order = [int(f"{i:0{P.bit_length() - 1}b}"[::-1], 2) for i in range(P)]
    for i, k in enumerate(order):  # rows come out of the rounds in order when they go in bit-reversed
        src, cells = vs[rows[k]], [(rows[k], j) if j < W else None for j in range(Wp)]
        if W < Wp:
            v = tirx.Var(f"trw{tag}{i}", f"{dtype}x{Wp}")
            # a shuffle has no more lanes than its inputs: widen from copies of the row
            binds.append(tirx.Bind(v, _shuffle([src] * -(-Wp // W), [min(j, W - 1) for j in range(Wp)])))
            src = v
        cur.append((src, cells))
    g, n = 1, 0
    while g < P:
        nxt = []
        for i in range(P // 2):
            (x, xc), (y, yc) = cur[i], cur[i + P // 2]
            for half in (0, Wp // 2):
                lanes, cells = [], []
                for q in range(half, half + Wp // 2, g):
                    lanes += list(range(q, q + g)) + list(range(Wp + q, Wp + q + g))
                    cells += xc[q:q + g] + yc[q:q + g]
                v = tirx.Var(f"trn{tag}{n}", f"{dtype}x{Wp}")
                n += 1
                binds.append(tirx.Bind(v, _shuffle([x, y], lanes)))
                nxt.append((v, cells))
        cur, g = nxt, g * 2
    sources = {}
    for v, cells in cur:
        group = [v]  # one list per register: _store tells its sources apart by identity
        sources.update({c: (group, lane) for lane, c in enumerate(cells) if c is not None})
    return sources


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


def _shuffle(vs, lanes):
    return tirx.Shuffle(vs, [tirx.IntImm("int32", i) for i in lanes])


def _store(buf, indices, cells, sources):
    """Store the tile's `cells`, found at `sources` {(row, element): (registers, lane)}: one
    shuffle of the registers that hold them."""
    regs, offset, lanes = [], {}, []
    for c in cells:
        group, lane = sources[c]
        if id(group) not in offset:  # a group is one list object per register (or per tile)
            offset[id(group)] = sum(int(v.ty.dtype.lanes) for v in regs)
            regs += group
        lanes.append(offset[id(group)] + lane)
    return tirx.BufferStore(buf, _shuffle(regs, lanes), indices)
