"""Schedule-tree passes: isl's answer reshaped into the tree akgpy generates code from.

isl decides *what fuses*: its outermost band, shared by the statements it fused. Below that
band isl orders statements by constant shifts inside one more band (`255 + k`, `510 + j`),
which would give loops that start at odd offsets and cannot be vectorised. So:

1. fusion   keep the leading members of each top-level band that are, for every statement
            of the band, one of its own dims (coefficient 1) with one shared constant; cut at
            the first member that is not (a shift that encodes a sequence, a skew, or a dim
            some statement lacks), or that is a statement's stride-1 dim while the statement
            has loops inside the band. Below the cut, the statements run as a sequence in
            program order (init before update), each over its remaining dims. Where a
            transpose and its producer part at a shared dim, that dim stays shared in blocks
            whose intermediate fits L2 (_transpose_block). Below shared loops, an elementwise
            part that shares vector math with a reduction runs in the reduction's loops where
            the reduction's walk covers its flat range (riders.py).
2. order    a permutable fused band puts its stride-1 member innermost; each statement's
            remaining dims put the dim that walks its largest array with stride 1 innermost
            (a column reduction's kept dim moves inside the reduce loop).
3. tiling   a fused band where a big array is read across its stride-1 dim (a transpose) is
            tiled in its stride-1 members; sizes from a cache model (the tile of both arrays
            fits half of L1) or from TreeOptions.tile.
4. parallel the first coincident member of each top-level band (or of a statement's own band
            where nothing fused) with enough iterations and work gets a `parallel` mark.
5. coalesce a fused band's (or a lone elementwise statement's) short contiguous tail
            ([..., 3, 3]) becomes one linear member; codegen rebuilds the dims from the
            iterators (see Coalesced).
6. vector   an innermost coincident member that walks the statement's written array with
            stride 1 is split into floor(d / L) and d mod L (L: lanes, dividing the extent)
            and the latter gets a `vector` mark.

Every pass keeps the schedule legal by construction, and `shape` checks the result with
check_legal anyway (IllegalSchedule, never code). The notes say what each pass did and why.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from math import gcd, lcm, prod

import islpy as isl

from ..te.index import digit_groups, repeats_every
from .checks import IllegalSchedule, check_legal
from .scheduler import broadcasts
from .deps import Deps
from .access import array_size, big_accesses, extents, flat_strides, pow2_lanes, single_dim, stride1_dim, stride1_dims
from .isl_util import maps_of, sets_of
from .chunks import chunked_groups
from .riders import find_riders, linear_terms, ride
from .parts import Merged, member_dims, merge_parts, split_serial
from .model import PolyModel, Statement
from .coalesce import coalesce_tail, extent_of
from .columns import CHUNK_REGISTERS, chunk_rows, column_blocks, is_chunked_column_sum
from .tiles import cache_tile, line_elements, register_transpose_tile, transpose_plan, vector_tile

_T = isl.schedule_node_type
PARALLEL, VECTOR, TRANSPOSE = "parallel", "vector", "transpose"


@dataclass(frozen=True)
class TreeOptions:
    lanes: dict[str, int] = field(default_factory=dict)  # statement -> vector lanes (1: no vector)
    registers: dict[str, int] = field(default_factory=dict)  # statement -> vector registers per op (default 1)
    chains: dict[str, str] = field(default_factory=dict)  # statement -> why it takes those registers
    # reduction update -> vector registers per op when it runs as a column reduction (the block of
    # columns outermost): as many as two cache lines of its input per row step take
    column_registers: dict[str, int] = field(default_factory=dict)
    copies: frozenset = frozenset()  # statements whose value is one load (maybe cast): they may transpose in registers
    transpose_lanes: dict[str, int] = field(default_factory=dict)  # copy -> lanes of its register transpose, if not `lanes`
    tile: tuple[int, ...] = ()  # explicit tile sizes for fused bands; () = cache model
    l1_bytes: int = 32 * 1024
    l2_bytes: int = 512 * 1024
    elem_bytes: int = 4
    stride1_innermost: bool = True
    fusion_depth: int = 8  # most isl band members kept as shared loops; 0 = no fusion
    parallel: bool = True
    min_parallel: int = 2
    min_parallel_work: int = 4096  # statement instances under a loop before threads pay off
    input_fusion: bool = True  # parts of isl's tree with no dependence between them may share a loop
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)  # isl array of a kernel argument -> its shape
    array_bits: dict[str, int] = field(default_factory=dict)  # isl array -> element bits (32 when absent)
    streams: bool = False  # the kernel's large outputs stream where their stores fill whole cache lines
    # reduction updates bound by their arithmetic per element (vector math, a float16 rounding
    # chain), not by how they walk memory: column reductions among them keep one vector per block
    heavy: frozenset = frozenset()
    # statements chaining CHAIN_ROUNDINGS or more float16 roundings (schedule/poly.py)
    rounding_chains: frozenset = frozenset()
    # column sums the prepass cut into per-chunk partials: partials block -> producer block
    # (poly/chunks.py runs each block by block beside its producer)
    chunked: dict[str, str] = field(default_factory=dict)
    # statement -> the inlined blocks of vector math its expression evaluates (kept.math_sources):
    # statements sharing one may run in one loop body (riders.py)
    math: dict[str, frozenset] = field(default_factory=dict)
    # band key (`band_key`) -> a per-band override (schedule/config.BandChoice, read by attribute:
    # fusion_depth, order, tile, parallel, vector; None or () = the pass decides)
    bands: dict = field(default_factory=dict)


def band_key(kind: str, names) -> str:
    """A band's stable name: "shared" (the loops fused statements share, from isl's band) or
    "own" (a statement's loops below them), and the band's statements; statement names come
    from block names, deterministic for a graph."""
    return f"{kind}:{','.join(sorted(names))}"


@dataclass
class BandFacts:
    """What the passes (or a band's override) decided for one band: what a tuner may change."""
    key: str
    statements: tuple[str, ...]
    dims: tuple[str, ...]  # the band's members before tiling and vector split, in isl's (shared) or the statement's (own) order
    order: tuple[int, ...]  # the order used: indices into `dims`, outermost first
    permutable: bool  # any member order is legal (isl's flag; an own band's order is checked anyway)
    members: int = 0  # members of the generated band (tile and vector loops included)
    coincident: tuple[bool, ...] = ()  # of those members
    parallel: int = -1  # the member with the parallel mark; -1: none
    may_parallel: bool = False  # the passes may place a parallel mark here (no parallel loop around it)
    vector: bool = False  # the innermost member was split for vector lanes
    tile: tuple[int, ...] = ()  # tile sizes used
    isl_members: int = 0  # shared: members of isl's band (the range of fusion_depth)
    kept: int = 0  # shared: isl members kept as shared loops
    tuned: tuple[str, ...] = ()  # the decisions taken from the override


def _choice(opts, key: str, attr: str):
    """The override of `attr` for band `key`, or None where the pass decides."""
    c = opts.bands.get(key)
    v = getattr(c, attr, None) if c is not None else None
    return None if v is None or v == () else v


@dataclass
class Shaped:
    schedule: isl.Schedule
    notes: list[str]
    tiles: dict[str, tuple[int, ...]]  # band description -> tile sizes used
    coalesced: dict[str, "Coalesced"] = field(default_factory=dict)
    bands: dict[str, BandFacts] = field(default_factory=dict)  # band key -> what was decided for it


@dataclass(frozen=True)
class Coalesced:
    """A statement whose trailing dims run as one linear loop member at schedule depth `depth`
    (split into floor(L / lanes), L mod lanes at depth, depth + 1 when lanes > 1). Code
    generation rebuilds the dims from the loop iterators itself: isl's AST writes them in a
    form TVM cannot fold back into a flat, vectorisable address."""
    depth: int
    dims: tuple[int, ...]  # statement dim indices, outermost first
    extents: tuple[int, ...]
    lanes: int
    # ((depth, coefficient), ...): L as a sum of loop iterators instead (a rider, riders.py)
    terms: tuple[tuple[int, int], ...] = ()
    shares: frozenset = frozenset()  # a rider's math blocks that its host evaluates too


# -- reading isl's answer ----------------------------------------------------------------------

def _top_groups(tree: isl.Schedule) -> list[tuple[isl.UnionSet, isl.ScheduleNode | None]]:
    """(statements, their first band) for each top-level part of isl's tree. A part that is
    itself a sequence or set with no band above it is its children (the broadcasts that
    poly/scheduler.py runs first, then isl's answer for the rest): no loop is shared across them,
    and as parts of their own each keeps its band (yolo's loss sums ~2380: a row reduction's
    vector partials and the final sum in sequence under each independent part; as one part
    with no band, every statement ran its own loop nest and the [32, 52, 13, 80] float64
    partials went through memory, 13.8 MB written and read back)."""
    node = tree.get_root().child(0)
    if node.get_type() == _T.band:
        return [(node.get_domain(), node)]
    if node.get_type() not in (_T.sequence, _T.set):
        return [(node.get_domain(), None)]
    return _parts_below(node)


def _parts_below(node) -> list[tuple[isl.UnionSet, isl.ScheduleNode | None]]:
    """(filter, first band) of each child of the sequence or set `node`, a child that is a
    sequence or set itself expanded into its own children, in order (a set's children run in
    any order, so running them in sequence is legal)."""
    out = []
    for c in range(node.n_children()):
        f = node.child(c)
        inner = f.child(0) if f.n_children() else None
        if inner is not None and inner.get_type() in (_T.sequence, _T.set):
            out += _parts_below(inner)
        else:
            out.append((f.filter_get_filter(), _first_band(f)))
    return out


def _names(us: isl.UnionSet) -> set[str]:
    """The statements of a filter (isl leaves one it built unbounded: compare names, not sets)."""
    return {st.get_tuple_name() for st in sets_of(us)}


def _first_band(f) -> isl.ScheduleNode | None:
    """The band right below filter node `f`, if that is what is there."""
    inner = f.child(0) if f.n_children() else None
    return inner if inner is not None and inner.get_type() == _T.band else None


def _coincident_dims(s: Statement) -> set[int]:
    """Dims along which the statement has no self dependence: every dim of a compute/init
    (each point writes its own element), the spatial dims of a reduction update."""
    if s.kind != "update":
        return set(range(len(s.dims)))
    written = set()
    for m in maps_of(s.writes):
        pma = isl.PwMultiAff.from_map(m)
        for q in range(pma.dim(isl.dim_type.out)):
            hit = single_dim(pma.get_pw_aff(q))
            if hit is not None:
                written.add(hit[0])
    return written


# -- building the tree -------------------------------------------------------------------------

def _mupa(ctx, stmts: list[Statement], exprs: dict[str, list[str]]) -> isl.MultiUnionPwAff:
    n = len(next(iter(exprs.values())))
    members = []
    for q in range(n):
        parts = [f"{s.name}[{', '.join(s.dims)}] -> [({exprs[s.name][q]})]" for s in stmts]
        members.append("{ " + "; ".join(parts) + " }")
    return isl.MultiUnionPwAff.read_from_str(ctx, "[" + ", ".join(members) + "]")


def _insert_band(node, ctx, stmts, exprs, coincident: list[bool], mark: dict[int, str],
                 isolate: dict[int, int] | None = None, riders: dict | None = None):
    """Insert a band with members exprs[stmt][q] above leaf `node`; members listed in `mark` get
    their own single-member band under a mark. `isolate` {member: last full value}: isl's AST
    generates those values apart from the rest (a vector split's full blocks, then its
    remainder, each with a constant extent). Returns the leaf below the last band."""
    isolate = isolate or {}
    carried = [(riders[s.name], s.name) for s in stmts if s.name in (riders or {})]
    stmts = [*stmts, *(r.stmt for r, _ in carried)]
    exprs = {**exprs, **{r.stmt.name: [ride(x, r) for x in exprs[host]] for r, host in carried}}
    n = len(coincident)
    q = 0
    while q < n:
        r = q + 1
        while r < n and r not in mark:
            r += 1
        if q in mark:
            r = q + 1
        part = {k: v[q:r] for k, v in exprs.items()}
        node = node.insert_partial_schedule(_mupa(ctx, stmts, part))
        node = node.band_set_permutable(1)
        for m in range(r - q):
            node = node.band_member_set_coincident(m, int(coincident[q + m]))
        full = {m - q: v for m, v in isolate.items() if q <= m < r}
        if full:
            outer = ", ".join(f"o{k}" for k in range(node.get_schedule_depth()))
            inner = ", ".join(f"b{k}" for k in range(r - q))
            cons = " and ".join(f"b{k} <= {v}" for k, v in full.items())
            node = node.band_set_ast_build_options(
                isl.UnionSet(f"{{ isolate[[{outer}] -> [{inner}]] : {cons} }}", context=ctx))
        if q in mark:
            node = node.insert_mark(isl.Id(mark[q], context=ctx)).child(0)
        node = node.child(0)
        q = r
    return node


def _vector_split(model, opts, stmts, exprs, coincident, q, notes, where, isolate=None, tail=None,
                  widen: tuple[int, str] | None = None) -> bool:
    """Split member q (the innermost) into floor(d/L), d mod L when every statement walks its
    written array with stride 1 along it; True when done (member q+1 is the vector). With
    `isolate` (a dict), an extent with no good divisor but room for two full registers splits
    by a whole register anyway: isolate[q] = the last full block, and the remainder runs as
    a shorter vector loop of its own (255 f64 sums: 31 x 8 + 7, not 51 x 5). With `tail` (the
    coalesced dims of each statement), the vector may span up to 4 registers so that every
    broadcast operand's lanes read the same offsets in each vector (`_gather_registers`). With
    `widen` (registers, reason), the vector spans that many registers where the extent allows."""
    lanes = min(opts.lanes.get(s.name, 1) for s in stmts)
    if lanes < 4 or not coincident[q]:
        return False
    ext = extent_of(model, stmts, exprs, q)
    # a power of two of at least half a register (LLVM splits 26 lanes into 16 + 8 + 2), else
    # a whole register with a remainder loop, else the largest divisor there is
    L, rest = pow2_lanes(ext, lanes), ""
    if L < max(4, lanes // 2):
        if isolate is not None and lanes & (lanes - 1) == 0 and ext >= 2 * lanes:
            L = lanes
            isolate[q] = ext // L - 1
            rest = f" ({ext // L} full, a remainder of {ext % L})"
        else:
            L = max((d for d in range(4, lanes + 1) if ext % d == 0), default=0)
    if L < 4:
        notes.append(f"vector: {where}: extent {ext} has no divisor in [4, {lanes}]; scalar")
        return False
    if widen is not None:
        regs, why = widen
    elif all(s.kind == "compute" for s in stmts):  # a chain widens the loop it shares with cheap statements
        widest = max(stmts, key=lambda s: opts.registers.get(s.name, 1))
        regs, why = opts.registers.get(widest.name, 1), opts.chains.get(widest.name, "")
    else:  # not a reduction's
        regs, why = 1, ""
    while regs > 1 and (rest or isolate is None or ext % (L * regs)):
        regs //= 2
    gather = _gather_registers(opts, stmts, tail, L, ext) if tail is not None and not rest else 1
    if gather > 1:
        L *= gather
        rest = (f" ({gather} registers per op: each vector's lanes then read a broadcast operand at "
                f"the same offsets, one load and a shuffle)")
    elif regs > 1:
        L *= regs
        rest = f" ({regs} registers per op: {why})"
    for s in stmts:
        e = exprs[s.name][q]
        exprs[s.name][q:q + 1] = [f"floor(({e}) / {L})", f"({e}) mod {L}"]
    coincident[q:q + 1] = [True, True]
    notes.append(f"vector: {where}: innermost member split by {L} lanes{rest}")
    return True


def _gather_registers(opts: TreeOptions, stmts, tail: dict, lanes: int, ext: int) -> int:
    """Registers per vector (1..4) for a coalesced tail: the fewest, dividing the extent, after
    which every kernel-argument read that uses the tail dims repeats its lane offsets in each
    vector (`te/index.repeats_every`); 1 when one register already does or no count does. A
    [1, 52, 52, 1, 2] grid under a [.., 52, 52, 3, 2] tail reads 2 * (L // 6) + L mod 2: a
    period of 6 lanes, so 3 registers of 16 (yolo loss part: 0.66 -> 0.24 ms, one thread)."""
    reads = []
    for s in stmts:
        dims, exts = tail.get(s.name, ()), extents(s)
        for m, shape in _argument_reads(s, opts):
            pma = isl.PwMultiAff.from_map(m)
            terms = []
            for q in range(pma.dim(isl.dim_type.out)):
                pa = pma.get_pw_aff(q)
                hit = None if pa.is_cst() else single_dim(pa)
                if hit is not None and hit[0] in dims and hit[1] == 0 and shape[q] == exts[hit[0]]:
                    terms.append((dims.index(hit[0]), prod(shape[q + 1:])))
            groups = digit_groups(terms, [exts[d] for d in dims])
            if terms and not repeats_every(groups, ext, lanes):
                reads.append(groups)
    for k in (2, 3, 4) if reads else ():
        if ext % (lanes * k) == 0 and all(repeats_every(g, ext, lanes * k) for g in reads):
            return k
    return 1


def _argument_reads(s: Statement, opts: TreeOptions):
    """(read map, array shape) of each read of a kernel argument (whose shape is known)."""
    for m in maps_of(s.reads):
        shape = opts.shapes.get(m.get_tuple_name(isl.dim_type.out))
        if shape is not None and m.is_single_valued():  # not a gather's read of a whole dim
            yield m, shape


def _dim_strides(s: Statement, opts: TreeOptions) -> dict[int, int] | None:
    """Each dim's step in the flat offset of the statement's largest kernel-argument read, when
    isl proves that offset affine."""
    m, shape = max(_argument_reads(s, opts), key=lambda r: array_size(r[0]), default=(None, None))
    if m is None:
        return None
    return flat_strides(s, m, shape)


def _statement_band(model, s: Statement, pinned: set[int], opts: TreeOptions, notes, decided=None) -> tuple:
    """The statement's own inner band: its unpinned dims, stride-1 innermost; (exprs, coincident,
    mark, isolate, tail), tail: None or its coalesced member as (index, dims, extents, lanes).
    A band override (`opts.bands`, key "own:<statement>") may set the order of the dims, the
    parallel member and whether the innermost is vectorised; `decided` receives its BandFacts."""
    dims = [q for q in range(len(s.dims)) if q not in pinned]
    ext = extents(s)
    dims = [q for q in dims if ext[q] > 1] or dims[-1:]
    if not dims:
        return None
    key = band_key("own", [s.name])
    base, tuned = list(dims), []
    order = _choice(opts, key, "order")
    if order is not None and sorted(order) != list(range(len(base))):
        notes.append(f"order: {s.name}: tuned order {list(order)} ignored: not a permutation of its "
                     f"{len(base)} loop(s)")
        order = None
    best, writes = stride1_dims(s)
    if order is not None:
        dims = [base[k] for k in order]
        tuned.append("order")
        notes.append(f"order: band [{s.name}]: {[s.dims[q] for q in dims]} (tuned)")
    elif opts.stride1_innermost and best in dims and dims[-1] != best:
        dims = [q for q in dims if q != best] + [best]
        notes.append(f"order: {s.name}: {s.dims[best]} (stride 1 in its largest array) moved innermost")
    co_dims = _coincident_dims(s)
    strides = _dim_strides(s, opts) if opts.stride1_innermost and s.kind == "update" and len(dims) > 2 \
        and order is None else None
    if strides is not None:
        # a reduction walks its input in storage order: the outer parallel dims by their stride
        # in it. A BatchNorm channel sum over [n, c, 3 chunks of 19 rows] ran n, chunk, c, each
        # 4.3 KB block 13 KB from the next (alexnet ~7787, one thread: 1.88 -> 0.78 ms). Dims with
        # self dependences (the reduction's) stay where they are.
        slots = [k for k, q in enumerate(dims[:-1]) if q in co_dims]
        ranked = _by_stride(slots, lambda k: strides[dims[k]])
        if ranked != slots:
            dims = [dims[r] for r in _permuted(len(dims), slots, ranked)]
            notes.append(f"order: {s.name}: outer parallel dims by their stride in its largest array: "
                         f"{[s.dims[q] for q in dims[:-1]]}")
    exprs = {s.name: [s.dims[q] for q in dims]}
    coincident = [q in co_dims for q in dims]
    mark, isolate = {}, {}
    last = len(dims) - 1
    got = register_transpose_tile([s], exprs, coincident, opts, notes, s.name) \
        if len(dims) >= 2 and not opts.tile else None
    tail = None
    if got is not None:
        exprs, coincident, sizes, isolate = got
        mark[len(coincident) - len(sizes)] = TRANSPOSE
    elif s.kind == "compute":
        # an elementwise statement below a fusion cut (a transpose's producer) coalesces its
        # contiguous tail like a fused band does; under outer loops its first member may join
        exprs, coincident, tail = coalesce_tail(model, [s], exprs, coincident, opts, notes, s.name,
                                                 first=1 if opts.parallel and not pinned else 0)
        last = len(coincident) - 1
    # a chunked sum's partials (poly/chunks.py) sum a block of rows under their shared loops as a
    # column reduction does all of them: a vector of columns outermost, the rows inside
    column = (not pinned or s.block in opts.chunked) and last > 0 and not coincident[0]
    chunked = not pinned and is_chunked_column_sum(s, coincident, last, opts)
    widen = None
    if column:
        widen = (opts.column_registers.get(s.name, 1), "each row step reads two whole cache lines of the "
                 "input, in independent add chains")
    elif chunked:
        widen = (min(CHUNK_REGISTERS, opts.column_registers.get(s.name, 1)),
                 "independent add chains in each row step of a chunk")
    vector = _choice(opts, key, "vector")
    if vector is False:
        tuned.append("vector")
        notes.append(f"vector: band [{s.name}]: scalar (tuned)")
    split = vector is not False and got is None and (tail is not None or dims[last] in writes) and _vector_split(
        model, opts, [s], exprs, coincident, last, notes, s.name, isolate if tail is None else None,
        tail=tail, widen=widen)
    if split and column and not column_blocks(model, s, s.dims[dims[last]], exprs, coincident, isolate, opts, notes):
        # a column reduction (unless it runs in blocks of rows, columns.py): the block of
        # columns goes outermost, so blocks run in parallel and each step of the reduction
        # reads one contiguous block per row
        exprs[s.name].insert(0, exprs[s.name].pop(last))
        coincident.insert(0, coincident.pop(last))
        isolate = {0: isolate[last]} if last in isolate else {}
        notes.append(f"order: {s.name}: vector blocks of {s.dims[dims[last]]} outermost"
                     + (", the rows of the shared loops' block inside" if pinned else " (parallel), the reduction inside"))
    if split and chunked:
        chunk_rows(model, s, exprs, coincident, isolate, notes)
    if split:
        mark[len(coincident) - 1] = VECTOR
    may_parallel = bool(opts.parallel and not pinned)
    parallel = _choice(opts, key, "parallel") if may_parallel else None
    if parallel is not None:
        tuned.append("parallel")
        if parallel < 0:
            notes.append(f"parallel: band [{s.name}]: serial (tuned)")
        elif parallel < len(coincident) and parallel not in mark:
            mark[parallel] = PARALLEL
            notes.append(f"parallel: band [{s.name}]: member {parallel} ({exprs[s.name][parallel]}) (tuned)")
        else:
            notes.append(f"parallel: band [{s.name}]: tuned member {parallel} ignored: not a free member of "
                         f"the {len(coincident)}")
    elif may_parallel and coincident[0] and 0 not in mark and \
            extent_of(model, [s], exprs, 0) >= max(opts.min_parallel, 2) and _work([s]) >= opts.min_parallel_work:
        mark[0] = PARALLEL
    if decided is not None:
        decided[key] = BandFacts(key, (s.name,), tuple(s.dims[q] for q in base), tuple(base.index(q) for q in dims),
                               True, len(coincident), tuple(coincident),
                               next((q for q, m in mark.items() if m == PARALLEL), -1), may_parallel,
                               VECTOR in mark.values(), tuned=tuple(tuned))
    if tail is not None:
        tail = (last, tuple(tail[s.name]), tuple(extents(s)[d] for d in tail[s.name]),
                extent_of(model, [s], exprs, last + 1) if split else 1)
    return exprs, coincident, mark, isolate, tail


def shape(model: PolyModel, deps: Deps, tree: isl.Schedule, opts: TreeOptions) -> Shaped:
    first = broadcasts(model, deps)
    notes: list[str] = []
    groups = split_serial(model, deps, _top_groups(tree), notes)
    serial = _names(first) if first is not None else set()

    def legal(parts, extra: list[str]) -> Shaped:
        shaped = _shape(model, deps, parts, opts, serial, [*notes, *extra])
        check_legal(shaped.schedule, deps)
        return shaped
    # the boldest grouping first; each that fails the legality check gives way to the next
    blocked = chunked_groups(model, groups, opts.chunked, notes) if opts.chunked else None
    if blocked is not None:
        try:
            return legal(blocked, [])
        except IllegalSchedule:
            notes.append("fusion: the block-by-block column sums failed the legality check; isl's parts used")
    merged = merge_parts(model, deps, groups, opts.input_fusion) if len(groups) > 1 else groups
    if len(merged) < len(groups):
        try:
            return legal(merged, [
                f"fusion: isl's {len(groups)} top-level parts share their outer loops (the same dims of "
                f"every statement, no dependence across them); merged into {len(merged)}, each part's statements "
                "run per iteration of them: "
                + "; ".join(f"{len(b.upas)} loop(s)" for _, b in merged if isinstance(b, Merged))])
        except IllegalSchedule:
            pass
    return legal(groups, [])


def _shape(model: PolyModel, deps: Deps, groups, opts: TreeOptions, serial: set[str], notes: list[str]) -> Shaped:
    """The tree of `groups` (top-level parts); a part of statements in `serial` alone (the
    broadcasts run first: a few thousand points, less work than a thread-pool dispatch, ~5 us
    here) gets no parallel loop."""
    ctx = model.ctx
    tiles: dict[str, tuple[int, ...]] = {}
    coalesced: dict[str, Coalesced] = {}
    decided: dict[str, BandFacts] = {}
    order = {s.name: (s.position, 0 if s.kind == "init" else 1) for s in model.statements}
    root = isl.Schedule.from_domain(model.domain).get_root().child(0)
    if len(groups) > 1:
        flist = isl.UnionSetList.alloc(ctx, len(groups))
        for f, _ in groups:
            flist = flist.add(f)
        root = root.insert_sequence(flist)
        notes.append(f"fusion: isl split the kernel into {len(groups)} parts run in sequence")
    for g, (filt, band) in enumerate(groups):
        leaf = root.child(g).child(0) if len(groups) > 1 else root
        if isinstance(band, Merged):
            leaf = _merged_group(model, leaf, band, opts, notes, tiles, f"part {g}", coalesced, order, decided)
        else:
            stmts = sorted((model.statement(st.get_tuple_name()) for st in sets_of(filt)), key=lambda s: order[s.name])
            here = dataclasses.replace(opts, parallel=False) if _names(filt) <= serial else opts
            leaf = _group(model, leaf, stmts, band, here, notes, tiles, f"part {g}", coalesced, decided=decided)
        root = _up_to_depth(leaf, 1)
    return Shaped(root.get_schedule(), notes, tiles, coalesced, decided)


def _up_to_depth(node, depth: int):
    while node.get_tree_depth() > depth:
        node = node.parent()
    return node


def _merged_group(model, leaf, m: Merged, opts, notes, tiles, where, coalesced, order, decided):
    """The shared loop (parallel when the work allows), and below it each original part built
    as `_group` builds a top-level part, its shared dim pinned and no parallel loop of its own;
    where the shared loops are all of every statement's (`_whole_loops`), one fused band. An
    elementwise part that shares vector math with a reduction's part runs in the reduction's
    loops where it can (riders.py)."""
    ctx = model.ctx
    stmts = [model.statement(n) for n in m.rows]
    if _whole_loops(stmts, m):
        return _group(model, leaf, sorted(stmts, key=lambda s: order[s.name]), _one_band(model, m), opts, notes,
                      tiles, where, coalesced, decided=decided)
    node = leaf.insert_partial_schedule(isl.MultiUnionPwAff.from_union_pw_aff(m.upas[0]))
    node = node.band_set_permutable(1).band_member_set_coincident(0, 1)
    if _parallel_mark(model, stmts, {s.name: [s.dims[m.rows[s.name][0]]] for s in stmts}, [True], opts, notes, where):
        node = node.insert_mark(isl.Id(PARALLEL, context=ctx)).child(0)
    for upa in m.upas[1:]:  # the inner shared loops run serially inside each thread's rows
        node = node.child(0).insert_partial_schedule(isl.MultiUnionPwAff.from_union_pw_aff(upa))
        node = node.band_set_permutable(1).band_member_set_coincident(0, 1)
    riders = find_riders(model, m.parts, m.rows, opts, _arrays) if opts.math else {}
    built = riders and _parts_below_shared(model, node, m, opts, where, order, riders)
    seq, more_notes, more_tiles, more_coalesced, more_decided = built or _parts_below_shared(
        model, node, m, opts, where, order, {})
    notes += more_notes
    tiles.update(more_tiles)
    coalesced.update(more_coalesced)
    decided.update(more_decided)
    return seq


def _parts_below_shared(model, node, m: Merged, opts, where, order, riders):
    """The sequence of `m`'s parts below the shared loops at band `node`, each built as `_group`
    builds a top-level part; a rider's part is its host's (riders.py). (sequence node, notes,
    tiles, coalesced, band facts), or None when a rider's offset is no sum of its loop iterators there."""
    ctx = model.ctx
    notes: list[str] = []
    tiles: dict = {}
    coalesced: dict = {}
    decided: dict = {}
    gone = {r.stmt.name for r in riders.values()}
    parts = []
    for f, band in m.parts:
        names = _names(f)
        if names <= gone:
            continue
        for host in names & set(riders):
            f = f.union(isl.UnionSet.from_set(riders[host].stmt.domain))
        parts.append((f, band))
    depth = len(m.upas)
    flist = isl.UnionSetList.alloc(ctx, len(parts))
    for f, _ in parts:
        flist = flist.add(f)
    seq = node.child(0).insert_sequence(flist)
    inner_opts = dataclasses.replace(opts, parallel=False)
    for c, (filt, band) in enumerate(parts):
        part = sorted((model.statement(st.get_tuple_name()) for st in sets_of(filt) if st.get_tuple_name() not in gone),
                      key=lambda s: order[s.name])
        rest = band.band_split(depth).child(0) if band is not None and band.band_n_member() > depth else None
        node = _group(model, seq.child(c).child(0), part, rest, inner_opts, notes, tiles, f"{where}.{c}",
                      coalesced, outer={s.name: set(m.rows[s.name]) for s in part}, riders=riders, decided=decided)
        seq = _up_to_depth(node, seq.get_tree_depth())
    for host, r in riders.items():
        leaf = _leaf_of(seq, r.stmt.name)
        terms = linear_terms(leaf, r) if leaf is not None else None
        if terms is None:
            return None
        exts, shares = extents(r.stmt), opts.math[r.stmt.name] & opts.math[host]
        coalesced[r.stmt.name] = Coalesced(-1, r.dims, tuple(exts[d] for d in r.dims), 1, terms, shares)
        notes.append(f"fusion: {where}: {r.stmt.name} runs in the loops of {host}: both evaluate "
                     f"{', '.join(sorted(shares))}, and {host} walks "
                     f"{r.array} once in its own order, which {r.stmt.name}'s flat offset follows "
                     "(one loop body: the shared math runs once)")
    return seq, notes, tiles, coalesced, decided


def _leaf_of(node, name: str):
    """The leaf below `node` whose statements include `name`, if one."""
    if node.get_type() == _T.leaf:
        return node if name in _names(node.get_domain()) else None
    for c in range(node.n_children()):
        child = node.child(c)
        if child.get_type() == _T.filter and name not in _names(child.filter_get_filter()):
            continue
        found = _leaf_of(child, name)
        if found is not None:
            return found
    return None


def _whole_loops(stmts, m: Merged) -> bool:
    """Do the shared loops run every dim of every statement, all elementwise? Then the parts
    isl split apart are one loop nest after all, built as one fused band (`_one_band`) that
    coalesces and vectorises like any other: as nested single loops with nothing below them,
    every statement was a scalar loop (deep_fm's [8000] `~5606`, kernel alone, A/B: 0.134 ->
    0.078 ms)."""
    return all(s.kind == "compute" and len(m.rows[s.name]) == len(m.upas)
               and set(m.rows[s.name]) >= {d for d, e in enumerate(extents(s)) if e > 1} for s in stmts)


def _one_band(model, m: Merged):
    """The shared loops as one permutable, coincident band (of a throwaway tree), which `_group`
    builds on like a band isl returned."""
    mupa = isl.MultiUnionPwAff.from_union_pw_aff(m.upas[0])
    for upa in m.upas[1:]:
        mupa = mupa.flat_range_product(isl.MultiUnionPwAff.from_union_pw_aff(upa))
    domain = None
    for f, _ in m.parts:
        domain = f if domain is None else domain.union(f)
    node = isl.Schedule.from_domain(domain).get_root().child(0).insert_partial_schedule(mupa)
    node = node.band_set_permutable(1)
    for q in range(len(m.upas)):
        node = node.band_member_set_coincident(q, 1)
    return node


def _group(model, leaf, stmts, band, opts, notes, tiles, where, coalesced, outer=None, riders=None, decided=None):
    """Build one top-level part under `leaf`; returns a node inside what it built. `outer`:
    {statement: dims} that a loop around the part already runs. `riders` {host: Rider}: each
    rider runs in every band of its host (riders.py). A band override (`opts.bands`, key
    "shared:<statements>") may set how many of isl's members stay shared and their order;
    `decided` {band key: BandFacts} receives what was decided for each band built."""
    ctx = model.ctx
    outer = outer or {}
    decided = {} if decided is None else decided
    names = [s.name for s in stmts]
    key = band_key("shared", names)
    keep, consts, clashed, block = 0, [], None, None
    depth_choice = _choice(opts, key, "fusion_depth")
    fusion_depth = opts.fusion_depth if depth_choice is None else depth_choice
    if band is not None:
        mupa = band.band_get_partial_schedule()
        facts = {s.name: (stride1_dims(s)[0], extents(s)) for s in stmts}
        for q in range(band.band_n_member()):
            if q >= fusion_depth:
                notes.append(f"fusion: {where}: stopped at fusion_depth={fusion_depth} shared loop(s)"
                             + (f" (band [{','.join(sorted(names))}], tuned)" if depth_choice is not None else ""))
                break
            dims = member_dims(mupa.get_at(q))
            hits = [dims.get(n) for n in names]
            why = None
            if any(h is None for h in hits):
                why = "a statement lacks it"
            elif len({h[1] for h in hits}) != 1:
                why = "isl shifts statements apart"
            if why:
                notes.append(f"fusion: {where}: isl band member {q} not kept ({why}); "
                              "the rest runs as a sequence in program order")
                break
            consts.append({n: h for n, h in zip(names, hits)})
            keep += 1
        # a kept member that is a statement's stride-1 dim must end up innermost for it: fine when
        # the statement has no loops below the band and the band can be permuted; otherwise cut
        permutable = bool(band.band_get_permutable()) and opts.stride1_innermost

        def has_inner(n) -> bool:
            kept = {consts[m][n][0] for m in range(keep)} | outer.get(n, set())
            return any(e > 1 and d not in kept for d, e in enumerate(facts[n][1]))
        # statements whose stride-1 dims are different kept members: only one can be innermost,
        # so the band ends above the first of them and each runs its own order below it (a
        # transpose's producer computes along its rows, the transpose writes along its own)
        s1 = {n: next((q for q in range(keep) if consts[q][n][0] == facts[n][0]), None) for n in names}
        clash = sorted({q for q in s1.values() if q is not None})
        if len(clash) > 1:
            notes.append(f"fusion: {where}: isl band members {clash} are stride-1 dims of different statements; "
                         f"the band ends above member {clash[0]} and each statement runs its own order below it")
            clashed = {n: d for n, (d, _) in consts[clash[0]].items()}  # each statement's dim there
            keep, consts = clash[0], consts[:clash[0]]
        for q in range(keep):
            strided = [n for n in names if consts[q][n][0] == facts[n][0]
                       and (has_inner(n) or (q != keep - 1 and not permutable))]
            if strided:
                notes.append(f"fusion: {where}: isl band member {q} not kept (it is the stride-1 dim of "
                             f"{strided[0]}'s largest array and {strided[0]} has loops inside it; outside "
                             "them every access would stride); the rest runs as a sequence in program order")
                keep, consts, clashed = q, consts[:q], None
                break
    pinned = {s.name: {consts[q][s.name][0] for q in range(keep)} | outer.get(s.name, set()) for s in stmts}
    if clashed is not None:
        block = _transpose_block(model, stmts, clashed, pinned, opts, notes, where)
    if keep or block:
        exprs = {s.name: [s.dims[consts[q][s.name][0]] for q in range(keep)] for s in stmts}
        coincident = [bool(band.band_member_get_coincident(q)) for q in range(keep)]
        if keep:
            notes.append(f"fusion: {where}: {len(stmts)} statement(s) fused under {keep} shared loop(s) "
                         f"({', '.join(stmts[0].dims[consts[q][stmts[0].name][0]] for q in range(keep))} of "
                         f"{stmts[0].name})")
        isl_dims = list(exprs[names[0]])
        order = _choice(opts, key, "order")
        if order is not None and sorted(order) != list(range(keep)):
            notes.append(f"order: band [{','.join(sorted(names))}]: tuned order {list(order)} ignored: not a permutation "
                         f"of its {keep} shared loop(s)")
            order = None
        if order is not None:
            exprs, coincident = _reordered(exprs, coincident, list(order))
            notes.append(f"order: band [{','.join(sorted(names))}]: {exprs[names[0]]} (tuned)")
        elif keep and opts.stride1_innermost and band.band_get_permutable():
            exprs, coincident = _stride1_last(stmts, exprs, coincident, pinned, opts, notes, where)
            exprs, coincident = _storage_order(stmts, exprs, coincident, pinned, opts, notes, where)
        used = tuple(isl_dims.index(e) for e in exprs[names[0]])
        if block:  # innermost of the shared loops: the blocks run inside a thread's rows
            for n, e in block.items():
                exprs[n].append(e)
            coincident.append(True)
        leaf = _fused_band(model, leaf, stmts, exprs, coincident, pinned, opts, notes, tiles, where,
                           coalesced, riders, decided)
        if key in decided:
            tuned = tuple(t for t, c in (("fusion_depth", depth_choice), ("order", order)) if c is not None)
            decided[key] = dataclasses.replace(
                decided[key], dims=tuple(isl_dims), order=used, permutable=bool(band and band.band_get_permutable()),
                isl_members=band.band_n_member() if band is not None else 0, kept=keep,
                tuned=tuned + decided[key].tuned)
    # below a block loop (which may be the parallel one) the statements' own loops stay serial
    inner_opts = dataclasses.replace(opts, parallel=False) if block else opts
    inner = [(s, _statement_band(model, s, pinned[s.name], inner_opts, notes, decided)) for s in stmts]

    def place(node, group, spec):
        exprs, coincident, mark, isolate, tail = spec
        depth = node.get_schedule_depth()
        node = _insert_band(node, ctx, group, {s.name: exprs[group[0].name] for s in group}, coincident, mark,
                            isolate, riders)
        if tail is not None:
            for s in group:
                coalesced[s.name] = Coalesced(depth + tail[0], *tail[1:])
        return node
    if len(stmts) == 1:
        if inner[0][1] is not None:
            leaf = place(leaf, stmts, inner[0][1])
        return leaf
    groups = _sibling_groups(inner, pinned, notes, where)
    flist = isl.UnionSetList.alloc(ctx, len(groups))
    for group, _ in groups:
        dom = isl.UnionSet.from_set(group[0].domain)
        for s in group[1:] + [riders[t.name].stmt for t in group if t.name in (riders or {})]:
            dom = dom.union(isl.UnionSet.from_set(s.domain))
        flist = flist.add(dom)
    seq = leaf.insert_sequence(flist)
    for c, (group, spec) in enumerate(groups):
        node = seq.child(c).child(0)
        if spec is not None:
            node = place(node, group, spec)
        seq = _up_to_depth(node, seq.get_tree_depth())
    return seq


def _transpose_block(model, stmts, dims: dict[str, int], pinned, opts, notes, where) -> dict[str, str] | None:
    """Where a transpose (a copy writing along `dims`, a shared dim) and its producer (computing
    along another) part below the shared loops, the producer's intermediate for one iteration of
    them is the whole plane, often more than L2: yolo ~4991 wrote 1.4 MB per batch of
    [32, 256, 52, 52] float16, then the transpose read it back from L3. Blocking the shared dim
    by B keeps B planes' intermediate in L2 and lets each stay cache-resident between its write
    and its transposed read. B: the smallest divisor of the dim's extent that is a multiple of
    the transpose's register tile along it, writes whole cache lines of the transposed output,
    and keeps every statement's vector whole ({statement: its block member}), or None."""
    ext = {extents(s)[dims[s.name]] for s in stmts}
    if len(ext) != 1:
        return None
    E = ext.pop()
    quantum, line, footprint = 1, 1, 0  # B's divisor; output elements per cache line; intermediate bytes per unit of B
    for s in stmts:
        d, names = dims[s.name], [s.dims[q] for q in range(len(s.dims)) if q not in pinned[s.name]]
        inner = prod(e for q, e in enumerate(extents(s)) if q not in pinned[s.name] and q != d)
        if any(stride1_dim(m) == d for m in maps_of(s.writes)):  # a transpose: its tile divides B
            plan = transpose_plan(s, names, [True] * len(names), opts)
            if plan is None or d not in plan.sizes or d in plan.partial:  # a partial tile divides no block
                return None
            quantum = lcm(quantum, plan.sizes[d])
            line = max(line, line_elements(s, opts))
            continue
        quantum = lcm(quantum, opts.lanes.get(s.name, 1) // gcd(opts.lanes.get(s.name, 1), inner))
        for a in _arrays(s.writes) - set(opts.shapes):  # intermediates (outputs are not read back)
            footprint += inner * opts.array_bits.get(a, 32) // 8
    B = next((b for b in range(max(quantum, line), E) if E % b == 0 and b % quantum == 0), None)
    if not footprint or B is None or B * footprint > opts.l2_bytes // 2:
        return None
    notes.append(f"fusion: {where}: the transposed dim ({stmts[0].dims[dims[stmts[0].name]]} of {stmts[0].name}, "
                 f"{E}) shared in blocks of {B}: the producer's intermediate per block "
                 f"({B * footprint} bytes) stays in L2 ({opts.l2_bytes} bytes) for the transpose")
    return {s.name: f"floor(({s.dims[dims[s.name]]}) / {B})" for s in stmts}


def _sibling_groups(inner, pinned, notes, where):
    """Consecutive statements below a fusion cut whose own bands are the same loops (same
    member expressions over the same extents, same marks) and that share no array they write
    run in one loop nest: yolo's two elementwise outputs beside a transpose read their three
    inputs once instead of twice. [(statements, spec)]."""
    groups: list = []
    for s, spec in inner:
        if groups and spec is not None and groups[-1][1] is not None:
            g, gspec = groups[-1]
            first = g[0]
            same = (gspec[0][first.name] == spec[0][s.name] and gspec[1:] == spec[1:]
                    and extents(first) == extents(s) and pinned[first.name] == pinned[s.name]
                    and TRANSPOSE not in spec[2].values())
            if same and all(not (_arrays(t.writes) & (_arrays(s.reads) | _arrays(s.writes)))
                            and not (_arrays(s.writes) & _arrays(t.reads)) for t in g):
                g.append(s)
                notes.append(f"fusion: {where}: {s.name} runs in the loops of {first.name} (the same loops, "
                             "no array in common that either writes)")
                continue
        groups.append(([s], spec))
    return groups


def _arrays(um: isl.UnionMap) -> set[str]:
    return {m.get_tuple_name(isl.dim_type.out) for m in maps_of(um)}


def _fused_band(model, leaf, stmts, exprs, coincident, pinned, opts, notes, tiles, where, coalesced, riders=None,
                decided=None):
    """The shared band; a band override (key "shared:<statements>") may set its tile sizes, its
    parallel member and whether its innermost member is vectorised."""
    key = band_key("shared", [s.name for s in stmts])
    label = f"band [{key.split(':', 1)[1]}]"
    tile, vector_choice = _choice(opts, key, "tile"), _choice(opts, key, "vector")
    tuned = ["tile"] * (tile is not None) + ["vector"] * (vector_choice is False)
    if tile is not None:
        opts = dataclasses.replace(opts, tile=tuple(tile))
    if vector_choice is False:
        notes.append(f"vector: {label}: scalar (tuned)")
    parallel_choice = _choice(opts, key, "parallel") if opts.parallel else None
    if parallel_choice is not None:
        tuned.append("parallel")

    def done(node, texprs, tco, mark, sizes=()):
        if decided is not None:
            decided[key] = BandFacts(key, tuple(s.name for s in stmts), (), (), False, len(tco), tuple(tco),
                                     next((q for q, m in mark.items() if m == PARALLEL), -1), bool(opts.parallel),
                                     VECTOR in mark.values(), tuple(sizes), tuned=tuple(tuned))
        return node

    def parallel_mark(texprs, tco):
        if parallel_choice is None:
            return _parallel_mark(model, stmts, texprs, tco, opts, notes, where)
        if parallel_choice < 0:
            notes.append(f"parallel: {label}: serial (tuned)")
            return {}
        if parallel_choice >= len(tco):
            notes.append(f"parallel: {label}: tuned member {parallel_choice} ignored: the band has {len(tco)}")
            return {}
        notes.append(f"parallel: {label}: member {parallel_choice} ({texprs[stmts[0].name][parallel_choice]}) (tuned)")
        return {parallel_choice: PARALLEL}
    ctx = model.ctx
    keep = len(coincident)
    transposed = keep >= 2 and len(_stride1_members(stmts, exprs)) > 1  # a big array read across
    if transposed and not opts.tile and (got := register_transpose_tile(stmts, exprs, coincident, opts,
                                                                     notes, where)) is not None:
        texprs, tco, sizes, isolate = got
        tiles[where] = sizes
        mark = parallel_mark(texprs, tco)
        mark[len(tco) - len(sizes)] = TRANSPOSE
        return done(_insert_band(leaf, ctx, stmts, texprs, tco, mark, isolate, riders), texprs, tco, mark, sizes)
    if keep >= 2 and (opts.tile or transposed):
        # tile only the members some array walks with stride 1 (the written array's and the
        # transposed read's); the others stay whole loops outside the tiles
        K = _stride1_members(stmts, exprs) if transposed else list(range(keep))[-len(opts.tile):]
        exts = [extent_of(model, stmts, exprs, q) for q in K]
        model_sizes = cache_tile(opts, len(K), exts)
        sizes = tuple(min(t, e) for t, e in zip(tuple(opts.tile[:len(K)]) + model_sizes[len(opts.tile):], exts))
        why = "tuned" if tile is not None else "config" if opts.tile else \
            "an array is read across its stride-1 dim; cache model (half of L1)"
        notes.append(f"tiling: {where}: members {K} of the fused band tiled {list(sizes)} ({why})")
        if tile is not None:
            notes.append(f"tiling: {label}: tile {'x'.join(map(str, sizes))} (tuned)")
        tiles[where] = sizes
        rest = [q for q in range(keep) if q not in K]
        size = dict(zip(K, sizes))
        texprs = {n: [v[q] for q in rest] + [f"floor(({v[q]}) / {size[q]})" for q in K] + [v[q] for q in K]
                  for n, v in exprs.items()}
        tco = [coincident[q] for q in rest] + [coincident[q] for q in K] * 2
        mark = parallel_mark(texprs, tco)
        if vector_choice is not False and vector_tile(stmts, texprs, tco, K, sizes, exts, opts, notes, where):
            mark[len(tco) - 1] = VECTOR
        return done(_insert_band(leaf, ctx, stmts, texprs, tco, mark, riders=riders), texprs, tco, mark, sizes)
    all_pinned = not any(_has_inner_loops(s, pinned) for s in stmts)
    tail = None
    if all_pinned:
        # member 0 stays whole for the thread pool
        exprs, coincident, tail = coalesce_tail(model, stmts, exprs, coincident, opts, notes, where,
                                                 first=1 if opts.parallel else 0)
    mark = parallel_mark(exprs, coincident)
    last = len(coincident) - 1
    isolate = {} if tail is None else None  # coalesced: codegen needs both iterators of the split
    vector = vector_choice is not False and all_pinned and (tail is not None or all(
        s.dims.index(exprs[s.name][last]) in stride1_dims(s)[1] for s in stmts)) and \
        _vector_split(model, opts, stmts, exprs, coincident, last, notes, where, isolate, tail)
    if vector:
        mark[last + 1] = VECTOR
    if tail is not None:
        lanes = extent_of(model, stmts, exprs, last + 1) if vector else 1
        for s in stmts:
            exts, dims = extents(s), tail[s.name]
            coalesced[s.name] = Coalesced(leaf.get_schedule_depth() + last, tuple(dims),
                                          tuple(exts[d] for d in dims), lanes)
    return done(_insert_band(leaf, ctx, stmts, exprs, coincident, mark, isolate, riders), exprs, coincident, mark)


def _has_inner_loops(s: Statement, pinned: dict[str, set[int]]) -> bool:
    """The statement has dims of extent > 1 that the pinned (shared) loops do not run."""
    return len(pinned[s.name]) < sum(e > 1 for e in extents(s))


def _by_stride(slots: list[int], stride) -> list[int]:
    """`slots` ordered by `stride(slot)`, largest first (storage order); ties keep their order."""
    return sorted(slots, key=lambda k: -stride(k))


def _permuted(n: int, slots: list[int], ranked: list[int]) -> list[int]:
    """Positions 0..n-1 with `slots` filled from `ranked`: what each position takes."""
    order = list(range(n))
    for q, m in zip(slots, ranked):
        order[q] = m
    return order


def _storage_order(stmts, exprs, coincident, pinned, opts, notes, where):
    """In a permutable fused band over a reduction whose update has loops inside the band, the
    coincident members in the order of their strides in the update's largest read: the rule of
    `_statement_band` (a reduction walks its input in storage order) for the rows a reduction
    shares with its init. yolo's loss ~3153 summed chunks of 1248 floats of its [32, 16224]
    input with the 13 chunks of a batch row outermost and the 32 rows inside: each step jumped
    16224 floats, and the 13 parallel iterations split 7/6 over 2 threads."""
    ups = [s for s in stmts if s.kind == "update"]
    if not ups or not all(_has_inner_loops(s, pinned) for s in ups):
        return exprs, coincident
    # an update that reads only intermediates (a vector partial's final lane sum, ~2380) walks
    # no memory the order could serve
    ups = [s for s in ups if next(_argument_reads(s, opts), None) is not None]
    if not ups:
        return exprs, coincident
    slots = [q for q, co in enumerate(coincident) if co]
    ranked = None
    for s in ups:
        strides = _dim_strides(s, opts)
        if strides is None:
            return exprs, coincident
        mine = _by_stride(slots, lambda q: strides[s.dims.index(exprs[s.name][q])])
        if ranked is not None and mine != ranked:
            return exprs, coincident
        ranked = mine
    if ranked == slots:
        return exprs, coincident
    exprs, coincident = _reordered(exprs, coincident, _permuted(len(coincident), slots, ranked))
    notes.append(f"order: {where}: fused members by their stride in {ups[0].name}'s largest read (the band "
                 f"is permutable): {exprs[stmts[0].name]}")
    return exprs, coincident


def _stride1_last(stmts, exprs, coincident, pinned, opts, notes, where):
    """In a permutable fused band (any member order is legal) of statements with no inner
    loops: the storage order their arrays share where there is one (`_storage_ranked`), else
    the member every statement walks its largest array along with stride 1 moved innermost."""
    want = set()
    for s in stmts:
        if _has_inner_loops(s, pinned):
            return exprs, coincident  # this statement has inner loops: they are innermost anyway
        best = stride1_dims(s)[0]
        if best is None or s.dims[best] not in exprs[s.name]:
            return exprs, coincident
        want.add(exprs[s.name].index(s.dims[best]))
    if len(want) != 1:
        return exprs, coincident
    stored = _storage_ranked(stmts, exprs, coincident, opts)
    if stored is not None:
        order = _permuted(len(coincident), [q for q, co in enumerate(coincident) if co], stored)
        if order == list(range(len(coincident))):
            return exprs, coincident
        exprs, coincident = _reordered(exprs, coincident, order)
        notes.append(f"order: {where}: fused members in the storage order of every array the statements "
                     f"access (the band is permutable): {exprs[stmts[0].name]}")
        return exprs, coincident
    q = want.pop()
    last = len(coincident) - 1
    if q == last:
        return exprs, coincident
    order = [m for m in range(len(coincident)) if m != q] + [q]
    notes.append(f"order: {where}: fused member {q} ({exprs[stmts[0].name][q]} of {stmts[0].name}) is the "
                 "stride-1 dim; moved innermost (the band is permutable)")
    return _reordered(exprs, coincident, order)


def _reordered(exprs, coincident, order):
    """The band's members in `order` (position -> member it takes)."""
    return {n: [v[m] for m in order] for n, v in exprs.items()}, [coincident[m] for m in order]


def _storage_ranked(stmts, exprs, coincident, opts) -> list[int] | None:
    """The coincident members by stride, largest first, when every full-size kernel-argument
    access of every statement (its writes and big reads) ranks them alike: elementwise
    statements, not transposes. isl may order a band batch-innermost (yolo's [32, 52, 52, 3]
    elementwise pair ran its 32 batches between the 52 x 52 grid and the 3 anchors: every step
    a jump of 8112 floats, 1.7x the plain schedule)."""
    if any(s.kind != "compute" for s in stmts):
        return None  # a reduction's order is _storage_order's (bert's row sums lost 1.3-4x here)
    slots = [q for q, co in enumerate(coincident) if co]
    ranked = None
    for s in stmts:
        big = {m.get_tuple_name(isl.dim_type.out) for m in big_accesses(s)}
        for m in maps_of(s.writes) + maps_of(s.reads):
            name = m.get_tuple_name(isl.dim_type.out)
            shape = opts.shapes.get(name)
            if name not in big or shape is None:
                continue
            strides = flat_strides(s, m, shape)
            if strides is None:
                return None
            mine = _by_stride(slots, lambda q: strides[s.dims.index(exprs[s.name][q])])
            if ranked is not None and mine != ranked:
                return None
            ranked = mine
    return ranked


def _stride1_members(stmts, exprs) -> list[int]:
    """Fused members along which some big access walks with stride 1, plus the innermost."""
    out = {len(exprs[stmts[0].name]) - 1}
    for s in stmts:
        fused = [s.dims.index(e) if e in s.dims else None for e in exprs[s.name]]  # None: a block
        for m in big_accesses(s):
            d = stride1_dim(m)
            if d is not None and d in fused and \
                    _used_after(m, [f for f in fused[fused.index(d) + 1:] if f is not None]):
                out.add(fused.index(d))
    return sorted(out)


def _used_after(m: isl.Map, later: list[int]) -> bool:
    """Does the access depend on a dim looped inside its stride-1 dim? Only then is it read
    across: a read broadcast along the inner dims ([..., 3, 1] under [..., 3, 2]) walks in loop
    order and needs no tile."""
    g = m.gist_domain(m.domain())
    return any(g.involves_dims(isl.dim_type.in_, d, 1) for d in later)


def _work(stmts) -> int:
    n = 0
    for s in stmts:
        k = 1
        for e in extents(s):
            k *= e
        n += k
    return n


def _parallel_mark(model, stmts, exprs, coincident, opts, notes, where) -> dict[int, str]:
    if not opts.parallel:
        return {}
    if _work(stmts) < opts.min_parallel_work:
        notes.append(f"parallel: {where}: {_work(stmts)} instances, under {opts.min_parallel_work}; serial")
        return {}
    for q, co in enumerate(coincident):
        if co and extent_of(model, stmts, exprs, q) >= max(opts.min_parallel, 2):
            notes.append(f"parallel: {where}: member {q} ({exprs[stmts[0].name][q]} of {stmts[0].name})")
            return {q: PARALLEL}
    notes.append(f"parallel: {where}: no coincident member with enough iterations; serial")
    return {}
