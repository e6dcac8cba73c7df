"""Which injective blocks stay statements of their own instead of being inlined into their
consumers (`plain.inline_injective`'s `keep`): inlining recomputes a block wherever it is read,
which is free for moves and cheap arithmetic, not for math that would then run transposed or
twice per element. docs/poly.md (pre-pass) has the measurements behind each rule.
"""
from __future__ import annotations

from math import prod

from tvm import ir, s_tir, tirx
from tvm_ffi import structural_walk

from ..poly.scheduler import BROADCAST_MAX_POINTS, BROADCAST_REUSE
from .plain import tvm_dtype_bits
from .prepass import uses_vector_math

# a row reduction's float16 operand whose inlined chain rounds this often stays a statement
# when a sibling shares the chain (`shared_chains`)
KEEP_ROUNDINGS = 3


def kept_blocks(func, roles: dict[str, str], lanes: int) -> set[str]:
    """The blocks `inline_injective` keeps: transposes' math sources, shared chains and
    costly broadcast operands."""
    return transpose_sources(func) | shared_chains(func, roles, lanes) | broadcast_sources(func, roles, lanes)


def broadcast_sources(func, roles: dict[str, str], lanes: int) -> set[str]:
    """Elementwise blocks over fewer points than each block reading them (a bias row read by a
    whole matrix), whose own computation costs more than a load: a float16 rounding (a
    conversion pair where float16 is not native) or vector math. Inlined, a reader computes
    them once per point of its own, BROADCAST_REUSE times or more per value; kept, they are
    computed once into a buffer the readers load (isl schedules them apart: poly/scheduler.py
    `broadcasts`, which sets the bounds). Rows of a register or more only: a kept statement
    vectorises on its own; and readers of WIDE_MATH_INSTANCES points or more: in a [16, 768]
    kernel of 45 us the saving did not pay for the extra loop and buffer (1.06-1.09x)."""
    blocks = {n: b for n, b in blocks_of(func).items() if b.writes}
    outputs = {p.name for p in func.params}
    readers: dict[str, list[int]] = {}
    for name, b in blocks.items():
        points = prod(int(iv.dom.extent) for iv in b.iter_vars)
        for r in b.reads:
            readers.setdefault(r.source.name, []).append(points)
    out = set()
    for name, b in blocks.items():
        buf = b.writes[0].source
        shape = [int(e) for e in buf.shape]
        if roles.get(name) != "elemwise" or buf.name in outputs or not shape or shape[-1] < lanes:
            continue
        seen = readers.get(buf.name, [])
        if seen and min(seen) >= max(BROADCAST_REUSE * prod(shape), WIDE_MATH_INSTANCES) and \
                prod(shape) <= BROADCAST_MAX_POINTS and (roundings(b) or uses_vector_math(b)):
            out.add(name)
    return out


# ops that only move or convert data: inlined into a transpose, they cost no math
MOVES_ONLY = ("Reshape", "Transpose", "PadAkg", "UnPadAkg", "BroadcastTo", "Cast")


def transpose_sources(func) -> set[str]:
    """Elementwise blocks that feed a Transpose and compute something (more than a copy or a
    cast of an input). Inlined, their math would run in the transposed order: scalar, with
    every operand gathered across its stride-1 dim. Kept, they are statements of their own
    that the tree passes run vectorised in their natural order, next to the transpose. Only
    those whose value varies along their innermost dim (`_varies`): a broadcast has nothing to
    vectorise there."""
    blocks = blocks_of(func)
    writer = {b.writes[0].source.name: n for n, b in blocks.items() if b.writes}
    out = set()
    for name, b in blocks.items():
        if not name.startswith("Transpose_"):
            continue
        last = b.iter_vars[-1].var if b.iter_vars else None
        mine = []
        structural_walk(b.body, [(ir.TensorLoad, mine.append)])
        for r in b.reads:
            src = writer.get(r.source.name)
            # a cast between the math and the transpose moves nothing: look through it
            while src is not None and src.split("_")[0] == "Cast" and len(blocks[src].reads) == 1:
                src = writer.get(blocks[src].reads[0].source.name)
            if src is None or src.split("_")[0] in MOVES_ONLY:
                continue
            # only when the transpose moves the innermost dim: otherwise the inlined read is
            # contiguous already (and a kept statement would share the vector loop with it:
            # correct since isl_ast._Gen.vector_loops distributes such loops, but no faster)
            if any(ld.source.same_as(r.source) and ld.indices and last is not None and ld.indices[-1].same_as(last)
                   for ld in mine):
                continue
            loads = []
            structural_walk(blocks[src].body, [(ir.TensorLoad, loads.append)])
            read = {ld.source.name for ld in loads}
            # combines operands, or ends a chain. A broadcast along its innermost dim is inlined:
            # kept, it would be written out whole with short vectors and gathered back, while
            # the transpose's loop order reads its operand contiguously (resnet x[n, c] / 49 ->
            # [n, 7, 7, c]: 1.74 ms kept, 0.11 inlined, as plain)
            if (len(read) >= 2 or read & set(writer)) and _varies(blocks, writer, src, -1, {}):
                out.add(src)
    return out


