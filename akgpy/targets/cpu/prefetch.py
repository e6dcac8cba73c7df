"""Software prefetch of the arrays a loop streams through, a fixed distance ahead.

A loop with much arithmetic per element (yolo's loss ~2380: exp, log and a float64 sum, ~70
vector instructions per 64-byte line of each input) holds only a few iterations in the core's
out-of-order window, so only a few lines are in flight; the hardware prefetchers did not make
up for it on the 2-core Xeon VM this was measured on (LLC-resident data): ~2380 took 105 cycles
per vector with its 218 MB of inputs and 45 with 7 MB. Cheap loops lose too when they read a
quarter line per iteration (wide&deep's column sum ~7135 of float16 into float64 lanes).
With a `prefetch` 2 KiB ahead of each such read, ~2380 went from 35.9 to 15.2 ms and ~7135
from 3.44 to 2.29 ms (2 threads, kernel alone, interleaved).

The prefetched address is the one the load reads some iterations later along the innermost
loop whose variable moves it (its coefficient, from the lowered index): the distance over the
bytes each iteration newly reads, which for a strided walk (a column sum: rows apart) is one
vector's lines per step, so bert's GELU ~0750, summing a 12 MB output down its columns, looks
16 rows ahead (kernel 6.2 -> 4.1 ms; the hardware prefetchers do not follow 6 KiB strides).
When the loop is short and the outer loops continue the same stream (the common case after
the schedule's loop coalescing), the linear extrapolation is still the address read next.
Only stride-1 vector loads of kernel arguments qualify, and not those of an argument the same
loop nest writes (read back from cache), nor reads spanning under 32 KiB over the nest (a bias
row), nor a region an earlier loop read in the same iteration of an enclosing loop (a
layernorm's second pass over its row, when that region is under REREAD_BYTES); a scalar load
would issue one prefetch per element.
A vector of several lines gets one prefetch per line.

Copies (a store of loads, shuffled, cast or broadcast, also through let-bound variables: the
rows a register transpose loads) whose innermost loop walks a run shorter than the distance
that the enclosing loop does not continue (a tile's rows) are prefetched at the next run
instead: the same place one step (or more, until the step's runs cover the distance) of the
enclosing loop later. Along the innermost loop the look-ahead would land in rows the step reads
anyway, and each run's first lines came from memory as they were needed: yolo's seven
[1024, 9, 512] float16 transposes (~1373, 1 KiB rows, 8 x 9 tiles) took 5.6 ms, 3.8 with the
next step's rows prefetched (kernel alone, LLC flushed, interleaved A/B, 2 threads); the 34
corpus graphs this changes, all transposes, 0.60-1.05x (geomean 0.81; docs/poly.md). Long
rows of a register transpose (yolo's 52 x 52 planes, 5.4 KiB) get no prefetch: the hardware's
prefetchers follow them, and prefetching along them cost 1.14-1.16x.

A store that computes counts the loads of the let-bound values it uses as its own: TVM binds
common subexpressions to variables, and a float64 sum binds its widened term once for the
stores that add its parts into their lanes, so the loss loops of yolo's ~2380 and ~3153 (exp,
log and a float64 sum per element) had no prefetch at all. Kernel alone, LLC flushed,
interleaved, 2 threads: ~2380 0.80-0.81x (also with the inputs cached), ~3153 0.90x (1.00x
cached); an earlier measurement had read ~2380 1.03-1.05x slower with them, which two A/Bs
here did not reproduce. A region counts as read before under whichever view it was read:
flattening declares a view of an argument per loop nest (input_0_flat0, input_0_flat1), and
yolo's ~5495 reads three inputs in a reduction after an elementwise loop read them; taken for
other memory, they cost 11 needless prefetches and 1.04x.

Stores get the same look-ahead as a write prefetch (PREFETCHW): a line written that is not in
cache is first read for ownership, and a loop heavy in arithmetic keeps few of those reads in
flight just as it does loads. Bert's GELU backward ~0750 writes its float16 output for a later
loop nest to sum down its columns, so it cannot stream: kernel alone, LLC flushed between calls,
interleaved, 0.90-0.92x. Not for copies (nothing to hide a miss behind), nor for an output that
may stream (marked and, once targets/cpu/stream_stores.py forwards the reads of just-stored
vectors, read by no loop of the kernel): its prefetch would count as a read back and stop it.

Prefetch is a hint: an address past an array's end does not fault (x86 PREFETCHh, AArch64
PRFM), so the last iterations need no guard; a look-ahead beyond the whole range the nest
reads is dropped. (TVM's address is an `inbounds` GEP, poison past the end; `llvm.prefetch`
of it has no effect on results either way.)
"""
from __future__ import annotations

