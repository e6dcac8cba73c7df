"""Streaming (non-temporal) stores for kernel outputs too large to stay in cache.

A store to a line that is not cached first reads the line (write-allocate), so a kernel that
writes N bytes of output moves 2N across the memory bus for it. A non-temporal store writes
whole lines straight to memory. On this host (2 threads, float16 -> float32 cast of 32 Mi
elements) the kernel went from 6.4-7.5 ms to 4.9-5.0 ms; a C triad 29 -> 39 GB/s.

TVM has no TIR form for such a store, and vector stores exist only after its lowering, so this
runs as one more pass at the end of TVM's pipeline (`targets/cpu/tir_pipeline.py`). A
vector store into an output the schedule marked (`ATTR`) qualifies when it writes whole cache
lines: a multiple of 64 bytes, at an offset the loop variables' coefficients prove 64-byte
aligned (the marked outputs are 64-byte aligned: `te/abi.py`; in-place targets are never marked). A 16- or
32-byte store qualifies only as the innermost loop's consecutive vectors, that loop starting
on a line and covering whole lines: streaming 16-byte stores scattered across rows made a
yolo transpose 2.1x slower (write-combining buffers left partial lines for memory to merge),
while consecutive 32-byte stores (the vectors of an AVX2 host, measured here with
`vector_bytes=32`) gained as much as whole-line ones: r101 ~1714 3.32 -> 2.27 ms. The schedule's
share of the marked bytes (`ScheduleConfig.stream_share`, carried as `SHARE_ATTR`; default
`STREAM_SHARE`) must qualify, else nothing streams (mixing was slower on a Xeon VM).
A qualifying store becomes a call to a small LLVM IR function imported into the module with
`pragma_import_llvm`; LLVM links it in before optimising and inlines it (`alwaysinline`).

Before that, a load of an output right after a store of the same vector takes the stored
expression (`forward_stored`): an output also used by a later statement would otherwise be read
back from memory right after it was streamed past the cache.

Ordering: non-temporal stores are weakly ordered, so the calling thread runs `sfence` after
each outermost loop that streams. TVM's pool workers signal the end of their task with an
atomic read-modify-write (a locked instruction, which on x86 orders and flushes earlier
write-combining stores: Intel SDM vol. 3, "Memory Ordering in P6 and More Recent Processor
Families" and "Buffering of Write Combining Memory Locations") before the caller returns.
An `sfence` per iteration of the parallel loop would cost a write-combining drain each: 5 ms
-> 27 ms on the cast above.
"""
from __future__ import annotations

import tvm
import tvm_ffi
from tvm import ir, tirx

from ...dtypes import vector_parts
from ..rewrite import inline_lets, is_one, let_values, linear_coefficients
from .stream import ATTR, SHARE_ATTR, STREAM_SHARE, WHOLE_ATTR

LINE = 64

_LLVM_TYPES = {"float16": "half", "bfloat16": "bfloat", "float32": "float", "float64": "double",
               "int8": "i8", "uint8": "i8", "int16": "i16", "uint16": "i16", "int32": "i32",
               "uint32": "i32", "int64": "i64", "uint64": "i64"}


def _vector(ty) -> tuple[str, int, int] | None:
    """(element dtype, lanes, bytes) of a vector type of whole cache lines, or of half or a
    quarter of one, else None."""
    elem, lanes = vector_parts(ty)
    if lanes < 2 or elem not in _LLVM_TYPES:
        return None
    size = lanes * tvm.runtime.DataType(elem).bits // 8
    return (elem, lanes, size) if size % LINE == 0 or size in (16, 32) else None


