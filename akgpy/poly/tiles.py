"""Tile shapes for transposes: the cache-model tile, the register-transpose tile, and the
vector split of a tile's point loops. `tree.py` places them in the schedule tree."""
from __future__ import annotations

import math
from typing import NamedTuple

import islpy as isl

from .access import big_accesses, extents, pow2_at_least, pow2_lanes, stride1_dim, write_order
from .isl_util import maps_of


def cache_tile(opts, n: int, exts: list[int]) -> tuple[int, ...]:
    """Largest power-of-two tile, t in each of the n tiled members, whose footprint in the two
    arrays a transpose touches fits half of L1."""
    t = 4
    while 2 * (2 * t) ** n * opts.elem_bytes <= opts.l1_bytes // 2:
        t *= 2
    return tuple(min(t, e) for e in exts[:n])


class Plan(NamedTuple):
    """A register-transpose tile (`transpose_plan`)."""
    r: int  # the read's stride-1 dim
    rows: list[int]  # the written dims after it, in write order
    W: int
    R: int
    sizes: dict[int, int]  # dim -> tile size
    partial: dict[int, int]  # dim -> its last full tile, where the tile does not divide it


# vector registers the in-register transpose's input tile may fill (of 32 on AVX-512): a
# [16, 256, 4096] float32 transpose ran 8.5 ms with 16, 14.6 ms with 32 (spills)
TRANSPOSE_REGISTERS = 16


def register_transpose_tile(stmts, exprs, coincident, opts, notes, where):
    """A copy out[perm(i)] = in[i] (maybe cast) whose read and written stride-1 dims differ is
    tiled so that code generation can transpose each tile in registers
    (`schedule/transpose.py`): W elements along the read rows (one vector load each) by R rows,
    the written dims after the read's stride-1 dim in the output (9 for
    [.., 3, 3, 512] -> [.., 512, 3, 3], so every tile's output is one contiguous block). Every
    tile full, except where the rows take a power of two that does not divide their dim
    (`_partial_rows`): isl's AST then runs the last tile along it apart, with its own constant
    extent. The point loops run the rows, then the W elements. (texprs, coincident, tile
    sizes, isolate: {tile member: its last full tile}) or None."""
    if len(stmts) != 1:
        return None
    s = stmts[0]
    names = exprs[s.name]
    if (plan := transpose_plan(s, names, coincident, opts)) is None:
        return None
    r, rows, W, R, size, partial = plan
    K = [r] + [d for d in rows]
    members = [names.index(s.dims[d]) for d in K]
    rest = [q for q in range(len(names)) if q not in members]
    point = [d for d in rows] + [r]
    # the tile loops: the read run's outermost, unless it is the longer run; then the row tiles
    # go outermost and consecutive tiles continue along the read rows. NCHW -> NHWC float16
    # (read run H*W, written run C), kernel alone, interleaved, two sweeps: ~9919 0.60-0.77x,
    # ~1652 0.65-0.80, ~4214 0.70-0.85, ~4409 0.79-0.83; NHWC -> NCHW (~3350, ~8134, ~3330) ran
    # 1.2-1.8x slower that way, and keeps the read run outermost; 53 corpus graphs change, 0.95x
    ext = extents(s)
    tiles = point if ext[r] > math.prod(ext[d] for d in rows) else K
    texprs = {s.name: [names[q] for q in rest] + [f"floor(({s.dims[d]}) / {size[d]})" for d in tiles]
              + [s.dims[d] for d in point]}
    isolate = {len(rest) + tiles.index(d): last for d, last in partial.items()}
    notes.append(f"transpose: {where}: {s.dims[r]} (read with stride 1) x {[s.dims[d] for d in rows]} "
                 f"(written after it) tiled {[size[d] for d in K]}; each tile ({W} x {R}) is transposed "
                 "in registers" + "".join(f"; the last tile along {s.dims[d]} ({ext[d] % size[d]} rows) runs apart"
                                          for d in partial)
                 + ("; row tiles outermost (the read run is the longer)" if tiles != K else ""))
    return texprs, [True] * len(texprs[s.name]), tuple(size[d] for d in point), isolate


def transpose_plan(s, names, coincident, opts):
    """The register-transpose tile (a Plan) of statement `s` whose band runs the dims `names`,
    or None."""
    reads, writes = maps_of(s.reads), maps_of(s.writes)
    if s.name not in opts.copies or len(reads) != 1 or len(writes) != 1 or not all(coincident):
        return None
    r, w = stride1_dim(reads[0]), stride1_dim(writes[0])
    order = write_order(writes[0])
    if r is None or w is None or r == w or order is None or s.dims[r] not in names:
        return None
    rows = [d for d in order[order.index(r) + 1:] if s.dims[d] in names]
    ext = extents(s)
    line = line_elements(s, opts) if opts.streams else 1  # where whole lines matter
    lanes = opts.lanes.get(s.name, 1)
    if (narrow := opts.transpose_lanes.get(s.name)) and ext[r] % narrow == 0:
        tile = _register_tile(narrow, r, rows, ext, line)  # narrower registers only where each tile's rows fill them
        # a streamed output needs tiles of whole lines, which a narrow tile may not give: yolo
        # [.., 3, 3, 512] -> [.., 512, 3, 3] float16 (~1373) 8 x 9 tiles store 144 bytes, 32 x 9
        # store 9 lines: 6.6 -> 5.3 ms, Zen 4, 2 threads, interleaved; 16 x 9 (288 bytes) 7.5
        if tile is not None and line > 1 and not _whole(tile, rows, ext, line):
            wide = _register_tile(lanes, r, rows, ext, line)
            tile = wide if wide is not None and _whole(wide, rows, ext, line) else tile
    else:
        tile = _register_tile(lanes, r, rows, ext, line)
    if tile is None:
        return None
    W, R, sizes, partial = tile
    if R < 2:
        return None
    return Plan(r, rows, W, R, {r: W, **sizes}, partial)