import math

import tvm
import tvm_ffi
from tvm import ir, tirx

from ..rewrite import inline_lets, is_one, lanes, let_values, linear_coefficients
from .stream import ATTR as STREAM_ATTR
from .stream import PREFETCH_ATTR as ATTR
from .stream_stores import forward_stored

LINE = 64
MAX_LINES = 8  # per load: a register chain of 128 float16 lanes spans 4 lines
REUSED_BYTES = 32 << 10  # a read spanning less than L1 over the whole nest stays cached: a bias row
REREAD_BYTES = 256 << 10  # what an earlier loop of the same iteration read is still cached below this
_BUFFER_DATA = tvm.ir.Op.get("tirx.buffer_data")  # a view's data: that of the buffer it views


def _span(coeffs, loops) -> float:
    """Elements between the first and last that a linear read walks over the loops (inf when an
    extent is not constant)."""
    total = 0
    for c, (_, extent) in zip(coeffs, loops):
        if not isinstance(extent, tirx.IntImm):
            return math.inf
        total += abs(c) * (int(extent.value) - 1)
    return total


def _copied(value, lets):
    """For a store that only moves data (loads, maybe through let-bound variables, shuffled,
    cast or broadcast: a register transpose binds each row it loads to a variable and stores
    shuffles of them), the loads it reaches through those variables; None when the value
    computes something."""
    bound, seen = [], []

    def go(e, via_let: bool) -> bool:
        if isinstance(e, ir.TensorLoad):
            if via_let:
                bound.append(e)
            return True
        if isinstance(e, tirx.Var):
            if any(e.same_as(s) for s in seen):
                return True
            seen.append(e)
            return e in lets and go(lets[e], True)
        if isinstance(e, tirx.Shuffle):
            return all(go(v, via_let) for v in e.vectors)
        if isinstance(e, (tirx.Cast, tirx.Broadcast)):
            return go(e.value, via_let)
        return False
    return bound if go(value, False) else None


def _bound_loads(value, lets) -> list:
    """The loads in the let-bound values that `value` uses, directly or through other let-bound
    values: TVM binds common subexpressions to variables, and a float64 sum binds its widened
    term (`acc_in`) once for the several stores that add its parts into their lanes."""
    found, seen = [], []

    def on_var(v) -> None:
        if v in lets and not any(v.same_as(s) for s in seen):
            seen.append(v)
            tvm_ffi.structural_walk(lets[v], [(ir.TensorLoad, found.append), (tirx.Var, on_var)])
    tvm_ffi.structural_walk(value, [(tirx.Var, on_var)])
    return found