def _whole_lines(base, vec, loops) -> bool:
    """Whether a vector of whole cache lines at element offset `base` starts on a line: the
    coefficients of the enclosing loops' variables and the constant are all multiples of one."""
    _, lanes, size = vec
    got = linear_coefficients(base, loops)
    return got is not None and all(c % (LINE // (size // lanes)) == 0 for c in got)


def _runs(stores, loops) -> set[tuple[str, tuple[int, ...]]]:
    """The part-line stores (buffer, then coefficients and constant: `linear_coefficients`) of
    the innermost loop that write consecutive vectors: per buffer and coefficients, offsets c, c + lanes, ... that
    together cover the loop's step, so the loop writes one contiguous range, starting on a line
    and of whole lines. One store per iteration is the common case; a transposed tile writes
    its contiguous output block as several (yolo's [1024, 3, 3, 512] -> [1024, 512, 3, 3]
    float16: 9 stores of 16 lanes per iteration)."""
    if not loops or not isinstance(loops[-1][1], tirx.IntImm):
        return set()
    extent, groups = int(loops[-1][1].value), {}
    for buf, vec, base in stores:
        got = linear_coefficients(base, loops)
        if got is not None and vec[2] < LINE:
            groups.setdefault((buf, vec, got[:-1]), []).append(got)
    out = set()
    for (buf, (_, lanes, size), coeffs), members in groups.items():
        line = LINE // (size // lanes)
        consts = sorted(m[-1] for m in members)
        if (consts == list(range(consts[0], consts[0] + lanes * len(consts), lanes))
                and coeffs[-1] == lanes * len(consts) and (extent * size * len(consts)) % LINE == 0
                and consts[0] % line == 0 and all(c % line == 0 for c in coeffs[:-1])):
            out.update((buf, m) for m in members)
    return out


def _store_fn(vecs) -> str:
    return "akgpy_stream_" + "_".join(f"{elem}x{lanes}" for elem, lanes, _ in vecs)


def helper_ir(groups) -> str:
    """LLVM IR of one store function per group signature (a tuple of (element dtype, lanes,
    bytes), one per vector it stores, in order: `_group`), and the fence. Each vector is stored
    as 64-bit integers: LLVM's x86 backend selects no non-temporal store for half-precision
    vectors, and MOVNTDQ moves any bits."""
    out = []
    for vecs in sorted(groups):
        params, body = [], []
        for n, (elem, lanes, size) in enumerate(vecs):
            vt, it = f"<{lanes} x {_LLVM_TYPES[elem]}>", f"<{size // 8} x i64>"
            params.append(f"ptr %p{n}, {vt} %v{n}")
            body.append(f"  %b{n} = bitcast {vt} %v{n} to {it}\n"
                        f"  store {it} %b{n}, ptr %p{n}, align {min(size, LINE)}, !nontemporal !0")
        out.append(f"define internal void @{_store_fn(vecs)}({', '.join(params)}) alwaysinline {{\n"
                   + "\n".join(body) + "\n  ret void\n}")
    out.append("""define internal void @akgpy_sfence() alwaysinline {
  call void @llvm.x86.sse.sfence()
  ret void
}
declare void @llvm.x86.sse.sfence()
!0 = !{i32 1}""")
    return "\n".join(out) + "\n"


def _group(body, vec_of: dict) -> tuple:
    """(body with each run of consecutive streaming stores as one call, the signatures of the
    calls that hold more than one). A call's arguments are all evaluated before its stores, so
    every vector of the run is computed before the first streaming store; a streaming store
    carries no type-based alias tag, and LLVM reloads (and recomputes from) the inputs read
    after one."""
    groups = set()

    def store_call(st):  # the call of a single streaming store, else None
        call = st.value if isinstance(st, tirx.Evaluate) and isinstance(st.value, ir.Call) else None
        return call if call is not None and call.args and str(getattr(call.args[0], "value", "")) in vec_of \
            else None

    def emit(run, out):
        if len(run) == 1:
            out.append(tirx.Evaluate(run[0]))
            return
        vecs = tuple(vec_of[str(c.args[0].value)] for c in run)
        groups.add(vecs)
        out.append(tirx.Evaluate(tirx.call_extern("void", _store_fn(vecs), *[a for c in run for a in c.args[1:]])))

    def on_seq(seq, mut):
        out, run = [], []
        for st in seq.seq:
            if (call := store_call(st)) is not None:
                run.append(call)
                continue
            if run:
                emit(run, out)
                run = []
            out.append(mut.mutate(st))
        if run:
            emit(run, out)
        return tirx.SeqStmt(out) if len(out) > 1 else out[0]

    return tvm_ffi.structural_mutate(body, [(tirx.SeqStmt, on_seq)]), groups


def stream_func(func):
    """The lowered PrimFunc with streaming stores into the outputs its `ATTR` marks, when
    whole-line stores write at least the function's share (`SHARE_ATTR`, else `STREAM_SHARE`) of
    the marked bytes; else `func`."""
    attrs = func.attrs or {}
    if ATTR not in attrs:
        return func
    owner = {str(k): (str(v[0]), int(v[1])) for k, v in attrs[ATTR].items()}  # data name -> output
    body = forward_stored(func.body, owner)
    loaded = set()
    tvm_ffi.structural_walk(body, [(ir.TensorLoad, lambda ld: loaded.add(owner.get(str(ld.source.data))))])
    lets = let_values(body)
    fails, used, loops, count = set(), set(), [], [0]
    runs = []  # per enclosing loop: [its body, its runs (`_runs`) once a part-line store asks]
    whole_only = bool(attrs.get(WHOLE_ATTR, False))

    def qualifies(st, vec) -> bool:
        base = inline_lets(st.indices[0].base, lets)
        if vec[2] >= LINE:
            return _whole_lines(base, vec, loops)
        if not runs or whole_only:
            return False
        if runs[-1][1] is None:
            runs[-1][1] = _runs(_part_line_stores(runs[-1][0], owner, lets), loops)
        return (str(st.buffer.data), linear_coefficients(base, loops)) in runs[-1][1]

    def on_store(st, mut):
        out = owner.get(str(st.buffer.data))
        if out is None:
            return mut.default_mutate(st)
        vec = _contiguous(st, owner)
        if vec is None or out in loaded or not qualifies(st, vec):
            fails.add(out)
            return mut.default_mutate(st)
        used.add(vec)
        count[0] += 1
        addr = tirx.call_intrin("handle", "tirx.address_of", tirx.BufferLoad(st.buffer, [st.indices[0].base]))
        return tirx.Evaluate(tirx.call_extern("void", _store_fn((vec,)), addr, st.value))

    def on_for(loop, mut):
        before = count[0]
        loops.append((loop.loop_var, loop.extent))
        runs.append([loop.body, None])
        new = mut.default_mutate(loop)
        loops.pop()
        runs.pop()
        if not loops and count[0] > before:
            return tirx.SeqStmt([new, tirx.Evaluate(tirx.call_extern("void", "akgpy_sfence"))])
        return new

    body = tvm_ffi.structural_mutate(body, [(tirx.BufferStore, on_store), (tirx.For, on_for)])
    outputs = set(owner.values())
    share = float(attrs[SHARE_ATTR]) if SHARE_ATTR in attrs else STREAM_SHARE
    if not used or sum(o[1] for o in outputs - fails) < share * sum(o[1] for o in outputs):
        return func  # the streamed body is dropped: too few of the output bytes qualified
    body, groups = _group(body, {_store_fn((v,)): v for v in used})
    groups |= {(v,) for v in used}  # the single stores, called where no other one follows
    body = tirx.AttrStmt(ir.StringImm("akgpy"), "pragma_import_llvm", ir.StringImm(helper_ir(groups)), body)
    return func.with_body(body)


def _part_line_stores(body, owner: dict, lets: dict) -> list:
    """(buffer, vector, offset) of each contiguous vector store into a marked output in `body`,
    a loop's body with no loop or condition inside (else none: only the innermost loop's
    unconditional stores form runs; a guarded store may leave its line part written)."""
    nested, out = [], []

    def on_store(st):
        if (vec := _contiguous(st, owner)) is not None:
            out.append((str(st.buffer.data), vec, inline_lets(st.indices[0].base, lets)))
    tvm_ffi.structural_walk(body, [(tirx.For, nested.append), (tirx.IfThenElse, nested.append),
                                   (tirx.BufferStore, on_store)])
    return [] if nested else out


def _contiguous(st, owner: dict):
    """The `_vector` of a store of consecutive elements into a marked output, else None."""
    idx = list(st.indices)
    if (str(st.buffer.data) not in owner or len(idx) != 1 or not isinstance(idx[0], tirx.Ramp)
            or not is_one(idx[0].stride)):
        return None
    return _vector(st.value.ty)


def forward_stored(body, owner: dict):
    """Loads of an output right after a store of the same vector in the same statement list
    take the stored expression instead. A kernel that writes an intermediate out and also uses
    it (dropout's mask, both an output and a factor) would otherwise read back each line it just
    streamed past the cache, so it could not stream. The expression is repeated, not bound to a
    variable (TVM's code generator cannot bind vector lets), and the store moves down to just
    after its last such use (`_sink`), so that LLVM computes the expression once: a streaming
    store carries no type-based alias tag, so LLVM must assume it may overwrite any input, and
    loads after it are issued again (`_group`). Left in place, dropout ~6619's float16 mask (a
    chain of rounding conversions) was computed twice per vector: streamed, the kernel took
    1.3x as long as with the store moved (Zen 3, AVX2)."""
    def on_seq(seq, mut):
        out, avail = [], {}  # data name -> (index, the stored vector, its position in out)
        last_use = {}  # position of a store in out -> position of the last statement using it

        def forget(output):  # a store through any view of `output` ends what is known of it
            for k in [k for k in avail if owner[k] == output]:
                del avail[k]

        def on_load(ld, _mut):
            got = avail.get(str(ld.source.data))
            idx = list(ld.indices)
            if got is not None and len(idx) == 1 and tvm_ffi.structural_equal(idx[0], got[0]):
                last_use[got[2]] = len(out)
                return got[1]
            return _mut.default_mutate(ld)

        for st in seq.seq:
            if not isinstance(st, (tirx.BufferStore, tirx.Bind, tirx.Evaluate)):
                avail.clear()
                out.append(mut.mutate(st))
                continue
            st = tvm_ffi.structural_mutate(st, [(ir.TensorLoad, on_load)])
            if isinstance(st, tirx.BufferStore):
                key = str(st.buffer.data)
                if key in owner:
                    forget(owner[key])
                    if len(st.indices) == 1 and _vector(st.value.ty) is not None:
                        avail[key] = (st.indices[0], st.value, len(out))
            out.append(st)
        return tirx.SeqStmt(_sink(out, last_use, owner))

    return tvm_ffi.structural_mutate(body, [(tirx.SeqStmt, on_seq)])


def _sink(stmts: list, last_use: dict, owner: dict) -> list:
    """`stmts` with each store at position i in `last_use` moved to just after position
    last_use[i], when the statements it passes write only outputs other than the ones it reads
    or writes, and read none that it writes (else it stays). Names of views of one output
    compare as that output."""
    if not last_use:
        return stmts
    order, outputs = list(range(len(stmts))), set(owner.values())
    touched = [_touched(st, owner) for st in stmts]
    for i in sorted(last_use, reverse=True):
        reads, writes = touched[i]
        at, to = order.index(i), order.index(last_use[i])  # the last user may itself have moved
        for k in order[at + 1:to + 1]:
            r, w = touched[k]
            if not w <= outputs or w & (reads | writes) or r & writes or not _passable(stmts[k]):
                break
        else:
            order.insert(to, order.pop(at))  # popped first: the last user now sits at to - 1
    return [stmts[k] for k in order]


def _passable(st) -> bool:
    """Whether a store may move past `st`: a store, a let, or a prefetch (a call with no effect on
    memory); any other call may read or write what the store touches."""
    if not isinstance(st, tirx.Evaluate):
        return True
    return isinstance(st.value, ir.Call) and getattr(st.value.op, "name", "") == "tirx.prefetch"


def _touched(st, owner: dict) -> tuple[set, set]:
    """(buffers loaded, buffers stored) by a statement: data names, or the output a view belongs to."""
    reads, writes = set(), set()
    tvm_ffi.structural_walk(st, [(ir.TensorLoad, lambda ld: reads.add(owner.get(str(ld.source.data),
                                                                                   str(ld.source.data)))),
                                 (tirx.BufferStore, lambda s: writes.add(owner.get(str(s.buffer.data),
                                                                                  str(s.buffer.data))))])
    return reads, writes