def shared_chains(func, roles: dict[str, str], lanes: int) -> set[str]:
    """Elementwise blocks computing vector math (te/fastmath.py's exp/log/tanh) that inlining
    would evaluate twice or more per element (read by several consumers, directly or through
    other inlined blocks), one of whose uses reduces along its row (`_row_read`). Kept, each
    element's math runs once and its consumers read it back while it is cached (the buffer
    becomes row-sized once they share the row's loop): softmax over [8192, 1000], whose exp fed
    both the sum and the division, 3.60 -> 2.31 ms. Only for rows of a register or more (kept,
    the block vectorises on its own: yolo's [.., 3, 2] tails vectorise only coalesced with their
    consumers, ~3153-like 0.20 -> 1.0 ms kept) and WIDE_MATH_INSTANCES elements or more (as for
    math_registers: [32, 1001] 35 -> 40-49 us kept).
    Also kept, on the same conditions of size: the operand of such a row reduction (its float16
    value where the operand only widens it) whose inlined chain rounds to float16 KEEP_ROUNDINGS
    times or more and shares a block with another consumer. The reduction's own loop recomputed
    that chain; kept, the row loop computes it beside its siblings, which share it (bert
    layernorm backward, kernel alone, four interleaved runs: ~3896 1.15-1.31x, ~8077
    1.00-1.14x faster). Not where the sharing sibling needs the sum (softmax backward ~9506:
    it runs after the sum, and the kept operand was only stored and read back, 2-4% slower)."""
    blocks, writer, readers, producers = _dataflow(func)
    outputs = {p.name for p in func.params}  # kernel arguments (their handles bear the buffers' names)
    inlined = {n for n, b in blocks.items() if roles.get(n) == "elemwise" and b.writes[0].source.name not in outputs}
    uses: dict[str, int] = {}
    for name in reversed(list(blocks)):  # consumers come after their producers
        uses[name] = sum(uses[r] if r in inlined else 1 for r, _ in readers[name])

    def row_reduced(name) -> bool:  # through inlined elementwise blocks (a Cast); a DAG: no cycles
        return any(_row_read(blocks[r], ld) if roles.get(r) == "reduce" else r in inlined and row_reduced(r)
                   for r, ld in readers[name])

    def wide(n) -> bool:
        shape = [int(e) for e in blocks[n].writes[0].source.shape]
        return bool(shape) and shape[-1] >= lanes and prod(shape) >= WIDE_MATH_INSTANCES

    out = {n for n, b in blocks.items() if roles.get(n) == "elemwise" and wide(n) and uses[n] >= 2
           and uses_vector_math(b) and row_reduced(n)}

    def evaluated(n, kept, memo) -> set[str]:  # the blocks not inlined whose statements evaluate n
        if n not in memo:
            memo[n] = {n} if n not in inlined or n in kept else \
                set().union(*(evaluated(q, kept, memo) for q, _ in readers[n]))
        return memo[n]

    for n in list(blocks):
        rows = [r for r, ld in readers[n] if roles.get(r) == "reduce" and _row_read(blocks[r], ld)]
        if n not in inlined or not rows or not wide(n):
            continue
        n = _widened(blocks, writer, inlined, n)
        # what computing n evaluates: n and the inlined blocks it reads, transitively
        chain = _reach([n], lambda c: [p for p in producers[c] if p in inlined and p not in out])
        # a sibling statement that does not wait for the sum shares part of the chain: computed
        # beside it, the chain runs once (not so softmax backward's, whose sharer follows the sum)
        late = _reach(rows, lambda c: [q for q, _ in readers[c]]) | {n}
        memo: dict[str, set[str]] = {}
        shared = any(evaluated(c, out | {n}, memo) - late for c in chain if c != n)
        if shared and sum(roundings(blocks[c]) for c in chain) >= KEEP_ROUNDINGS:
            out.add(n)
    return out


def math_sources(func, inlined: set[str]) -> dict[str, frozenset[str]]:
    """{block left after inlining: the inlined blocks of vector math (te/fastmath.py's
    exp/log/tanh) its expression evaluates, directly or through other inlined blocks}. Two
    statements naming a common one compute the same chain; run in one loop body, LLVM computes
    it once (poly/tree.py `_riders`). `func` is the function before inlining."""
    blocks, _, _, producers = _dataflow(func)
    out = {}
    for name in blocks:
        if name in inlined:
            continue
        chain = _reach([p for p in producers[name] if p in inlined], lambda c: [p for p in producers[c] if p in inlined])
        math = frozenset(c for c in chain if uses_vector_math(blocks[c]))
        if math:
            out[name] = math
    return out