def _next_run(got, loops, el, group, distance):
    """Elements ahead for a read whose innermost loop walks a run shorter than `distance` that
    the enclosing loop does not continue (a row of a tile: a transpose reads 9 rows of 1 KiB per
    step of its outer loop, 9 KiB apart from the next step's): the same place one or more steps
    of the next enclosing loop that moves it later, so many that the `group` of reads with the
    same loop coefficients covers `distance` bytes. Along the innermost loop the look-ahead would
    land in rows this step reads anyway; each step's first lines would come from memory as they
    are needed. None where the run is long enough, or continued by the enclosing loop."""
    moving = [(c, e) for c, (_, e) in zip(got[:-1], loops) if c]
    if len(moving) < 2 or not all(isinstance(e, tirx.IntImm) for _, e in moving[-2:]):
        return None
    (outer, steps), (inner, extent) = moving[-2], moving[-1]
    run = abs(inner) * int(extent.value)
    if run * el >= distance or abs(outer) == run:
        return None
    ahead = max(1, math.ceil(distance / (group * run * el)))
    return outer * ahead if ahead < int(steps.value) else None


class _Frame:
    """What a pass over one loop's body has seen: `lines` it prefetches (buffer, coefficients,
    line), `reads` of its subtree keyed by the enclosing loops' coefficients (buffer,
    coefficients of the loops outside it, offset), and `earlier`: the `reads` of the loops that
    ran before the current one in this loop's body."""

    def __init__(self):
        self.lines, self.reads, self.earlier = set(), set(), set()


