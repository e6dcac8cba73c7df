"""Statement rewrites that run before the polyhedral model is built (as AKG's passes before
its poly pass do): they change *which statements exist*, which a schedule cannot.

- inlining (plain.inline_injective): injective blocks become expressions in their consumers;
- row-reduction rfactor: a reduction whose innermost loop walks its input with stride 1
  accumulates into L partial sums (L = vector lanes of the accumulator, more for vector
  math: `wide_partials`; halved until it divides the row) and a short final
  reduction adds them, so the long loop is a vector loop over the L partials. The partials
  keep the accumulator dtype (float64 for float sums), so the result is as exact as before.
"""
from __future__ import annotations

from math import prod

from tvm import ir, s_tir, tirx
from tvm_ffi import structural_walk

from ..te import fastmath
from ..target import Target
from .config import ScheduleConfig
from .plain import contiguous_iter, tvm_dtype_bits


# ScheduleConfig.math_registers bounds the float32 registers of vector math that one step of a
# row reduction's partial sums covers: they must divide the row in two steps or more. Each
# element's exp/log is a chain of ~40 dependent ops, and a step of one register left the core
# waiting on latency; with more independent registers per step a softplus row sum (one thread,
# cache-resident) ran 49 -> 42 cycles per 16 elements at rows of 240 (3 registers), 59 -> 43 at
# 256 (4 instead of 2), 49 -> 46 at 192 (4 instead of 2).
# ACROSS_ROWS: partials that also sum over other reduced axes (a full sum over [.., 3, 80]) add
# up their lanes once per kernel, not once per row, so they take more registers
# (ScheduleConfig.sum_math_registers) and may cover a whole row: 80 lanes instead of 16 ran a
# yolo-style loss sum [32, 26, 26, 3, 80] 2.21 -> 1.60 ms, rows of 96 and 128 2.22 -> 1.69 and
# 2.11 -> 1.58 (8 registers against 4, 2 threads); a plain row sum lost with 8 (rows of 256:
# 0.62 -> 0.83 ms, its 128 partials summed per row), so it keeps math_registers. Two rows per
# result already pay (ACROSS_ROWS): [16384, 3, 80] and [65536, 2, 64] summed over their last
# two axes 1.83 -> 1.72 and 3.66 -> 3.03 ms with 2 against 8 as the floor, yolo ~2380 (whose
# chunked sums cover 3 rows each) 8.8 -> 8.0.
ACROSS_ROWS = 2


def wide_partials(block) -> bool:
    """Float64 partial sums of float32-or-narrower vector math (te/fastmath.py's exp/log/tanh):
    at least twice the lanes (up to ScheduleConfig.math_registers float32 registers), so the math runs at full
    register width and several add chains are in flight (yolo loss graph 22.1 -> 15.2 ms at two,
    A/B). A plain cast-sum lost 30% that way, so only for math."""
    if len(block.writes) != 1:
        return False
    acc = block.writes[0].source
    src = [tvm_dtype_bits(r.source.dtype) for r in block.reads if not r.source.same_as(acc)]
    return tvm_dtype_bits(acc.dtype) == 64 and bool(src) and max(src) <= 32 and uses_vector_math(block)


def uses_vector_math(block) -> bool:
    """Does the block compute te/fastmath.py's exp/log/tanh (their lets name it)?"""
    lets: list[str] = []
    structural_walk(block.body, [(tirx.Let, lambda n: lets.append(n.var.name))])
    return fastmath.LET_NAME in lets


def _loop_scalars(sch, names: list[str]) -> None:
    """A unit loop around every block that has none (a 0-d result: a full sum, keep_dims off).
    TVM's rfactor fails an internal check (`block_realize == old_block_realize_`) on any block
    of a function that holds a block directly under the root, so a full sum to a 0-d output
    stayed a scalar loop: 690 cycles per 16 elements of a softplus sum, against 43 with the
    [1]-shaped output of keep_dims."""
    for name in names:
        try:
            block = sch.get_sblock(name)
        except (s_tir.ScheduleError, ValueError):
            continue
        if not sch.get_loops(block):
            sch.add_unit_loop(block)


def _int(e) -> int:
    """A loop or iterator extent as an int (0 when it is not a constant)."""
    return int(e.value) if hasattr(e, "value") else 0


