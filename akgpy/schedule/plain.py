"""The plain CPU schedule: the baseline every smarter schedule is checked against.

1. inline every injective block that is not an output or a packing stage, so a chain of
   elementwise/broadcast/layout ops becomes one expression inside its consumer;
2. each remaining spatial nest: vectorise an inner slice of the innermost loop (when it
   divides), fuse the rest and run it in parallel;
3. reductions: parallel over the fused spatial loops, the reduction loops serial inside;
4. contractions (MatMul/Conv2D): a register tile of up to `tile_i` rows x `tile_j_vectors`
   vector columns accumulates over the whole reduction in a buffer of its own (registers),
   tiles run in parallel; a float16 A is converted to float32 inside each tile, and a
   MatMul's rows are padded where no tile that fits the registers divides them.
Every primitive is applied through `_try`, so a schedule step that TVM refuses for an
unusual block leaves that block correct but slower, never broken.
"""
from __future__ import annotations

from dataclasses import dataclass

import tvm_ffi
from tvm import ir, s_tir, tirx
from tvm.sym import Analyzer, detect_linear_equation

from ..te.builders import largest_divisor
from ..te.lower import Lowered
from ..target import Target
from . import conv
from .config import ScheduleConfig


# what TVM raises when it refuses a primitive for a block
_REFUSED = (s_tir.ScheduleError, ValueError, RuntimeError)


def _try(fn, *args, **kw):
    try:
        return fn(*args, **kw)
    except _REFUSED:
        return None


def _done(fn, *args, **kw) -> bool:
    """Whether a primitive succeeded (TVM's return None on success, so `_try` cannot say)."""
    try:
        fn(*args, **kw)
        return True
    except _REFUSED:
        return False


def _parallel(sch, loop, cfg: ScheduleConfig) -> None:
    if cfg.parallel and _extent(sch, loop) >= cfg.min_parallel:
        _try(sch.parallel, loop)


def _extent(sch, loop) -> int:
    ext = sch.get(loop).extent
    return int(ext.value) if hasattr(ext, "value") else -1


