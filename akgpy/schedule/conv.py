"""Convolution-shaped contractions in the register-tiled template (schedule/plain.py): a B the
same for every outer output index (a Conv2D's filter over n and h) and computed in the kernel
(the packed filter, te/builders.conv2d). Such a B is laid out as panels of one tile's columns
and its panel loop runs outermost, so the tiles of all output rows reuse a panel from L2."""
from __future__ import annotations

import tvm_ffi
from tvm import s_tir, tirx

_REFUSED = (s_tir.ScheduleError, ValueError, RuntimeError)


def _operands(blk) -> list:
    """(read index, region) of a contraction block's operands: its reads but the accumulator."""
    out = blk.writes[0].source
    return [(i, r) for i, r in enumerate(blk.reads) if not r.source.same_as(out)]


def b_shared(blk) -> bool:
    """B (the second operand) reads no outer spatial iterator (all but the last two): every
    outer index reads the same B, as a conv's output rows read the one filter."""
    reads = _operands(blk)
    spatial = [iv.var for iv in blk.iter_vars if int(iv.iter_type) == 0]
    if len(reads) != 2 or len(spatial) < 3:
        return False
    used = []
    for rng in reads[1][1].region:
        tvm_ffi.structural_walk(rng.min, [(tirx.Var, used.append)])
    return not any(u.same_as(v) for u in used for v in spatial[:-2])


def pack_computed_panels(sch, block, tj: int, lanes: int, parallel: bool) -> bool:
    """A B the kernel computes (the packed filter [kh, kw, c, O]) written as panels
    [O / tj, kh, kw, c, tj]: one tile's columns contiguous along the whole reduction, so a tile
    streams its panel instead of reading tj elements of a row O long at every step (a new page
    every step or two). Only where B's last index is the column iterator and the others are
    reduction iterators (the layout then is a bijection of B's elements)."""
    blk = sch.get(block)
    reads = _operands(blk)
    if len(reads) != 2:
        return False
    bidx, region = reads[1]
    b = region.source
    root = sch.get(sch.get_sblock("root"))
    if not any(b.same_as(a) for a in root.alloc_buffers) or len(b.shape) < 2 or int(b.shape[-1]) % tj:
        return False
    ivs = blk.iter_vars
    jv = [iv.var for iv in ivs if int(iv.iter_type) == 0][-1]
    red = [iv.var for iv in ivs if int(iv.iter_type) != 0]
    mins = [r.min for r in region.region]
    if not mins[-1].same_as(jv) or not all(any(m.same_as(v) for v in red) for m in mins[:-1]):
        return False
    panel = tirx.IndexMap.from_func(lambda *i: (i[-1] // tj, *i[:-1], i[-1] % tj), ndim=len(b.shape), index_dtype="int32")
    stage = next((p for p in sch.get_producers(block) if sch.get(p).writes[0].source.same_as(b)), None)
    if stage is None or len(sch.get_loops(stage)) != len(b.shape):
        return False
    try:
        sch.transform_layout(block, ("read", bidx), panel)
        # the copy walks the panels in their own order: one panel's tj rows of the filter at a
        # time (a few pages), where the filter's order read a row of all O filters (O pages) at
        # every step of its innermost loop
        sch.transform_block_layout(stage, panel)
    except _REFUSED:
        return False
    loops = sch.get_loops(stage)
    if parallel:
        sch.parallel(sch.fuse(*loops[:2]))
    ol = sch.split(loops[-1], [None, lanes])[-1] if tj % lanes == 0 and tj > lanes else loops[-1]
    sch.vectorize(ol)
    return True


def pack_scheduled(sch, block) -> bool:
    """Whether `pack_computed_panels` scheduled this pack block (its loops run in parallel or vector)."""
    return any(sch.get(l).kind != tirx.ForKind.SERIAL for l in sch.get_loops(block))