def _dataflow(func):
    """(blocks by name, not the root, which holds them all; buffer -> the block writing it;
    block -> [(reader, its load)]; block -> the blocks it reads, once per load: e * e evaluates e
    twice)."""
    blocks = {n: b for n, b in blocks_of(func).items() if b.writes}
    writer = {b.writes[0].source.name: n for n, b in blocks.items()}
    readers: dict[str, list[tuple[str, object]]] = {n: [] for n in blocks}
    producers: dict[str, list[str]] = {n: [] for n in blocks}
    for name, b in blocks.items():
        loads = []
        structural_walk(b.body, [(ir.TensorLoad, loads.append)])
        for ld in loads:
            if writer.get(ld.source.name, name) != name:
                readers[writer[ld.source.name]].append((name, ld))
                producers[name].append(writer[ld.source.name])
    return blocks, writer, readers, producers


def _widened(blocks, writer, inlined, name) -> str:
    """The producer of `name` when `name` only widens it (float16 -> float32): half the bytes."""
    v = blocks[name].body.value if isinstance(blocks[name].body, tirx.BufferStore) else None
    if isinstance(v, tirx.Cast) and isinstance(v.value, ir.TensorLoad) and \
            tvm_dtype_bits(v.ty) > tvm_dtype_bits(v.value.ty) and writer.get(v.value.source.name) in inlined:
        return writer[v.value.source.name]
    return name


def _reach(start, nexts) -> set[str]:
    """`start` and every block reached from it through `nexts(block)`."""
    seen, todo = set(), list(start)
    while todo:
        n = todo.pop()
        if n not in seen:
            seen.add(n)
            todo += nexts(n)
    return seen


def _row_read(block, load) -> bool:
    """Does reduction `block` make `load` along its last dim with a reduced iterator (a row sum
    of it, as softmax's)? Only then is keeping a shared math block a sure gain: its row is
    written and read back while cached. Kept beside elementwise consumers alone, a block could
    cost their coalesced vector loop (yolo ~6853: [.., 3, 2] tails, 0.46 -> 14.8 ms scalar)."""
    if not load.indices:
        return False
    reduced = [iv.var for iv in block.iter_vars if int(iv.iter_type) == 2]
    used = []
    structural_walk(load.indices[-1], [(tirx.Var, used.append)])
    return any(u.same_as(v) for u in used for v in reduced)


def _varies(blocks, writer, name, pos, seen) -> bool:
    """Whether block `name`'s value depends on its iter var at `pos`, through the blocks it reads.
    Yes for any use of the var but as a whole index of an intermediate (a kernel argument indexed
    by it, an index expression, a OneHot's `j == idx`), else as that intermediate says."""
    b = blocks[name]
    if not b.iter_vars or not isinstance(b.body, tirx.BufferStore):
        return True
    key = (name, pos % len(b.iter_vars))
    if key in seen:
        return seen[key]
    seen[key] = True  # a cycle cannot happen in a dataflow graph; be conservative anyway
    var, value = b.iter_vars[key[1]].var, b.body.value
    uses, loads = [], []
    structural_walk(value, [(tirx.Var, lambda v: uses.append(v) if v.same_as(var) else None),
                            (ir.TensorLoad, loads.append)])
    passed = [(writer[ld.source.name], k) for ld in loads if ld.source.name in writer
              for k, ix in enumerate(ld.indices) if ix.same_as(var)]  # handed on to a producer
    seen[key] = len(uses) > len(passed) or any(_varies(blocks, writer, src, k, seen) for src, k in passed)
    return seen[key]


def blocks_of(func) -> dict:
    """name -> SBlock of every block in `func`, in program order."""
    out = {}

    def keep(b) -> None:
        out.setdefault(b.name_hint, b)
    structural_walk(func.body, [(s_tir.SBlock, keep)])
    return out


# an elementwise statement computing vector math this many times or more runs math_registers
# registers per op: [4096, 256] and [8192, 1024] softplus 1.41x and 1.46x faster (2 threads), but
# a [16, 768] tanh (12288 elements, 6 us) 14% slower: with LLVM's unroll the wider loop body is
# 4x the code, fetched cold each call
WIDE_MATH_INSTANCES = 1 << 16


def roundings(block) -> int:
    """float32 -> float16/bfloat16 casts in the block's (inlined) body."""
    n = [0]

    def cast(c) -> None:
        if str(c.ty) in ("float16", "bfloat16") and str(c.value.ty) == "float32":
            n[0] += 1
    structural_walk(block.body, [(tirx.Cast, cast)])
    return n[0]