def _elem_bytes(sch, block) -> int:
    buf = sch.get(block).writes[0].source
    bits = int(tvm_dtype_bits(buf.dtype))
    return max(bits // 8, 1)


def tvm_dtype_bits(dtype) -> int:
    s = str(dtype)
    if s == "bool":
        return 8
    digits = "".join(c for c in s if c.isdigit())
    return int(digits) if digits else 32


def vectorize_innermost(sch, block, target: Target) -> list:
    """Vectorise the largest slice (>= 4 lanes, no tail) of the block's innermost loop that
    fits one vector register; returns the loops outside the vector."""
    loops = sch.get_loops(block)
    if not loops:
        return []
    lanes = max(target.vector_bytes // _elem_bytes(sch, block), 1)
    ext = _extent(sch, loops[-1])
    f = largest_divisor(ext, lanes)
    if ext <= 1 or f < 4:
        return list(loops)
    if f < ext:
        outer, vec = sch.split(loops[-1], [None, f])
        loops = [*loops[:-1], outer]
    else:
        vec, loops = loops[-1], list(loops[:-1])
    _try(sch.vectorize, vec)
    return loops


# An inlined chain of blocks is one expression, and TVM's passes (akgpy's Python ones too) walk
# expressions recursively: a chain of 3,000 Negs or an AddN of 3,000 terms overflowed the C
# stack, and inlining a chain into each next block is quadratic in its length. A block whose
# expression would be deeper or larger than this stays a statement, its consumers load it.
INLINE_MAX_DEPTH = 256
INLINE_MAX_NODES = 16384
# A block read in k places is copied k times when inlined: in a DAG of shared values the copies
# multiply (a random 10,000-op graph inlined to ~8 million nodes, 380 s of LLVM). The copies
# beyond the first, summed over the function, stay under the function's own size or this.
INLINE_MAX_COPIED_NODES = 16384


@dataclass
class _Expr:
    """A block's expression: own depth and node count, and the producer buffers it loads (with
    the depth of each load) by handle."""
    depth: int
    nodes: int
    loads: list[tuple[int, int]]


def _measure(body) -> _Expr:
    """Depth, node count and loads of a (single-op, so shallow) block body's expressions."""
    stack, loads = [[0, 0]], []

    def visit(node, v):
        frame = [0, 1]
        stack.append(frame)
        if isinstance(node, ir.TensorLoad):
            loads.append((node.source.__chandle__(), len(stack) - 1))
        v.default_visit(node)
        stack.pop()
        stack[-1][0] = max(stack[-1][0], frame[0] + 1)
        stack[-1][1] += frame[1]
    tvm_ffi.structural_visit(body, [(ir.Expr, visit)])
    return _Expr(stack[0][0], stack[0][1], loads)


def bounded_inlining(blocks: list, candidates: set[str]) -> set[str]:
    """The candidates (names of blocks that may be inlined) to inline so that no block's
    expression, with its inlined producers substituted, is deeper than INLINE_MAX_DEPTH or has
    more than INLINE_MAX_NODES nodes. `blocks`: the SBlocks in program order. Greedy in that
    order: where a block's expression would exceed a bound, its largest inlined producers stay
    statements until it fits (a block alone, one op, always fits); and a block read in several
    places stays one where its copies would take the function past its copy budget."""
    measured: dict[int, tuple[int, int]] = {}  # buffer of an inlined block -> (depth, nodes)
    inlined = set()
    owns = [_measure(blk.body) for blk in blocks]
    uses: dict[int, int] = {}
    for own in owns:
        for buf, _ in own.loads:
            uses[buf] = uses.get(buf, 0) + 1
    budget = max(INLINE_MAX_COPIED_NODES, sum(own.nodes for own in owns))
    for blk, own in zip(blocks, owns):
        while True:
            depth, nodes = own.depth, own.nodes
            for buf, at in own.loads:
                if buf in measured:
                    d, n = measured[buf]
                    depth, nodes = max(depth, at + d - 1), nodes + n - 1
            if (depth <= INLINE_MAX_DEPTH and nodes <= INLINE_MAX_NODES) or not any(b in measured for b, _ in own.loads):
                break
            deepest = max((b for b, _ in own.loads if b in measured), key=lambda b: measured[b])
            del measured[deepest]
            inlined.discard(deepest)
        if blk.name_hint in candidates and blk.writes:
            buf = blk.writes[0].source.__chandle__()
            copied = (uses.get(buf, 0) - 1) * nodes
            if copied > budget:
                continue
            budget -= max(copied, 0)
            measured[buf] = (depth, nodes)
            inlined.add(buf)
    return {b.name_hint for b in blocks if b.writes and b.writes[0].source.__chandle__() in inlined}


def inline_injective(low: Lowered, keep=frozenset(), simplify: bool = False):
    """(a Schedule of low.func with every elementwise block, except those in `keep`, those
    writing a parameter and those `bounded_inlining` keeps, inlined into its consumers, the
    names of the blocks left in order). `simplify`: the inlined loads' indices simplified
    under their blocks' bounds (`_simplified_loads`: the contraction template's epilogues)."""
    root = low.func.body.block
    nests = list(root.body.seq) if isinstance(root.body, tirx.SeqStmt) else [root.body]
    blocks = [_nest_block(n) for n in nests]
    params = {p.name for p in low.func.params}  # kernel arguments: their handles bear the buffers' names
    # an output block cannot be inlined (it writes an argument)
    candidates = {b.name_hint for b in blocks if low.roles.get(b.name_hint) == "elemwise" and b.name_hint not in keep
                  and not any(w.source.name in params for w in b.writes)}
    chosen = bounded_inlining(blocks, candidates)
    sch = s_tir.Schedule(low.func)
    if chosen:
        # one replacement of the root block, as compute_inline makes: a new Schedule would verify
        # the function, and an expression with Lets (te/fastmath.py) inlined twice defines them twice
        root, reuse = _inlined_root(low.func, nests, blocks, chosen, simplify)
        sch.state.replace(sch.get_sref(sch.get_sblock("root")), root, reuse)
        # replace() leaves the root scope's flags (stage pipeline, region cover) unset, and
        # rfactor refuses such a scope: a Schedule built anew computes them, after ConvertSSA
        # gives each copy of an inlined Let its own variable
        sch = s_tir.Schedule(tirx.transform.ConvertSSA()(sch.mod))
    return sch, [sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))]


def root_blocks(func) -> list:
    """The blocks of create_prim_func's function, in order (one per loop nest under the root)."""
    body = func.body.block.body
    return [_nest_block(n) for n in (body.seq if isinstance(body, tirx.SeqStmt) else [body])]


def _nest_block(nest):
    """The block of one of create_prim_func's loop nests (loops around one block realize)."""
    while isinstance(nest, tirx.For):
        nest = nest.body
    return nest.block


def _simplified_loads(body, iter_vars):
    """`body` with its loads' indices simplified under the block iterators' bounds. Inlined
    reshapes compose into div/mod chains (a residual read through [3136, 24] -> [1, 56, 56, 24]
    -> [3136, 24] as `(i * 24 + j) % 75264 // 1344`) that are the iterators themselves once
    simplified; left so, a contraction's epilogue could not run inside its tile loop
    (`_epilogue`) and its second pass gathered element by element."""
    ana = Analyzer()
    for iv in iter_vars:
        ana.bind(iv.var, iv.dom)

    def on_load(ld):
        idx = [ana.simplify(i) for i in ld.indices]
        if all(a.same_as(b) for a, b in zip(idx, ld.indices)):
            return ld
        return tirx.BufferLoad(ld.source, idx)

    return tvm_ffi.structural_map(body, [(ir.TensorLoad, on_load)])