def prefetch_func(func):
    """The lowered PrimFunc with prefetches `ATTR` bytes ahead of its qualifying loads."""
    distance = int((func.attrs or {}).get(ATTR, 0) or 0)
    if distance <= 0:
        return func
    # a view's buffer name -> the memory it is: flattening declares a view of each argument per
    # loop nest (input_0_flat0, input_0_flat1), and a region read through one is still cached
    # when read through another. A view is declared after what it views: resolved as it comes.
    root: dict = {}

    def on_decl(d) -> None:
        if isinstance(d.data, ir.Call) and d.data.op.same_as(_BUFFER_DATA):
            viewed = str(d.data.args[0])
            if viewed != d.buffer.name:
                root[d.buffer.name] = root.get(viewed, viewed)
    tvm_ffi.structural_walk(func.body, [(tirx.DeclBuffer, on_decl)], order="pre")

    def named(buf) -> str:
        return root.get(buf.name, buf.name)

    local, lets = set(), let_values(func.body)
    tvm_ffi.structural_walk(func.body, [(tirx.AllocBuffer, lambda a: local.add(named(a.buffer)))])
    # outputs that may stream (stream_stores.py; a prefetch would read them back into the
    # cache and stop it): those marked and not read by the function once stream_stores has
    # forwarded the reads of just-stored vectors
    owner = {str(k): str(v[0]) for k, v in (func.attrs or {}).get(STREAM_ATTR, {}).items()}
    loaded: set = set()
    if owner:
        tvm_ffi.structural_walk(forward_stored(func.body, owner),
                                [(ir.TensorLoad, lambda ld: loaded.add(owner.get(str(ld.source.data))))])
    streams = {k for k, out in owner.items() if out not in loaded}
    written: set = set()  # arguments the current outermost loop nest writes: read back from cache
    loops: list = []  # enclosing (var, extent), outermost first
    frames: list = []  # per enclosing loop: _Frame
    count = [0]

    def walk(buf, indices, skip: set):
        """(buffer name, linear coefficients of the access's start) of a stride-1 vector access
        to a kernel argument not in `skip`, else None."""
        idx, name = list(indices), named(buf)
        # the stream marks (`streams`) name the buffer's own data
        if (len(idx) != 1 or not isinstance(idx[0], tirx.Ramp) or not is_one(idx[0].stride)
                or name in local or name in skip or str(buf.data) in skip):
            return None
        return name, linear_coefficients(inline_lets(idx[0].base, lets), loops)

    def prefetches(buf, ramp, name, got, group, copy, via_let, rw=0) -> list:
        """The prefetches (rw 0: read, 1: write) serving the access `buf[ramp]`."""
        el = max(1, (tvm.runtime.DataType(str(buf.dtype)).bits + 7) // 8)  # bool: a byte
        coef = next((c for c in reversed(got[:-1]) if c), 0) if got else 0  # innermost loop moving it
        span = _span(got, loops) if coef else 0
        if span * el < REUSED_BYTES:
            return []
        # an earlier loop in the same iteration of an enclosing loop read this region (same
        # outer coefficients and offset, and small enough to still be cached): no prefetch
        if any((name, got[:i + 1], got[-1]) in f.earlier for i, f in enumerate(frames)):
            return []
        for i, f in enumerate(frames):
            if _span(got[i:-1], loops[i:]) * el <= REREAD_BYTES:
                f.reads.add((name, got[:i], got[-1]))
        # iterations ahead: the distance over the new bytes each iteration reads (a strided walk
        # reads one vector's lines per step however far apart the steps are; `group` loads that
        # move together, a run of rows summed in one step (sum_runs), read as many)
        fresh = min(abs(coef) * el, group * max(LINE, lanes(ramp.ty) * el))
        ahead = coef * max(1, math.ceil(distance / fresh))
        jump = _next_run(got, loops, el, group, distance) if copy else None
        if jump is not None:
            ahead = jump
        elif via_let:
            return []
        if abs(ahead) > span:  # past everything the nest reads: two rows 100M apart
            return []
        per_line = max(1, LINE // el)
        out = []
        for m in range(min(MAX_LINES, math.ceil(lanes(ramp.ty) * el / LINE))):
            key = (name, got[:-1], (got[-1] + ahead) // per_line + m)
            if key in frames[-1].lines:
                continue
            frames[-1].lines.add(key)
            addr = tirx.call_intrin("handle", "tirx.address_of",
                                    tirx.BufferLoad(buf, [ramp.base + (ahead + m * per_line)]))
            # rw 0 (read) or 1 (write), locality 3 (keep in every cache level), cache 1 (data)
            out.append(tirx.Evaluate(tirx.call_intrin("void", "tirx.prefetch", addr, rw, 3, 1)))
        return out

    def on_store(st, mut):
        if not loops:
            return st
        loads = []
        tvm_ffi.structural_walk(st.value, [(ir.TensorLoad, lambda ld: loads.append((ld, False)))])
        bound = _copied(st.value, lets)
        if bound is not None:  # a copy: its let-bound loads too (prefetched only as short runs)
            loads += [(ld, True) for ld in bound]
        else:  # a computation: the loads of the let-bound terms it uses count as its own
            loads += [(ld, False) for ld in _bound_loads(st.value, lets)]
        walks = [(ld, w, via) for ld, via in loads if (w := walk(ld.source, ld.indices, written)) is not None and w[1]]
        offsets: dict = {}  # (buffer, loop coefficients) -> the distinct offsets read with them
        for _, (name, got), _ in walks:
            offsets.setdefault((name, got[:-1]), set()).add(got[-1])
        pre = [p for ld, (name, got), via in walks
               for p in prefetches(ld.source, ld.indices[0], name, got, len(offsets[name, got[:-1]]),
                                   bound is not None, via)]
        # the store itself, unless a copy or into an output that may stream (module docstring)
        if bound is None and (w := walk(st.buffer, st.indices, streams)) is not None and w[1]:
            pre += prefetches(st.buffer, st.indices[0], *w, 1, False, False, rw=1)
        count[0] += len(pre)
        return tirx.SeqStmt(pre + [st]) if pre else st

    def on_for(loop, mut):
        if not loops:
            written.clear()
            tvm_ffi.structural_walk(loop.body, [(tirx.BufferStore, lambda st: written.add(named(st.buffer)))])
        loops.append((loop.loop_var, loop.extent))
        frames.append(_Frame())
        new = mut.default_mutate(loop)
        loops.pop()
        done = frames.pop()
        if frames:
            frames[-1].earlier |= done.reads
        return new

    body = tvm_ffi.structural_mutate(func.body, [(tirx.BufferStore, on_store), (tirx.For, on_for)])
    return func.with_body(body) if count[0] else func