def rfactor_rows(sch, names: list[str], roles: dict[str, str], cfg: ScheduleConfig, target: Target) -> list[str]:
    """rfactor every stride-1 row reduction in `names`; the names of the blocks rewritten."""
    done = []
    if any(roles.get(n) == "reduce" for n in names):
        _loop_scalars(sch, names)
    for name in names:
        if roles.get(name) != "reduce":
            continue
        try:
            block = sch.get_sblock(name)
        except (s_tir.ScheduleError, ValueError):
            continue
        blk = sch.get(block)
        loops = sch.get_loops(block)
        kinds = [int(iv.iter_type) for iv in blk.iter_vars]
        if len(loops) != len(kinds) or not kinds or kinds[-1] != 2 or len(blk.writes) != 1:
            continue
        if contiguous_iter(blk) != len(kinds) - 1:  # the innermost loop must walk the input
            continue
        acc_bits = tvm_dtype_bits(blk.writes[0].source.dtype)
        lanes = max(target.vector_bytes * 8 // max(acc_bits, 8), 1)
        ext = _int(sch.get(loops[-1]).extent)
        steps = 2  # a partial sum's fewest terms per row: one would only copy the row
        # the terms each partial takes per point of the row: the other reduced axes' points
        others = prod(_int(iv.dom.extent) for iv in blk.iter_vars[:-1] if int(iv.iter_type) == 2)
        if wide_partials(blk) and ext >= 4 * lanes:
            # whole float32 registers of math per step: up to cfg.math_registers and two steps a
            # row; where the partials also sum over other reduced axes (a full sum), up to
            # cfg.sum_math_registers and one step a row (ACROSS_ROWS above)
            step = 2 * lanes
            if others >= ACROSS_ROWS:
                regs, steps = cfg.sum_math_registers, 1
            else:
                regs = cfg.math_registers
            lanes = max([lanes] + [m for m in range(step, min(step * regs, ext // steps) + 1, step) if ext % m == 0])
        while lanes >= 8 and ext % lanes:
            lanes //= 2  # rows of 1000: 8 partials, half a float32 register, not a scalar chain
        # a row of exactly `lanes` still splits when other reduced axes give each partial its
        # terms: a max over an NZ tile's [32, 16] (the 16 contiguous) is 16 partials of 32 terms,
        # not a scalar chain (the NZ softmaxes ~1580 and ~1004 ran their 100M-element max scalar)
        if lanes < 4 or ext * others < steps * lanes or ext % lanes:
            continue
        try:
            _, ki = sch.split(loops[-1], [None, lanes])
            sch.rfactor(ki, factor_axis=kinds.count(0))
            done.append(name)
        except (s_tir.ScheduleError, ValueError, RuntimeError):
            continue
    return done


# A sum down the rows of a computed [N, ...] value (a bias gradient: bert's GELU backward sums
# its float16 result over 2048 rows) ran as two nests: the producer wrote its output, and the
# sum read it back from memory. Here the rows are cut into CHUNK_THREADS chunks per thread, each
# chunk's rows into blocks of about BLOCK_BYTES of the producer's output; the sum becomes
# per-chunk partial rows (rfactor over the chunks) and the producer's domain (chunk, block, row,
# ...), so that the tree passes run both under shared (chunk, block) loops: a block's rows are
# computed, then summed from cache. Hand-written TIR of that structure against the two nests
# (bert ~0750, kernel alone, LLC flushed, 2 threads): 0.71-0.79x with 4 chunks, blocks of 16-32
# rows; 0.82x at 64 rows, 0.90x at 128; one partial update per produced row instead of blocks:
# 0.96-0.99x (and 1.10x with the inputs cached).
CHUNK_THREADS = 2
BLOCK_BYTES = 96 * 1024
MIN_BLOCK_ROWS = 8  # rows summed per visit of the partials: the sum's runs (targets/sum_runs.py)
# the producer's output must be worth not reading back: more than the caches keep between nests
MIN_CHUNKED_BYTES = 8 << 20


def _producer(sch, names: list[str], buf):
    """The block among `names` writing `buf` element by element (its iter vars are the indices)."""
    for name in names:
        try:
            blk = sch.get(sch.get_sblock(name))
        except (s_tir.ScheduleError, ValueError):
            continue
        if len(blk.writes) != 1 or not blk.writes[0].source.same_as(buf):
            continue
        if blk.init is not None or any(int(iv.iter_type) != 0 for iv in blk.iter_vars):
            return None
        stores = []
        structural_walk(blk.body, [(tirx.BufferStore, stores.append)])
        if len(stores) != 1 or len(stores[0].indices) != len(blk.iter_vars) or not all(
                i.same_as(iv.var) for i, iv in zip(stores[0].indices, blk.iter_vars)):
            return None
        return name, blk
    return None


def _column_sum(sch, name: str, names: list[str]):
    """(producer name, producer block, rows) when block `name` sums a kept producer's output down
    its first dim (out[j...] = sum_k P[k, j...], P computed by a block of `names`), else None."""
    blk = sch.get(sch.get_sblock(name))
    kinds = [int(iv.iter_type) for iv in blk.iter_vars]
    if blk.init is None or len(blk.writes) != 1 or kinds.count(2) != 1:
        return None
    acc = blk.writes[0].source
    loads = []
    structural_walk(blk.body, [(ir.TensorLoad, loads.append)])
    src = [ld for ld in loads if not ld.source.same_as(acc)]
    if len(src) != 1:
        return None
    ld = src[0]
    k = blk.iter_vars[kinds.index(2)].var
    spatial = [iv.var for iv, kind in zip(blk.iter_vars, kinds) if kind == 0]
    if len(ld.indices) != len(spatial) + 1 or not ld.indices[0].same_as(k) or not all(
            i.same_as(v) for i, v in zip(ld.indices[1:], spatial)):
        return None
    found = _producer(sch, names, ld.source)
    if found is None:
        return None
    pname, pblk = found
    rows = _int(blk.iter_vars[kinds.index(2)].dom.extent)
    if [_int(iv.dom.extent) for iv in pblk.iter_vars] != [rows] + [_int(iv.dom.extent) for iv, kind in
                                                                   zip(blk.iter_vars, kinds) if kind == 0]:
        return None
    return pname, pblk, rows


def chunk_column_sums(sch, names: list[str], roles: dict[str, str], target: Target) -> dict[str, str]:
    """Cut each column sum of a large computed value into per-chunk partials (see CHUNK_THREADS,
    per thread of `target.threads`: the target's, not the compiling process's environment);
    the partials' block -> its producer's block, for each one cut."""
    done = {}
    for name in names:
        if roles.get(name) != "reduce":
            continue
        try:
            found = _column_sum(sch, name, names)
        except (s_tir.ScheduleError, ValueError):
            continue
        if found is None:
            continue
        pname, pblk, rows = found
        out = pblk.writes[0].source
        row_bytes = tvm_dtype_bits(out.dtype) // 8 * prod(_int(e) for e in out.shape[1:])
        if row_bytes * rows < MIN_CHUNKED_BYTES:
            continue
        least = CHUNK_THREADS * target.threads
        chunks = next((c for c in range(least, min(rows, 4 * least) + 1) if rows % c == 0), 0)
        per = rows // chunks if chunks else 0
        block = max((r for r in range(MIN_BLOCK_ROWS, per + 1, MIN_BLOCK_ROWS)
                     if per % r == 0 and r * row_bytes <= BLOCK_BYTES), default=0)
        if not block or per // block < 2:
            continue
        try:  # both steps are legal on their own: a failure of the second leaves a plain rfactor
            blk = sch.get_sblock(name)
            loops = sch.get_loops(blk)
            kinds = [int(iv.iter_type) for iv in sch.get(blk).iter_vars]
            c, _, _ = sch.split(loops[kinds.index(2)], [chunks, per // block, block])
            rf = sch.rfactor(c, factor_axis=0)
            rows_of = tirx.IndexMap.from_func(
                lambda *ix: (ix[0] // per, ix[0] % per // block, ix[0] % block, *ix[1:]), ndim=len(pblk.iter_vars))
            sch.transform_block_layout(pname, rows_of)
            done[sch.get(rf).name_hint] = pname
        except (s_tir.ScheduleError, ValueError, RuntimeError):
            continue
    return done