# TVM's compute_inline rewrites the whole scope per call: inlining n blocks one call at a time
# is quadratic (3,000 Negs took 113 s). The same substitution for all of them in one pass:
# each consumer's loads of an inlined buffer become that block's stored value, itself already
# substituted, at the load's indices; read regions are inferred again, as compute_inline does.
def _inlined_root(func, nests, blocks, chosen: set[str], simplify: bool = False):
    """(the root block with the chosen blocks inlined, {old block: new block} of the consumers)."""
    values: dict[int, tuple] = {}  # buffer handle -> (store's index vars by handle, value)

    def load(ld):
        hit = values.get(ld.source.__chandle__())
        if hit is None:
            return ld
        index_vars, value = hit
        at = dict(zip(index_vars, ld.indices))
        return tvm_ffi.structural_map(value, [(ir.expr.Var, lambda v: at.get(v.__chandle__(), v))])

    root = func.body.block

    def substituted(blk):
        body = tvm_ffi.structural_map(blk.body, [(ir.TensorLoad, load)])
        if simplify:
            body = _simplified_loads(body, blk.iter_vars)
        new = s_tir.SBlock(blk.iter_vars, blk.reads, blk.writes, blk.name_hint, body, blk.init,
                           blk.alloc_buffers, blk.match_buffers, blk.annotations)
        # the buffers this block accesses, not all the function's: the map is copied per call
        accessed = [r.source for r in blk.writes]
        tvm_ffi.structural_walk(body, [(ir.TensorLoad, lambda ld: accessed.append(ld.source))])
        reads, writes = s_tir.analysis.get_sblock_read_write_region(new, {b: b for b in accessed})
        return s_tir.SBlock(blk.iter_vars, reads, writes, blk.name_hint, body, blk.init,
                            blk.alloc_buffers, blk.match_buffers, blk.annotations)

    kept, gone, reuse = [], set(), {}
    for nest, blk in zip(nests, blocks):
        new = substituted(blk) if any(r.source.__chandle__() in values for r in blk.reads) else blk
        if blk.name_hint in chosen and _inlinable(new):
            store = new.body
            values[store.buffer.__chandle__()] = ([i.__chandle__() for i in store.indices], store.value)
            gone.add(store.buffer.__chandle__())
            continue
        if not new.same_as(blk):
            reuse[blk] = new
            nest = tvm_ffi.structural_map(nest, [(s_tir.SBlock, lambda b, old=blk, new=new: new if b.same_as(old) else b)])
        kept.append(nest)
    allocs = [b for b in root.alloc_buffers if b.__chandle__() not in gone]
    body = kept[0] if len(kept) == 1 else tirx.SeqStmt(kept)
    return s_tir.SBlock(root.iter_vars, root.reads, root.writes, root.name_hint, body, root.init,
                        allocs, root.match_buffers, root.annotations), reuse


def _inlinable(blk) -> bool:
    """compute_inline's conditions on the producer: one store, at its distinct iter vars, no init."""
    store = blk.body
    if blk.init is not None or not isinstance(store, tirx.BufferStore):
        return False
    own = {iv.var.__chandle__() for iv in blk.iter_vars}
    idx = [i.__chandle__() if isinstance(i, ir.expr.Var) else None for i in store.indices]
    return None not in idx and len(set(idx)) == len(idx) and set(idx) <= own


def _spatial(sch, block, cfg: ScheduleConfig, target: Target) -> None:
    outer = vectorize_innermost(sch, block, target)
    if outer:
        _parallel(sch, sch.fuse(*outer) if len(outer) > 1 else outer[0], cfg)


def contiguous_iter(blk) -> int | None:
    """Index of the block iter var that walks the largest input with stride 1 (its last index)."""
    loads = []
    tvm_ffi.structural_walk(blk.body, [(ir.TensorLoad, loads.append)])
    best, size = None, -1
    for ld in loads:
        n = 1
        for e in ld.source.shape:
            n *= int(e.value) if hasattr(e, "value") else 1
        last = ld.indices[-1] if len(ld.indices) else None
        if n > size and last is not None:
            best, size = last, n
    if best is None:
        return None
    # a reshape leaves k % 16 or k // 16 + j for a k of extent 16: simplified over the iter
    # vars' ranges, the index is the var it is
    ana = Analyzer()
    for iv in blk.iter_vars:
        ana.bind(iv.var, iv.dom)
    best = ana.simplify(best)
    for q, iv in enumerate(blk.iter_vars):
        if best.same_as(iv.var):
            return q
    # a chunk of a split axis, c * 2048 + k: the iter var with coefficient 1 walks it
    for q in reversed(range(len(blk.iter_vars))):
        v = blk.iter_vars[q].var
        coef = detect_linear_equation(best, [v])
        if len(coef) == 2 and isinstance(coef[0], tirx.IntImm) and int(coef[0].value) == 1:
            return q
    return None