def _register_tile(lanes, r, rows, ext, line):
    """_best_width's (W, R, sizes, partial) for registers of `lanes` elements, or None."""
    W = pow2_lanes(ext[r], lanes)
    widths = [W]
    if W < max(4, lanes // 2):  # else rows that divide the extent, up to two registers (52: LLVM
        # splits 32 + 16 + 4) and down to 4 elements (13 x 13 maps had no register transpose)
        widths = [d for d in range(2 * lanes, 3, -1) if ext[r] % d == 0]
    if not widths or not rows:
        return None
    # the tile's shorter side is the length of its vector loads or stores: a narrower width
    # that divides the row may leave registers for more rows (yolo [32, 255, 52, 52] float16
    # -> NHWC: 52 x 5 stored 10-byte pieces, 26 x 15 stores 30 bytes)
    best = _best_width(widths, lanes, rows, ext, line)
    # a streamed output whose tiles of these widths leave partial lines (3 channels: 16 x 3
    # float16 is 96 bytes) takes a wider tile along the read rows that fills whole ones (64 x 3:
    # six lines), so its stores stream: vgg's [64, 3, 224, 224] float32 -> NHWC float16 (~3714),
    # kernel alone, interleaved, three runs: 0.75-0.84x
    # Failing that, a narrower one: its rows may then reach a whole line within the registers.
    # yolo's [32, 256, 52, 52] float16 -> NHWC (8-byte xmm rows): 8 x 16 tiles store 32 bytes a
    # row, 4 x 32 store whole lines. Kernel alone, interleaved, the 6 corpus graphs this changes
    # (2 threads, Zen 3): the plain transposes 0.67-0.73x, after an elementwise producer
    # 0.88-0.94x (~4991 0.89-0.94x)
    if line > 1 and not _whole(best, rows, ext, line):
        wider = [w * k for w in widths for k in (2, 4) if ext[r] % (w * k) == 0]
        narrower = [w for w in range(min(widths) - 1, 3, -1) if ext[r] % w == 0]
        for other in (wider, narrower):
            got = _best_width(other, lanes, rows, ext, line) if other else None
            if got is not None and _whole(got, rows, ext, line):
                return got
    return best


def line_elements(s, opts) -> int:
    """Elements of the statement's widest written array in one cache line."""
    bits = max(opts.array_bits.get(m.get_tuple_name(isl.dim_type.out), 32) for m in maps_of(s.writes))
    return LINE_BYTES * 8 // bits


def _row_budget(W, lanes) -> int:
    """Rows of W elements that TRANSPOSE_REGISTERS registers of `lanes` elements hold."""
    return TRANSPOSE_REGISTERS // -(-W // lanes)


def _rows_for(W, budget, rows, ext):
    """(R, {written dim: its tile size}) for W-element rows: as many rows as `budget` allows."""
    R, sizes = 1, {}
    for d in reversed(rows):  # innermost written dim first; past a partial one rows would not be contiguous
        t = max((k for k in range(1, ext[d] + 1) if ext[d] % k == 0 and R * k <= budget), default=1)
        sizes[d], R = t, R * t
        if t < ext[d]:
            break
    return R, {d: sizes.get(d, 1) for d in rows}


def _partial_rows(W, budget, rows, ext):
    """(W, R, sizes, {dim: its last full tile}): R, the largest power of two of rows the budget
    holds, along the innermost written dim although R does not divide it; the last tile,
    shorter, runs apart (a single row as plain loops). None when R divides the dim (_rows_for
    finds it) or the dim holds no more than one tile."""
    d = rows[-1]
    R = 1 << (budget.bit_length() - 1)
    if R < 4 or ext[d] <= R or ext[d] % R == 0:
        return None
    return W, R, {q: (R if q == d else 1) for q in rows}, {d: ext[d] // R - 1}


def _whole(tile, rows, ext, line) -> bool:
    """The (full) tile's stores fill whole lines: each of its W pieces is whole lines, or its
    rows are whole (the tile's output is one block of W x R elements) and so is the block."""
    W, R, sizes, _ = tile
    return R % line == 0 or (all(sizes[d] == ext[d] for d in rows) and W * R % line == 0)


# a transpose tile side this long (in elements) is long enough: past it the larger tile wins
SHORT_SIDE = 8
LINE_BYTES = 64


def _best_width(widths, lanes, rows, ext, line):
    """(W, R, sizes, partial) for one of `widths`, R as many rows as TRANSPOSE_REGISTERS hold.
    First, where the output streams (`line` > 1: elements per cache line), a tile whose stores
    fill whole lines (`_whole`): partial-line stores cannot stream and read each line before
    writing it. For that
    a row narrower than a register may count as part of one (13 float16 are 26 bytes), up to
    `line` rows, and a power-of-two row wins (one load; 13 lanes are 8 + 4 + 1). NCHW -> NHWC
    float16 [32, 256, 52, 52], streamed (interleaved): after an elementwise producer (yolo
    ~4991) 52 x 8 tiles 9.0 ms, 13 x 32 6.4, 4 x 32 6.0; alone 52 x 8 5.5, 13 x 32 6.5,
    4 x 32 2.9. Then the tile whose shorter side is longer, up to SHORT_SIDE, then the larger
    tile, then the one with more rows: each of the W stores writes R contiguous elements, and
    longer pieces cost fewer partial lines (26 x 16 against 52 x 8, not streamed, Zen 4,
    interleaved: 17 NCHW -> NHWC shapes, float16/32, alone 0.73-0.98x, after an elementwise
    producer 0.90-1.02x; on Zen 5 yolo ~4991, producer-fed, had gone 8.5 -> 9.0 ms)."""
    tiles = []
    for w in widths:
        tiles.append((w, *_rows_for(w, _row_budget(w, lanes), rows, ext), {}))
        if line > 1 and pow2_at_least(w) * line <= TRANSPOSE_REGISTERS * lanes:
            t = (w, *_rows_for(w, line, rows, ext), {})
            if _whole(t, rows, ext, line):
                tiles.append(t)

    def rank(t):
        w = _whole(t, rows, ext, line)
        one_load = w and line > 1 and t[0] == pow2_at_least(t[0])
        return w, one_load, min(t[0], t[1], SHORT_SIDE), t[0] * t[1], t[1]
    best = max(tiles, key=rank)
    # then more rows at the same width where the rows' dim has no divisor that fills the
    # registers, the last tile shorter: 255 = 15 x 16 + 15, 85 = 10 x 8 + 5 (yolo's 3 x 85
    # channels). Stores of R lanes, a power of two, not 15 or 5. Kernel alone, interleaved, 5
    # rounds, Zen 4, the 18 corpus graphs this changes: geomean 0.76x, ~4214 26 x 15 -> 26 x 16
    # 0.37x, ~6989 0.49x, ~9919 52 x 5 -> 52 x 8 0.62x, worst 1.06x. A wider tile to gain rows
    # ran slower where it changed W (17 x 13 -> 51 x 8, producer-fed, 1.08-1.29x): W stays.
    W = best[0]
    part = _partial_rows(W, _row_budget(W, lanes), rows, ext)
    if part is not None and part[1] > best[1] and _whole(part, rows, ext, line) >= _whole(best, rows, ext, line):
        return part
    return best


def vector_tile(stmts, texprs, tco, K, sizes, exts, opts, notes, where) -> bool:
    """Vectorise a transpose tile's point loops. Along the written array's stride-1 member when
    its tile holds a register (contiguous stores, gathered loads), else along the member a
    big read walks with stride 1 (contiguous loads, scattered stores: [.., 9, 512] -> [.., 512, 9]
    has rows of 9 to write). That member moves innermost among the point loops, which any
    order of a permutable tile allows. True when done (the last member is the vector)."""
    lanes = min(opts.lanes.get(s.name, 1) for s in stmts)
    n, base = len(K), len(tco) - len(K)
    if lanes < 4 or not all(tco[base:]):
        return False

    def fits(k) -> int:  # every tile, the last one too, a whole number of registers
        L = pow2_lanes(math.gcd(sizes[k], exts[k]), lanes)
        return L if L >= max(4, lanes // 2) else 0

    def walks(k, maps_of_s) -> bool:
        return all(any(stride1_dim(m) == s.dims.index(texprs[s.name][base + k]) for m in maps_of_s(s))
                   for s in stmts)
    k, L, how = n - 1, fits(n - 1), "written"
    if not (L and walks(k, lambda s: maps_of(s.writes))):
        reads = [j for j in range(n - 1) if fits(j) and walks(j, big_accesses)]
        if not reads:
            return False
        k, L, how = reads[0], fits(reads[0]), "read"
    order = [j for j in range(n) if j != k] + [k]
    for s in stmts:
        pts = [texprs[s.name][base + j] for j in order]
        texprs[s.name][base:] = pts[:-1] + [f"floor(({pts[-1]}) / {L})", f"({pts[-1]}) mod {L}"]
    tco[base:] = [True] * (n + 1)
    notes.append(f"vector: {where}: tile member {K[k]} ({how} with stride 1) innermost, split by {L} lanes")
    return True
