"""Column reductions in blocks: the loop order of a sum of rows into one row of columns
(`out[j] = sum_k x[k, j]`, a bias gradient), which `tree._statement_band` runs with its vector
of columns outermost.

With one vector of columns per block, each step of the reduction reads that vector's bytes of
one row and jumps a whole row to the next: 32 bytes every 122 KB for bert's [1216, 30522]
float32 output-bias gradient, a new page each step. In blocks of a few KB of each row, with
several rows summed per step (the block's partials stay in L1; LLVM keeps each vector's partial
in a register across the rows of a step), the hardware prefetchers see long runs and each
partial is loaded and stored once per step. Standalone TVM kernels, 2 threads, Zen 4, [1216,
30464] of rows of 30522 float32: vectors of 8 columns 8.5-10.8 ms; blocks of 1088, 2176 and
4352 columns with 8 rows a step 5.3, 4.8 and 4.5 ms; blocks of 1088 one row a step 10.8 ms
(the rows per step are what pays); vectors of 16-64 columns one row a step 14 ms (rows that
start off a cache line split the wider loads). In akgpy, kernel alone, A/B: `~1222` 9.4 -> 5.9
ms, `case5` 11.6 -> 6.5 (2048 columns a block, 8 rows a step).
"""
from __future__ import annotations

import islpy as isl

from .access import array_size, extents
from .coalesce import extent_of
from .isl_util import maps_of

# input bytes of each row that one block of columns covers
COLUMN_BLOCK_BYTES = 8192
# rows summed per step of a block, the first that divides the reduction (else no blocks)
COLUMN_ROWS = (8, 4)
# at least this many blocks, so that they spread over the threads
MIN_COLUMN_BLOCKS = 8
# float64 registers of partials per op in a chunk of a column sum (chunk_rows); at most
# `TreeOptions.column_registers` (two cache lines of the input a row step)
CHUNK_REGISTERS = 4


def column_blocks(model, s, column: str, exprs, coincident, isolate: dict, opts, notes) -> bool:
    """Reorder a column reduction's band [k, floor(j / L), j mod L] (j = `column`, the vector of
    L lanes innermost) into [floor(j / B), floor(k / U), floor(j / L), k mod U, j mod L]: blocks
    of B columns outermost (parallel), U rows a step. `isolate` (the vector split's last full
    vector, when the row has a remainder) moves with its member. True when done; False leaves
    the band as it was: a summand whose arithmetic bounds it (`TreeOptions.heavy`: bert's
    [320, 21128] exp column sum ran 1.29x slower in blocks of 8 rows a step, its GELU chain
    column sum ~0750 1.03-1.11x), a vector that already spans two cache lines of the input
    (`TreeOptions.column_registers`: only a row with a remainder keeps a narrower one), no
    reduction of U rows, or too few columns for blocks wider than four vectors."""
    ex = exprs[s.name]
    if s.name in opts.heavy or len(ex) != 3 or coincident[0] or not (coincident[1] and coincident[2]):
        return False
    k, L = ex[0], extent_of(model, [s], exprs, 2)
    if L >= opts.lanes.get(s.name, 1) * opts.column_registers.get(s.name, 1):
        return False  # the vector already reads the two cache lines a row step asks for
    rows = next((u for u in COLUMN_ROWS if extent_of(model, [s], exprs, 0) % u == 0), 0)
    big = max(maps_of(s.reads), key=array_size, default=None)
    if not rows or big is None:
        return False
    bits = opts.array_bits.get(big.get_tuple_name(isl.dim_type.out), 32)
    ncols = extents(s)[s.dims.index(column)]
    B = min(COLUMN_BLOCK_BYTES * 8 // bits, ncols // MIN_COLUMN_BLOCKS) // L * L
    if B < 4 * L:
        return False
    exprs[s.name] = [f"floor(({column}) / {B})", f"floor(({k}) / {rows})", ex[1], f"({k}) mod {rows}", ex[2]]
    coincident[:] = [True, False, True, False, True]
    if 1 in isolate:
        isolate[2] = isolate.pop(1)
    notes.append(f"order: {s.name}: column blocks of {B} ({B * bits // 8} bytes of each input row) "
                 f"outermost (parallel), {rows} rows a step, vectors of {L} innermost")
    return True


def is_chunked_column_sum(s, coincident, last: int, opts) -> bool:
    """`s` is one chunk of rows of a column sum, the band [c, k, j]: a parallel chunk c of the
    rows (the prepass splits the rows of a sum over few columns so that the chunks spread over
    the threads), the reduction k over the chunk's rows, the columns j innermost."""
    return (s.kind == "update" and last == 2 and coincident[0] and not coincident[1] and coincident[2]
            and s.name not in opts.heavy)


def chunk_rows(model, s, exprs, coincident, isolate: dict, notes) -> bool:
    """Reorder a chunked column sum's band [c, k, floor(j / L), j mod L] (after the vector split,
    `CHUNK_REGISTERS` registers of L lanes) into [c, floor(k / U), floor(j / L), k mod U, j mod L]:
    U rows a step, so each vector of partials is loaded and stored once per U rows (LLVM keeps it
    in a register across the step) where one row a step loaded, converted, added and stored it
    for each row.

    wide&deep's [16000, N] float16 -> float32 column sums (8 chunks of 2000 rows; AVX2, 2
    threads, kernel alone, interleaved, 41 runs): LLC-resident, N = 512 0.60 -> 0.29 ms and N =
    1024 1.30 -> 0.91 (one register a row step 0.43 and 1.00); read from memory 0.63-0.71x for
    N = 128-512, 0.94-0.96x for N = 1024. True when done; False (no U dividing the chunk's rows,
    or a remainder vector of columns) leaves the band as it was."""
    ex = exprs[s.name]
    if len(ex) != 4 or isolate:
        return False
    k = extent_of(model, [s], exprs, 1)
    rows = next((u for u in COLUMN_ROWS if k % u == 0), 0)
    if not rows:
        return False
    L = extent_of(model, [s], exprs, 3)
    exprs[s.name] = [ex[0], f"floor(({ex[1]}) / {rows})", ex[2], f"({ex[1]}) mod {rows}", ex[3]]
    coincident[:] = [True, False, True, False, True]
    notes.append(f"order: {s.name}: {rows} rows of its chunk a step, vectors of {L} columns innermost")
    return True