def _reduction(sch, block, cfg: ScheduleConfig, target: Target) -> None:
    """Parallel over the spatial loops. When the input is contiguous along a *kept* dim (a
    column sum), that dim's loop moves inside the reduction loops and is vectorised, so each
    step of the reduction reads whole cache lines; every output still adds in the same order."""
    blk = sch.get(block)
    kinds = [int(iv.iter_type) for iv in blk.iter_vars]
    loops = sch.get_loops(block)
    if len(loops) != len(kinds):
        return
    spatial = [l for l, k in zip(loops, kinds) if k == 0]
    reduce = [l for l, k in zip(loops, kinds) if k != 0]
    q = contiguous_iter(blk)
    if q is not None and kinds[q] == 0 and reduce and _extent(sch, loops[q]) >= 4:
        inner = loops[q]
        outer = [l for l in spatial if not l.same_as(inner)]
        sch.reorder(*outer, *reduce, inner)
        _try(sch.decompose_reduction, block, reduce[0])
        lanes = max(target.vector_bytes // _elem_bytes(sch, block), 1)
        f = largest_divisor(_extent(sch, inner), lanes)
        if f >= 4:
            _, vec = sch.split(inner, [None, f])
            _try(sch.vectorize, vec)
        if outer:
            fused = sch.fuse(*outer) if len(outer) > 1 else outer[0]
            _parallel(sch, fused, cfg)
        return
    if spatial:
        fused = sch.fuse(*spatial) if len(spatial) > 1 else spatial[0]
        _parallel(sch, fused, cfg)


# Vectors of a narrow-operand (float16) tile read through conversions (A not widened, or a
# float32 A with a float16 B): every load of A or B is a conversion there, and the wide 8 x 2
# tile that spills 3 registers beat the 12-accumulator tiles that fit (52 float16 corpus
# MatMul/Conv2D graphs, kernel alone, interleaved, before A was widened: 1.04x geomean slower
# with the float32 rule, up to 1.48x)
NARROW_TILE_VECTORS = 2


def register_tile(rows: int, cols: int, lanes: int, cfg: ScheduleConfig, narrow: bool,
                  widened: bool = False, padded: bool = False, *, registers: int) -> tuple[int, int]:
    """(rows, columns) of the contraction's register tile, divisors of the two extents (no
    tail). 32-bit operands: at most `cfg.tile_i` rows and `cfg.tile_j_vectors` vectors whose
    accumulators, one vector of each column block of B and A's broadcast element fit the
    target's `registers` (Target.vector_registers: 16 up to AVX2, 32 with AVX-512); the most accumulators, then the most
    rows: on AVX2 6 x 2 vectors where 6 divides the rows, else 4 x 3. The 8 x 2 tile used for
    all before needs 19 registers, and LLVM then reloaded and stored the spilled accumulators
    at every step (float32, 2 threads, Zen 3, GFLOPS of 8 x 2 -> this rule: 128 x 768 x 768
    80 -> 114, 768^3 88 -> 147, [2048, 768] x [768, 3072] 84 -> 94; 128 x 3072 x 768 78 -> 70).
    `padded`: a row count the tile does not divide is fine where padding it to a multiple
    wastes at most 1 / PAD_MAX_WASTE of the rows (`_pad_rows`) and no dividing tile has as
    many accumulators. `widened`: A is converted
    per tile (`_widen_a`), once for each tile of columns, so among tiles of as many
    accumulators the most columns (yolo's [1384448, 64] x [64, 32], float16:
    4 x 16 instead of 8 x 8, 96 -> 52 ms). Narrow operands read through conversions, and
    columns that are no multiple of the lanes: the largest divisors up to `cfg.tile_i` rows
    and NARROW_TILE_VECTORS (or `tile_j_vectors`, if fewer) vectors."""
    if narrow or cols % lanes:
        return (largest_divisor(rows, cfg.tile_i),
                largest_divisor(cols, lanes * min(cfg.tile_j_vectors, NARROW_TILE_VECTORS)))
    regs = registers
    best, key = (1, lanes), (0, False, 0)
    for tv in range(1, cfg.tile_j_vectors + 1):
        for ti in range(1, cfg.tile_i + 1):
            divides = rows % ti == 0
            # among as many accumulators: with 32 registers the fewest loads a reduction step
            # (ti broadcasts of A, tv vectors of B), then the most rows (WIDE_TILE_REGISTERS)
            third = tv if widened else (-(ti + tv), ti) if regs >= WIDE_TILE_REGISTERS else ti
            k = (ti * tv, divides, third)
            fits = divides or (padded and tv <= PAD_MAX_VECTORS and -rows % ti <= rows // PAD_MAX_WASTE)
            if fits and (cols // lanes) % tv == 0 and ti * tv + tv + 1 <= regs and k > key:
                best, key = (ti, tv * lanes), k
    return best


# B is packed into panels for at least this many rows of A (the copy costs a pass over B: a
# [64, 512] x [512, 1000] product ran 1.37x slower packed) and rows of B this long (a float16
# B with rows of 256 bytes, read by 100352 rows of A, ran 1.30x slower packed)
PACK_MIN_ROWS = 128
# ... and a B larger than the L2 TLB's reach (Zen 3: 2048 pages of 4 KiB) that still fits the
# last-level cache, read by PACK_TLB_MIN_ROWS rows or more: in place, every step of the
# reduction reads the next row of B, a page further on, and misses the TLB; packed, its panels
# stream. Kernel alone, interleaved, 2 threads, Zen 3: float16, 32-64 rows of A, B of 8 and 32
# MiB 0.49-0.76x; 72 MiB (past the 32 MiB LLC: every call reads it from memory, and the copy
# triples that) 1.37-1.44x slower; 4.7 MiB 1.63x slower, 2.3 MiB 1.22x, 1.2 MiB 2.8x. float32,
# 32-96 rows, 16 MiB: 0.75-0.92x; 16 rows 1.16x slower
PACK_TLB_BYTES = 8 << 20
PACK_TLB_MIN_ROWS = 32
PACK_MIN_ROW_BYTES = 1024


def _operand_reads(blk) -> list:
    """(read index, region) of a contraction block's operands: its reads but the accumulator."""
    out = blk.writes[0].source
    return [(i, r) for i, r in enumerate(blk.reads) if not r.source.same_as(out)]


def _pack_panels(sch, block, rows: int, ti: int, tj: int, cfg: ScheduleConfig, target: Target,
                 force: bool = False) -> bool:
    """Lay B out as panels [N / tj, K, tj] (one tile's columns contiguous along K) before the
    tiles run, when B is a 2-d matrix larger than L1 with long rows (PACK_MIN_ROW_BYTES) that
    many rows of A read (PACK_MIN_ROWS). Read in place, each step of the reduction loads a
    tile's columns from the next row of B, N elements on: a new page every step or few, which
    the L1 TLB and the prefetchers do not keep up with. float32, 2 threads, Zen 3, kernel
    alone, interleaved: [2048, 768] x [768, 3072] 112 -> 64 ms (86 -> 150 GFLOPS), 128 x 3072
    x 768 9.6 -> 7.4 ms, 512 x 768 x 768 0.81x, 768^3 0.97x; yolo's NZ MatMuls 0.63-0.74x. A
    kernel input is copied into the panels (cache_read); a packed operand the kernel computes
    (a transposed or fractal B) is written in that layout directly. `force` (a tuned choice):
    pack wherever the layout allows, whatever the sizes."""
    blk = sch.get(block)
    reads = _operand_reads(blk)
    if len(reads) != 2 or reads[0][1].source.same_as(reads[1][1].source):
        return False
    bidx, region = reads[1]
    b = region.source
    kv, jv = blk.iter_vars[-1].var, blk.iter_vars[-2].var  # the reduction, B's column
    if len(b.shape) != 2 or not (region.region[0].min.same_as(kv) and region.region[1].min.same_as(jv)):
        return False
    k, n = (int(d) for d in b.shape)
    row_bytes = n * tvm_dtype_bits(b.dtype) // 8
    size = k * row_bytes
    past_tlb = PACK_TLB_BYTES <= size <= target.llc_bytes and rows >= PACK_TLB_MIN_ROWS
    if n % tj or not force and ((rows < PACK_MIN_ROWS and not past_tlb) or row_bytes < PACK_MIN_ROW_BYTES
                                or size <= target.l1_bytes):
        return False
    root = sch.get(sch.get_sblock("root"))
    copy = None
    try:
        if not any(b.same_as(a) for a in root.alloc_buffers):  # a kernel argument: copied
            copy = sch.cache_read(block, bidx, "global")
        sch.transform_layout(block, ("read", bidx), lambda kk, j: (j // tj, kk, j % tj))
    except _REFUSED:
        return False  # each primitive is all or nothing: a copy without panels is still correct
    if copy is not None:
        # a row of B's tj-column chunks, each a panel's row: split at tj, the index of the panel
        # and the column in it are plain loop variables and the chunk is vector loads and
        # stores. The copy had been one scalar element at a time (float32, kernel alone,
        # interleaved, Emerald Rapids: 128 x 768 x 3072 0.88x and 0.93x in two runs, 128 x
        # 3072 x 768 0.91x, float16 128 x 768 x 3072 0.84x, 64 x 4096 x 1024 0.90x; 768^3 and
        # 2048 x 768 x 3072, whose tiles outweigh the copy, within noise)
        loops = sch.get_loops(copy)
        _parallel(sch, loops[0], cfg)
        if len(loops) == 2 and _try(sch.split, loops[1], [None, tj]) is not None:
            vectorize_innermost(sch, copy, target)
    return True


# the float32 copy of A that a tile converts at a time stays under this many bytes. Chosen as
# TVM's kMaxStackAlloca, under which a buffer went on the stack rather than to the workspace
# allocator (a call at every entry of its loop); since targets/stack_scratch.py puts buffers
# up to 16 KiB on the stack too, a larger chunk was measured and gained nothing (8192 against
# 1024, float16, kernel alone, interleaved, Emerald Rapids: 16384 x 64 x 32 1.04x, 128 x 768 x
# 3072 0.98x, 2048 x 768 x 768 1.07x, 512 x 3072 x 768 1.00x)
WIDEN_CHUNK_BYTES = 1024
# a padded row tile computes at most 1 / PAD_MAX_WASTE of the rows again as padding (with
# 1/8, float16 [32, 32] x [32, 4096] padded to 36 rows ran 1.36x slower, [32, 4096] x [4096,
# 9216] 1.15x)
PAD_MAX_WASTE = 16
# ... and pads only tiles of at most this many vectors: a padded 6 x 4 tile (AVX-512) ran slower
# than the 8 x 2 tile that divides the rows, its crop a second pass over the result (float32,
# 1 thread, kernel alone, interleaved: 512 x 512 x 2752 125 against 139 GFLOP/s)
PAD_MAX_VECTORS = 3
# From this many vector registers (AVX-512's 32) a tie in accumulators goes to the tile with the
# fewest loads a step: 6 x 4 over 8 x 3, 4 x 4 over 8 x 2 (float32, 1 thread, kernel alone,
# interleaved, GFLOP/s: 768 x 768 x 3072 133 -> 142 and 132 -> 141 in two runs, 504 x 512 x 2752
# 126 -> 140, 512 x 512 x 2752 126 -> 129, 128 x 64 x 1536 141 -> 158, 128 x 128 x 768 147 ->
# 151). With 16 registers the most rows (measured on Zen 3, above).
WIDE_TILE_REGISTERS = 32


def _producer(sch, block, buf):
    return next((p for p in sch.get_producers(block) if sch.get(p).writes[0].source.same_as(buf)), None)


def _widen_stage(sch, block, roles: dict):
    """The block converting A to float32 ahead of the contraction (te/builders._widened), or None."""
    reads = _operand_reads(sch.get(block))
    stage = _producer(sch, block, reads[0][1].source) if reads else None
    return stage if stage is not None and roles.get(sch.get(stage).name_hint) == "widen" else None


def _widen_a(sch, stage, tile, reduce: list, ti: int, target: Target) -> tuple[list, bool]:
    """A float16 A, read through a conversion, made every multiply-add of the tile wait on
    vcvtph2ps (one a cycle on Zen 3, against two FMAs). Its widening stage runs inside the
    tile instead, for the tile's rows and a chunk of the innermost reduction loop small enough
    to stay in L1 (WIDEN_CHUNK_BYTES), 8 lanes a conversion; the tile's multiply-adds then
    read float32. The same for A's padded copy (`_pad_rows`). Returns the reduction loops
    after the chunking, and whether the stage moved (False: inlined into the multiply-adds)."""
    at = reduce[-2] if len(reduce) > 1 else tile
    ext = _extent(sch, reduce[-1])
    kc = largest_divisor(ext, max((WIDEN_CHUNK_BYTES - 1) // (4 * ti), 1))
    if 8 <= kc < ext:
        at, inner = sch.split(reduce[-1], [None, kc])
        reduce = [*reduce[:-1], at, inner]
    if _done(sch.compute_at, stage, at, preserve_unit_loops=True):
        vectorize_innermost(sch, stage, target)
        return reduce, True
    sch.compute_inline(stage)
    return reduce, False


def _pad_rows(sch, block, kinds: list, ti: int, widen):
    """Pad the contraction's rows to a multiple of `ti` (TVM's pad_einsum: A copied with zero
    rows, the result computed into a padded buffer and cropped). (A's stage, the crop block),
    or None where the block is no einsum (a Conv2D's windows, a fractal operand's indices)."""
    row = [q for q, k in enumerate(kinds) if k == 0][-2]
    if not _done(sch.pad_einsum, block, [ti if q == row else 1 for q in range(len(kinds))]):
        return None
    a = _operand_reads(sch.get(block))[0][1].source
    stage, crop = _producer(sch, block, a), (sch.get_consumers(block) or [None])[0]
    if widen is not None:
        sch.compute_inline(widen)  # into A's padded copy, which converts it then
    return stage, crop


def contraction_key(block_name: str) -> str:
    """The band key (as poly/tree.band_key spells them) of a contraction's register-tiled nest."""
    return f"contract:{block_name}"


def _contraction_choice(cfg: ScheduleConfig, block_name: str):
    """The contraction's override record in `cfg.bands` (register_tile, pack), or None."""
    key = contraction_key(block_name)
    return next((c for c in cfg.bands if c.key == key), None)


def _contraction(sch, block, cfg: ScheduleConfig, target: Target, notes: list | None = None,
                 roles: dict | None = None):
    blk = sch.get(block)
    choice = _contraction_choice(cfg, blk.name_hint)
    tuned_tile = tuple(getattr(choice, "register_tile", ()) or ())
    pack = getattr(choice, "pack", None)
    widen = _widen_stage(sch, block, roles or {})
    kinds = [int(iv.iter_type) for iv in blk.iter_vars]
    loops = sch.get_loops(block)
    if len(loops) != len(kinds) or kinds.count(0) < 2:
        if widen is not None:
            sch.compute_inline(widen)
        _reduction(sch, block, cfg, target)
        return None
    lanes = max(target.vector_bytes // 4, 1)  # accumulators are 32-bit
    rows, cols = [_extent(sch, l) for l, k in zip(loops, kinds) if k == 0][-2:]
    narrow = widen is None and any(tvm_dtype_bits(r.source.dtype) < 32 for _, r in _operand_reads(blk))
    converts, crop = widen is not None, None
    ti, tj = register_tile(rows, cols, lanes, cfg, narrow, converts, padded=True,
                           registers=target.vector_registers)
    if tuned_tile:  # rows x column vectors; Space.legal checks that they divide and fit
        ti, tj = tuned_tile[0], tuned_tile[1] * lanes
    if rows % ti:  # more accumulators with a row tile that does not divide the rows: pad them
        padding = _pad_rows(sch, block, kinds, ti, widen)
        if padding is None:
            ti, tj = register_tile(rows, cols, lanes, cfg, narrow, converts, registers=target.vector_registers)
        else:
            widen, crop = padding
            rows += -rows % ti
    loops = sch.get_loops(block)
    spatial = [l for l, k in zip(loops, kinds) if k == 0]
    reduce = [l for l, k in zip(loops, kinds) if k != 0]
    *outer, li, lj = spatial
    packed = pack is not False and not outer and tj % lanes == 0 and \
        _pack_panels(sch, block, rows, ti, tj, cfg, target, force=pack is True)
    shared = conv.b_shared(blk)  # a conv's filter: its panels outermost, reused by every row
    if shared and pack is not False and tj % lanes == 0:
        packed = conv.pack_computed_panels(sch, block, tj, lanes, cfg.parallel)
    io, ii = sch.split(li, [None, ti])
    jo, jv, jl = sch.split(lj, [None, tj // lanes, lanes]) if tj % lanes == 0 else (*sch.split(lj, [None, 1, tj]),)
    order = (jo, *outer, io) if shared else (*outer, jo, io)
    sch.reorder(*order, *reduce, ii, jv, jl)
    par = sch.fuse(*order)
    _parallel(sch, par, cfg)
    staged = False
    if widen is not None:
        reduce, staged = _widen_a(sch, widen, par, reduce, ti, target)
    if notes is not None:
        notes.append(f"{blk.name_hint}: register tile {ti} rows x {tj} columns"
                     + (" (tuned)" if tuned_tile else
                        f" ({'narrow operands: the wide tile' if narrow else 'fits the vector registers'})") + ","
                     " accumulated in registers over the whole reduction"
                     + (f"; rows padded to a multiple of {ti}" if crop is not None else "")
                     + (f"; B packed into panels of {tj} columns" if packed else "")
                     + (f"; packing {'on' if pack else 'off'} (tuned)" if pack is not None else "")
                     + ("; A converted to float32 per tile" if converts and staged else ""))
    # The tile accumulates in a buffer of its own that LLVM keeps in registers; accumulated in
    # the output itself, every step of the reduction loaded and stored the whole tile (16
    # stores for 16 FMAs: bound by the one store a cycle, ~30 GFLOPS of float32 on 2 Zen 3
    # cores). "global", not "local": TVM puts a global buffer under 1024 bytes on the stack
    # and calls its workspace allocator (and its free) for a local one at every tile (float32,
    # kernel alone, interleaved, global against local: [4096, 64] x [64, 64] 0.79x, [512, 64]
    # x [64, 64] 0.86x, 128 x 768 x 768 0.97x, 768^3 0.98x).
    wb = _try(sch.cache_write, block, 0, "global")
    if wb is not None:
        sch.reverse_compute_at(wb, par, preserve_unit_loops=True)
    if crop is not None and _done(sch.reverse_compute_at, crop, par, preserve_unit_loops=True):
        vectorize_innermost(sch, crop, target)
    if cfg.unroll:
        _try(sch.unroll, ii)
        _try(sch.unroll, jv)
    vector = tj >= 4
    if vector:
        # one register's lanes a loop: LLVM legalises a 24-lane vector with lane inserts, and
        # before decompose_reduction, since the update block alone is no reduction block (it
        # has no init) and TVM refuses to vectorise a loop over it
        _try(sch.vectorize, jl)
        if wb is not None:
            wl = sch.get_loops(wb)[-1]
            if tj % lanes == 0:
                wl = (_try(sch.split, wl, [None, lanes]) or [wl])[-1]
            _try(sch.vectorize, wl)
    init = _try(sch.decompose_reduction, block, reduce[0])
    if init is not None:
        iloops = sch.get_loops(init)
        if vector and iloops:
            _try(sch.vectorize, iloops[-1])
    return par  # the tile loop: plain_schedule computes the epilogue under it


def plain_schedule(low: Lowered, cfg: ScheduleConfig, target: Target, notes: list | None = None):
    """The schedule of `low` for `target` (its vector width, registers and caches); `notes`,
    when given, receives a line per contraction naming its tile."""
    tiles = {}  # contraction output buffer -> its parallel tile loop (epilogues go under it)
    sch, left = inline_injective(low, simplify="contract" in low.roles.values())
    packs = []
    for name in left:
        b = sch.get_sblock(name)
        role = low.roles.get(name, "elemwise")
        if role == "widen":
            continue  # placed by the contraction it feeds
        if role == "pack":
            packs.append(b)  # a conv's filter panels: laid out by the contraction first
            continue
        if role == "contract":
            out = sch.get(b).writes[0].source.name
            tile = _try(_contraction, sch, b, cfg, target, notes, low.roles)
            if tile is not None:
                tiles[out] = tile
        elif role == "reduce":
            _try(_reduction, sch, b, cfg, target)
        elif _try(_epilogue, sch, b, tiles, target) is None:
            _try(_spatial, sch, b, cfg, target)
    for b in packs:
        if not conv.pack_scheduled(sch, b):
            _try(_spatial, sch, b, cfg, target)
    return sch


def _reads_tile_directly(blk, region) -> bool:
    """Every index of the read is one of the block's iterators or a constant, and no iterator
    runs past the producer's extent: the consumer's region for one tile of the producer is then
    exactly a box, and the tiles cover every point of the consumer. A PadAkg's tail rows read
    no element of the producer, so reverse_compute_at, which iterates the consumer over the
    region each tile produced, would never write them."""
    extents = {iv.var: iv.dom.extent for iv in blk.iter_vars}
    for rng, dim in zip(region.region, region.source.shape):
        lo = rng.min
        if int(getattr(rng.extent, "value", 0)) != 1:
            return False
        if hasattr(lo, "value"):
            continue
        v = next((v for v in extents if lo.same_as(v)), None)
        ext, size = getattr(extents.get(v), "value", None), getattr(dim, "value", None)
        if ext is None or size is None or int(ext) > int(size):
            return False
    return True


def _epilogue(sch, block, tiles: dict, target: Target):
    """An elementwise consumer of a contraction runs inside the contraction's tile loop, on
    the tile just computed (still in L1), instead of a second pass over the whole result."""
    blk = sch.get(block)
    reads = {r.source.name: r for r in blk.reads}
    producer = next((n for n in tiles if n in reads), None)
    if producer is None:
        return None
    # Only when the consumer reads the tile through a permutation of its own iterators: TVM's
    # reverse_compute_at covers a reshaped (div/mod) read with a box larger than the tile and
    # would read elements no tile has produced yet.
    if not _reads_tile_directly(blk, reads[producer]):
        # A reshaped read (C[0, c, h*56 + w]): iterate the consumer in C's own index space
        # instead, when that is a bijection (it is for reshapes that split or merge dims).
        loads = []
        tvm_ffi.structural_walk(blk.body, [(ir.TensorLoad, loads.append)])
        index = next(ld.indices for ld in loads if ld.source.name == producer)
        sch.transform_block_layout(block, tirx.IndexMap([iv.var for iv in blk.iter_vars], list(index), None))
        blk = sch.get(block)
        if not _reads_tile_directly(blk, {r.source.name: r for r in blk.reads}[producer]):
            return None
    sch.reverse_compute_at(block, tiles[producer], preserve_unit_loops=True)
    vectorize_innermost(sch, block, target)
    return True
