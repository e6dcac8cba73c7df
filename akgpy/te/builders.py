"""TE builders: one function per op name, `builder(lowerer, op, operands, out) -> te.Tensor`.

This table is the TE view of the op table in akgpy.ops.registry (same keys, checked by a
test). A builder describes *what* is computed over the declared output shape; how the
loops run is the scheduler's business.
"""
from __future__ import annotations

from math import prod
from typing import TYPE_CHECKING, Callable

from tvm import te, tirx

from .. import dtypes
from ..errors import UnsupportedOpError
from ..graph.ir import NZ, Op, Tensor
from ..ops.registry import OPS, Category, canonical, lookup, matmul_dims, reduce_axes
from . import fastmath
from .extrema import nan_extremum
from .index import digit_groups, logical_to_nz, nz_to_logical, repeats_every, reshape_index
from .operand import Operand, compute_dtype, logical, storage

if TYPE_CHECKING:  # the Lowerer drives the builders (te/lower.py imports this module)
    from .lower import Lowerer


def _real_only(op: Op, ins: list[Operand]) -> None:
    for o in ins:
        if o.is_complex:
            raise UnsupportedOpError(f"{op.name} on complex operands is not supported (only Complex, CReal, "
                                     "CImag, BroadcastTo, Reshape and Transpose handle complex64)", op=op.name, tensor=o.desc.name)


def elementwise(fn: Callable) -> Callable:
    """out[i] = fn(*operand values at i), computed in the compute dtype, rounded to out dtype."""
    def build(lw: Lowerer, op: Op, ins: list[Operand], out: Tensor):
        _real_only(op, ins)
        lg = logical(ins, out)
        return lw.compute(out.shape, lambda *i: _to(_expr(fn(*[o.value(out, i, lg) for o in ins])), out.dtype))
    return build


def math(vector_fn: Callable, libm_fn: Callable, half_fn: Callable | None = None) -> Callable:
    """An elementwise builder using `vector_fn` (given the operand's value range, which lets it
    skip special cases) when the Lowerer asks for vector math, else libm; `half_fn` in place of
    `vector_fn` where the result is float16."""
    lib = elementwise(libm_fn)

    def build(lw: Lowerer, op: Op, ins: list[Operand], out: Tensor):
        if not getattr(lw, "vector_math", True):
            return lib(lw, op, ins, out)
        rng = lw.value_range(op.inputs[0])
        fn = half_fn if half_fn is not None and out.dtype == "float16" else vector_fn
        return elementwise(lambda x: fn(x, rng))(lw, op, ins, out)
    build.vector_math = True
    return build


def dt(x) -> str:
    """dtype of a PrimExpr (TVM 0.27 calls it `ty`)."""
    return str(x.ty)


def _nonzero(x):
    """x != 0 as C and numpy mean it, NaN included: TVM emits a float != as LLVM's ordered
    `fcmp one`, false for NaN."""
    ne = x != tirx.const(0, dt(x))
    return tirx.Or(ne, tirx.isnan(x)) if dt(x).startswith(("float", "bfloat")) else ne


def _to(x, dtype: str):
    if dtype == "bool" and dt(x) != "bool":
        return _nonzero(x)
    if isinstance(x, tirx.Cast) and dt(x.value) == dtype and dtypes.widens_exactly(dtype, dt(x)):
        # back to the type it was widened from: the value, not a conversion pair (an AddN's
        # first float16 term went float16 -> float32 -> float16, two conversions per element)
        return x.value
    return x.astype(dtype) if dt(x) != dtype else x


def fence(x):
    """Keep LLVM from contracting this product into an FMA with a following add: the graph
    rounds every op, so must the kernel (llvm.arithmetic.fence costs no instruction)."""
    if not dt(x).startswith("float"):
        return x
    return tirx.call_llvm_pure_intrin(dt(x), "llvm.arithmetic.fence", x)


def _product(a, b):
    """a * b behind the FMA fence, except a product by a constant 1 or -1: its contraction into
    an FMA is exact, and fenced it would simplify to `fence(x)`, which the fence of a Sub's
    repeated operand (`arith`) is structurally equal to: x * 1 - x folded to 0, also for inf."""
    if any(isinstance(v, tirx.FloatImm) and abs(v.value) == 1.0 for v in (a, b)):
        return a * b
    return fence(a * b)


def _one(x):
    return tirx.const(1, dt(x))


def _div(a, b):
    if dt(a).startswith(("int", "uint")):
        return _int_div(a, b)
    return a / b


def _int_div(a, b):
    """a / b truncated, with numpy's answers where the hardware traps (SIGFPE): a / 0 is 0 and,
    in two's complement, INT_MIN / -1 is INT_MIN. Every lane divides by 1 where b is 0 or -1, and
    the quotient is then scaled by 0 or -1 in unsigned arithmetic, which wraps. No Select on b
    holds the division: TVM's simplifier takes a Select's condition as given in its branches and
    would drop the guard there, while a vector loop computes both branches in every lane."""
    t = dt(a)
    zero, one = tirx.const(0, t), tirx.const(1, t)
    if t.startswith("uint"):
        return tirx.truncdiv(a, tirx.Select(b == zero, one, b)) * (b != zero).astype(t)
    minus_one = tirx.const(-1, t)
    q = tirx.truncdiv(a, tirx.Select(tirx.Or(b == zero, b == minus_one), one, b))
    u = "u" + t
    scale = tirx.Select(b == zero, tirx.const(0, u), tirx.Select(b == minus_one, tirx.max_value(u), tirx.const(1, u)))
    return (q.astype(u) * scale).astype(t)


# -- IEEE arithmetic ----------------------------------------------------------------------------
# TVM's simplifier (at TE construction, in the schedule and in the lowering passes) folds float
# expressions as if no value were NaN, inf or -0: x - x -> 0, (x + y) - y -> x, x == x -> True,
# x * 0 -> 0, x + 0 -> x, 0 / x -> 0, x / c -> x * (1 / c); and x / 0 aborts the process. A
# fenced operand is a call it cannot see into, while LLVM, given no fast-math flags, keeps IEEE
# semantics: so the arithmetic builders fence each operand such a fold could match, nothing more.
_CANCELS = frozenset({"Sub", "Equal"})  # ops TVM folds when an operand repeats in the other


def _inexact_reciprocal(v, dtype: str) -> bool:
    """Does x / v differ from x * (1 / v) for some x? Not where 1 / v is a power of two the
    dtype holds: both then round the same exact product."""
    import numpy as np
    t = np.dtype(dtype).type
    with np.errstate(all="ignore"):
        r = t(1) / t(v)
    return not (np.isfinite(r) and r != 0 and abs(np.frexp(v)[0]) == 0.5 and t(1) / r == t(v))


def _const_folds(v, role: str, dtype: str) -> bool:
    """Would the simplifier fold an op with constant operand `v` in `role` ("term": of + - *,
    "numerator", "divisor", "compared") where IEEE gives another value, or abort on it?"""
    if role == "divisor":
        return v == 0 or _inexact_reciprocal(v, dtype)
    return role != "compared" and v == 0


class _Exprs:
    """What each op's operands are built from once the schedule inlines what it may: the graph
    inputs, reduction and contraction results and constants (by value: two equal constants are
    one expression to the simplifier) their expressions read, per op, in program order (an
    Assign rebinds its target)."""

    def __init__(self, g):
        inlined = (Category.ELEMWISE, Category.BROADCAST, Category.LAYOUT)
        env: dict[str, frozenset] = {}

        def leaves(name: str) -> frozenset:
            if name not in env:
                t = g.tensors[name]
                env[name] = frozenset({("const", t.dtype, repr(t.value)) if t.is_const else name})
            return env[name]
        self.operands: list[list[frozenset]] = []
        for op in g.ops:
            ins = [leaves(n) for n in op.inputs]
            self.operands.append(ins)
            d = OPS.get(op.name)
            out = op.outputs[0]
            if op.name == "Assign":
                env[op.inputs[0]] = env[out] = ins[1]
            elif op.name == "InplaceAssign":
                env[op.inputs[0]], env[out] = ins[1], ins[2]
            elif d is not None and d.category in inlined:
                env[out] = frozenset().union(*ins)
            else:
                env[out] = frozenset({out})


def _exprs(lw: Lowerer) -> _Exprs:
    if getattr(lw, "_ieee_exprs", None) is None:
        lw._ieee_exprs = _Exprs(lw.g)
    return lw._ieee_exprs


def _fenced_operands(lw: Lowerer, op: Op, roles: list[str]) -> list[bool]:
    """Which operands of a float arithmetic op to fence (see above): a constant that would fold
    in its role, a tensor computed from constants alone (a constant once inlined, of a value
    the lowering does not know), and the second operand of a Sub or Equal whose operands read
    a common input, result or constant."""
    g = lw.g
    floats = [g.tensors[n].dtype.startswith(("float", "bfloat")) for n in op.inputs]
    if not any(floats):
        return floats
    ins = _exprs(lw).operands[lw.index]
    fenced = []
    for k, (name, role) in enumerate(zip(op.inputs, roles)):
        t = g.tensors[name]
        if not floats[k]:
            fenced.append(False)
        elif t.is_const:
            fenced.append(_const_folds(t.value, role, compute_dtype(t.dtype)))
        else:
            fenced.append(role != "compared" and all(isinstance(x, tuple) for x in ins[k]))
    if op.name in _CANCELS and ins[0] & ins[1]:
        fenced[1] = floats[1]
    return fenced


def _equal(a, b):
    # TVM's LLVM code generator compares bools as floats (`fcmp oeq <N x i1>`, invalid IR): as int8
    if dt(a) == "bool" and dt(b) == "bool":
        return a.astype("int8") == b.astype("int8")
    return a == b


def arith(fn: Callable, roles: tuple[str, ...]) -> Callable:
    """An elementwise builder (see `elementwise`) whose float operands TVM must not fold away:
    `roles` names each operand's role for `_const_folds`."""
    def build(lw: Lowerer, op: Op, ins: list[Operand], out: Tensor):
        _real_only(op, ins)
        lg = logical(ins, out)
        fenced = _fenced_operands(lw, op, list(roles))

        def f(*i):
            vals = [o.value(out, i, lg) for o in ins]
            return _to(_expr(fn(*[fence(v) if k else v for v, k in zip(vals, fenced)])), out.dtype)
        return lw.compute(out.shape, f)
    return build


# graph ops whose output element is NaN whenever the same element of an input of the output's
# shape is: a NaN reaches a later Maximum through them
_NAN_KEEPING = frozenset({"Add", "Sub", "Mul", "RealDiv", "Neg", "Abs", "Exp", "Log", "Sqrt", "Rsqrt",
                          "Reciprocal", "Tanh", "Erf", "Cast", "AddN"})


def _nan_reaches(g, x: str, y: str) -> bool:
    """Every NaN element of tensor x makes the same element of y NaN."""
    shape = g.tensors[y].shape

    def follow(op):
        if canonical(op.name) not in _NAN_KEEPING or not g.tensors[op.outputs[0]].dtype.startswith("float"):
            return ()
        return [i for i in op.inputs if g.tensors[i].shape == shape and g.tensors[i].dtype.startswith("float")]
    return g.tensors[x].shape == shape and any(t == x for t, _ in g.ancestors(y, follow))


def extremum(is_max: bool) -> Callable:
    """Maximum/Minimum as numpy's: NaN when either operand is (te/extrema.py), with one select
    where a NaN in one operand always reaches the other (leaky ReLU's max(0.1 x, x))."""
    def build(lw: Lowerer, op: Op, ins: list[Operand], out: Tensor):
        a, b = op.inputs
        kw = {"a_nan_in_b": _nan_reaches(lw.g, a, b), "b_nan_in_a": _nan_reaches(lw.g, b, a)}
        return elementwise(lambda x, y: nan_extremum(x, y, is_max, **kw))(lw, op, ins, out)
    return build


def _select(c, x, y):
    return tirx.Select(c if dt(c) == "bool" else _nonzero(c), x, y)


# An AddN's fold is one block per this many terms, each adding its terms to the previous
# block's sum: the inlining bound (schedule/plain.py) then sees blocks of one op's size, and no
# expression is 65,536 terms deep (the op table allows that many; 400 overflowed the stack)
ADDN_BLOCK_TERMS = 32


def addn(lw, op, ins, out):
    """Left fold in the output dtype: every partial sum is rounded, as topi's elemwise_sum does;
    in blocks of ADDN_BLOCK_TERMS terms, the same fold in the same order."""
    _real_only(op, ins)
    lg = logical(ins, out)
    fenced = _fenced_operands(lw, op, ["term"] * len(ins))
    folded = None if any(fenced) else lw.fold_stacked(ins, out)
    if folded is not None:
        return folded
    terms = list(zip(ins, fenced))

    def value(o, k, i):
        return fence(o.value(out, i, lg)) if k else o.value(out, i, lg)

    def block(start: int, partial):
        def f(*i):
            acc = _to(value(*terms[0], i), out.dtype) if partial is None else partial(*i)
            for o, k in terms[max(start, 1):start + ADDN_BLOCK_TERMS]:
                acc = _to(acc.astype(compute_dtype(out.dtype)) + value(o, k, i), out.dtype)
            return acc
        return f

    starts = range(0, len(terms), ADDN_BLOCK_TERMS)
    partial = None
    for n, start in enumerate(starts):
        last = start == starts[-1]
        partial = lw.compute(out.shape, block(start, partial), suffix="" if last else f"_part{n}")
    return partial


def cast(lw, op, ins, out):
    _real_only(op, ins)
    x = ins[0]
    return lw.compute(out.shape, lambda *i: _to(x.load(out, i), out.dtype))


def _expr(x):
    """`a == b` on TE values is a lazy EqualOp; make it a PrimExpr."""
    return x.asobject() if hasattr(x, "asobject") else x


def broadcast_to(lw, op, ins, out):
    x = ins[0]
    if x.is_complex:
        return lw.compute(storage(out)[0], lambda *i: x.load(out, i[:-1], part=i[-1]))
    return lw.compute(out.shape, lambda *i: x.load(out, i))


def reshape(lw, op, ins, out):
    x = ins[0]
    if x.is_complex:
        return lw.compute(storage(out)[0], lambda *i: x.tensor(*reshape_index(x.desc.shape, out.shape, i[:-1]), i[-1]))
    if x.tensor is None:
        return lw.compute(out.shape, lambda *i: x.load(out, i))
    return lw.compute(out.shape, lambda *i: x.tensor(*reshape_index(x.desc.shape, out.shape, i)))


def transpose(lw, op, ins, out):
    x = ins[0]
    perm = list(op.attrs["perm"])
    inv = [perm.index(d) for d in range(len(perm))]
    if x.is_complex:
        return lw.compute(storage(out)[0], lambda *i: x.tensor(*[i[inv[d]] for d in range(len(perm))], i[-1]))
    return lw.compute(out.shape, lambda *i: x.tensor(*[i[inv[d]] for d in range(len(perm))]))


def pad(lw, op, ins, out):
    _real_only(op, ins)
    x = ins[0]
    head, shape = list(op.attrs["head"]), x.desc.shape
    pv = tirx.const(op.attrs.get("pad_val", 0), out.dtype)

    def f(*i):
        inside = tirx.all(*[tirx.all(v >= h, v < h + s) for v, h, s in zip(i, head, shape)]) if i else True
        src = [tirx.max(tirx.min(v - h, s - 1), 0) for v, h, s in zip(i, head, shape)]
        # Not a Select: TVM's simplifier drops the clamp inside a Select's true value (it assumes
        # the condition there) while a Select loads both values, so the padding rows read past
        # the input's ends (tests/test_memory_safety.py). if_then_else loads only when inside;
        # LLVM splits each row into a copy loop and a fill (bench: 1.03-1.10x the Select's time on
        # the four pads of 90-711 MB, Zen 3).
        return tirx.if_then_else(inside, x.tensor(*src), pv)
    return lw.compute(out.shape, f)


def unpad(lw, op, ins, out):
    x = ins[0]
    return lw.compute(out.shape, lambda *i: x.tensor(*i))


def one_hot(lw, op, ins, out):
    idx, on, off = ins
    rank = len(out.shape)
    axis = op.attrs.get("axis", -1) % rank

    def f(*i):
        j = i[axis]
        src = [v for d, v in enumerate(i) if d != axis]
        hit = idx.tensor(*src).astype("int64") == j.astype("int64")
        return tirx.Select(hit, on.load(out, [0] * len(on.desc.shape)).astype(out.dtype),
                           off.load(out, [0] * len(off.desc.shape)).astype(out.dtype))
    return lw.compute(out.shape, f)


# Float sums accumulate in float64 and round once to the output dtype, so a ReduceSum is
# correctly rounded whatever order the schedule adds in (the reference's answer, bit for bit
# but for ties); memory-bound reductions do not notice the wider adds. MatMul/Conv2D keep
# float32 accumulators: they are compute-bound, and their order is part of the algorithm.
SUM_ACC = "float64"
# Longest run a sum accumulates serially; longer sums become partial sums of at most this
# many terms plus a sum of the partials, so that the partials can run in parallel.
SUM_BLOCK = 2048
# A split factor this many times below the block it may fill is no chunking at all
TINY_CHUNK = 16


def largest_divisor(n: int, limit: int) -> int:
    """The largest factor of n not above limit (1 at least): split factors that need no tail."""
    for f in range(max(min(n, limit), 1), 0, -1):
        if n % f == 0:
            return f
    return 1


def _split_reduction(xs, axes):
    """Choose (outer chunk axes, split axis, factor): the trailing axes plus an inner factor of
    one more axis form a block of at most SUM_BLOCK terms; everything outside becomes chunks.
    Exception: once the block is one that interleaved lanes take (`_takes_lanes`), it stops short
    of an axis that a kept dim separates from it, and that axis and all outside it become whole
    chunks: a BatchNorm channel sum over NCHW [32, 256, 14, 14] had taken 8 images into each
    block, which then was not contiguous, and summed every block as one scalar chain (0.99 ms);
    blocks of one image's 14 x 14 sum in lanes (0.21 ms)."""
    block, inner = 1, []
    for a in reversed(axes):
        if inner and any(xs[d] != 1 for d in range(a + 1, inner[-1])) \
                and _takes_lanes(xs, inner[::-1], [xs[b] for b in inner[::-1]]):
            return [b for b in axes if b <= a], None, 1
        if block * xs[a] <= SUM_BLOCK:
            block *= xs[a]
            inner.append(a)
            continue
        f = largest_divisor(xs[a], SUM_BLOCK // block)
        if f * TINY_CHUNK < SUM_BLOCK // block:
            # no divisor near the block: the axis stays whole (a vocabulary of 30522 = 6 x 5087
            # had become 5087 chunks of 6, each a scalar chain; whole, it sums in vector lanes)
            return [b for b in axes if b < a], None, 1
        return [b for b in axes if b < a], a, f
    return [], None, 1


# Interleaved partial sums of a contiguous block with a short innermost dim: 8 float64
# accumulators fill a 512-bit register (two 256-bit ones); 8 int32 or int64 ones half or all of one.
SUM_LANES = 8
MAX_SUM_LANES = 6 * SUM_LANES
LANE_PARTIALS = "_lanes"  # the suffix of those partial sums' block (a column sum's are "_partial")


def _takes_lanes(xs, inner_axes, exts) -> bool:
    """Is the block over `inner_axes` (ascending; extents `exts`) one interleaved lanes sum: x's
    trailing non-unit dims (contiguous), 4 * SUM_LANES terms or more, and an innermost dim too
    short, or not split into whole vectors, for a vector loop of its own (the row rfactor
    handles those)."""
    trailing = [d for d in range(len(xs)) if xs[d] != 1]
    return (bool(inner_axes) and trailing[-len(inner_axes):] == list(inner_axes) and prod(exts) >= 4 * SUM_LANES
            and (exts[-1] % SUM_LANES != 0 or exts[-1] < 2 * SUM_LANES))


def _lane_split(lw, name: str, xs, inner_axes, exts) -> int:
    """Lanes for a flat interleaved sum of each chunk's block (inner axes of extents `exts`), or
    0: only for a block `_takes_lanes`. A multiple of SUM_LANES (up to MAX_SUM_LANES) when the summed
    value reads a broadcast operand whose lane offsets then repeat in every vector (yolo's
    [1, 52, 52, 1, 2] grid under a [.., 3, 2] block), which codegen loads as one vector and a
    shuffle instead of lane by lane; a multiple of twice that when the value is vector math,
    so that its float32 lanes fill whole registers (the grid: 48 lanes, not 24: yolo ~3153
    0.58 -> 0.49 ms, ~5495 0.74 -> 0.56, A/B)."""
    if not _takes_lanes(xs, inner_axes, exts):
        return 0
    block = prod(exts)
    sources = list(lw.g.ancestors(name, _elementwise_inputs))
    reads = [digit_groups(t, exts) for t in _broadcast_reads(lw.g, sources, xs, inner_axes)]
    if not reads:
        return SUM_LANES
    math_ = any(op is not None and getattr(BUILDERS.get(canonical(op.name)), "vector_math", False) for _, op in sources)
    for step in ((2 * SUM_LANES, SUM_LANES) if math_ else (SUM_LANES,)):
        for lanes in range(step, MAX_SUM_LANES + 1, step):
            if 4 * lanes <= block and all(repeats_every(g, block, lanes) for g in reads):
                return lanes
    return SUM_LANES


def _elementwise_inputs(op: Op) -> tuple[str, ...]:
    return op.inputs if lookup(op.name).category == Category.ELEMWISE else ()


def _broadcast_reads(g, sources, xs, inner_axes) -> list[list[tuple[int, int]]]:
    """(block dim, stride) of the block dims each graph input among `sources` (the summed
    value's ancestors through elementwise ops: what the schedule inlines into the sum) uses,
    for the inputs that broadcast over some block dim."""
    out = []
    for t, op in sources:
        if op is not None:
            continue
        tensor = g.tensors[t]
        shape = (1,) * (len(xs) - len(tensor.shape)) + tuple(tensor.shape)
        if tensor.is_const or len(shape) != len(xs) or any(s not in (1, x) for s, x in zip(shape, xs)):
            continue
        if all(shape[a] == xs[a] for a in inner_axes):
            continue
        out.append([(k, prod(shape[a + 1:])) for k, a in enumerate(inner_axes) if shape[a] == xs[a]])
    return out


def _reduce(kind: str):
    def build(lw, op, ins, out):
        _real_only(op, ins)
        x = ins[0]
        xs = x.desc.shape
        all_axes = reduce_axes(op, x.desc)
        axes = [a for a in all_axes if xs[a] != 1]
        kept = [s for d, s in enumerate(xs) if d not in all_axes]
        acc_dt = x.desc.dtype
        if acc_dt == "bool":
            # numpy sums bools as a count, and its max is "any": TVM has neither on 1-bit values
            # (a sum failed an LLVM check, a max found no minimum value for bool)
            acc_dt = "int32" if kind == "sum" else "int8"
        elif kind == "sum":
            acc_dt = SUM_ACC if x.desc.dtype.startswith("float") else compute_dtype(x.desc.dtype)
        total = prod(xs[a] for a in axes)
        outer, split_axis, factor = ([], None, 1)
        if kind == "sum" and total > SUM_BLOCK and acc_dt.startswith("float"):
            outer, split_axis, factor = _split_reduction(xs, axes)
        # chunk dims: whole outer axes, then the outer part of the split axis
        chunk_shape = [xs[a] for a in outer] + ([xs[split_axis] // factor] if split_axis is not None else [])
        inner_axes = [a for a in axes if a not in outer]
        rvars = {a: te.reduce_axis((0, factor if a == split_axis else xs[a]), name=f"k{a}") for a in inner_axes}

        def load(i, chunk, inner):
            """x at kept index i, chunk `chunk`, and the within-chunk index `inner` (axis -> expr),
            in the accumulator dtype."""
            kidx = reshape_index(kept, out.shape, i) if tuple(kept) != tuple(out.shape) else list(i)
            it, ch = iter(kidx), dict(zip(outer, chunk))
            full = []
            for d in range(len(xs)):
                if d in ch:
                    full.append(ch[d])
                elif d == split_axis:
                    full.append(chunk[-1] * factor + inner[d])
                elif d in inner:
                    full.append(inner[d])
                elif d in all_axes:
                    full.append(0)
                else:
                    full.append(next(it))
            v = x.tensor(*full)
            return v.astype(acc_dt) if dt(v) != acc_dt else v

        def body(i, chunk):
            v = load(i, chunk, rvars)
            if not rvars:
                return v
            rv = list(rvars.values())
            return te.sum(v, axis=rv) if kind == "sum" else te.max(v, axis=rv)

        exts = [factor if a == split_axis else xs[a] for a in inner_axes]
        # also without chunks, for an accumulator of 32 bits or more: a row of 999 float16 had
        # no vector partials (none divides it) and summed as one scalar chain of float64 adds,
        # 12.5 ms for [8192, 999]; a float32 max over it was a scalar chain of compares (2.1 ms,
        # most of a softmax). Narrower ones keep the chain: int8 sums ran slower in 8 one-byte
        # lanes, and float16 compares would convert each lane; but a float16 max is exact in
        # float32, and takes float32 lanes: [8192, 999] 5.9 -> 0.40 ms, bert's log-softmax max
        # over 30522 words [1824, 30522] 24.8 -> 3.2 ms (kernel alone, A/B). So does every
        # float16 max: the row rfactor's float16 partials converted each lane back after its
        # compare, and their final reduction was a chain of 32 such steps per row (softmax over
        # [16, 16, 128, 128] 3.05 -> 1.96 ms; the five other corpus graphs with a float16 max,
        # bert's softmaxes and the NZ ones, 0.78-0.89x)
        if kind == "max" and acc_dt == "float16" and lw.vector_math:
            acc_dt = "float32"
        wide_acc = dtypes.to_numpy(acc_dt).itemsize >= 4
        lanes = _lane_split(lw, x.desc.name, xs, inner_axes, exts) if lw.vector_math and (chunk_shape or wide_acc) else 0
        reduce_ = te.sum if kind == "sum" else te.max
        if lanes:
            # the block of each chunk is contiguous in x but its innermost dim is short ([.., 3, 2],
            # [.., 57]): sum it as `lanes` interleaved partials over its flat offset, so the long
            # loop is a vector loop (codegen folds the offset's digits back into one address);
            # a block that does not split evenly sums its last `rem` terms apart
            nc = len(chunk_shape)
            block = prod(exts)
            rem = block % lanes
            kf = te.reduce_axis((0, block // lanes), name="kf")

            def digits(f):
                """The inner axes' indices of flat offset f within a chunk's block."""
                out_, stride = {}, block
                for a, e in zip(inner_axes, exts):
                    stride //= e
                    d = f // stride if stride > 1 else f
                    out_[a] = d if a == inner_axes[0] else d % e
                return out_
            # lanes innermost: the partials' stride-1 dim is the one the vector loop runs along
            part = lw.compute((*chunk_shape, *out.shape, lanes),
                              lambda *i: reduce_(load(i[nc:-1], i[:nc], digits(kf * lanes + i[-1])), axis=[kf]),
                              role="reduce", suffix=LANE_PARTIALS)
            cvars = [te.reduce_axis((0, c), name=f"c{j}") for j, c in enumerate(chunk_shape)]
            lane = te.reduce_axis((0, lanes), name="lane")
            red = lw.compute(out.shape, lambda *i: reduce_(part(*cvars, *i, lane), axis=[*cvars, lane]), role="reduce")
            if rem:
                kt = te.reduce_axis((0, rem), name="kt")
                tail = lw.compute((*chunk_shape, *out.shape),
                                  lambda *i: reduce_(load(i[nc:], i[:nc], digits(block - rem + kt)), axis=[kt]),
                                  role="reduce", suffix="_tail")
                tvars = [te.reduce_axis((0, c), name=f"t{j}") for j, c in enumerate(chunk_shape)]
                tsum = lw.compute(out.shape, lambda *i: reduce_(tail(*tvars, *i), axis=tvars), role="reduce",
                                  suffix="_tails") if tvars else tail
                red = lw.compute(out.shape, lambda *i: red(*i) + tsum(*i) if kind == "sum" else
                                 tirx.max(red(*i), tsum(*i)), suffix="_total")
        elif chunk_shape:
            # chunks outermost: a column sum's partials then keep the kept dims contiguous, so
            # each partial accumulates whole input rows with vector adds
            nc = len(chunk_shape)
            part = lw.compute((*chunk_shape, *out.shape), lambda *i: body(i[nc:], i[:nc]), role="reduce",
                              suffix="_partial")
            cvars = [te.reduce_axis((0, c), name=f"c{j}") for j, c in enumerate(chunk_shape)]
            red = lw.compute(out.shape, lambda *i: te.sum(part(*cvars, *i), axis=cvars), role="reduce")
        else:
            red = lw.compute(out.shape, lambda *i: body(i, ()), role="reduce" if rvars else "elemwise")
        if acc_dt != out.dtype:  # `_to`: a count becomes a bool as != 0, not by its low bit
            return lw.compute(out.shape, lambda *i: _to(red(*i), out.dtype), suffix="_cast")
        return red
    return build


def _widened(lw, o: Operand, acc: str, suffix: str):
    """A contraction's A narrower than the accumulator (float16), converted to it in a stage of
    its own (role "widen"): the contraction template runs it inside each tile, for the tile's
    rows, so the tile's multiply-adds read float32 (schedule/plain._widen_a). Otherwise the
    te.Tensor itself."""
    if o.tensor is None or not o.desc.dtype.startswith("float") or not dtypes.widens_exactly(o.desc.dtype, acc):
        return o.tensor
    return lw.compute(tuple(o.tensor.shape), lambda *i: o.tensor(*i).astype(acc), role="widen", suffix=suffix)


def matmul(lw, op, ins, out):
    a, b = ins[0], ins[1]
    _real_only(op, ins)
    batch, m, k, n = matmul_dims(op, a.desc, b.desc)
    ta, tb = bool(op.attrs.get("transpose_a", False)), bool(op.attrs.get("transpose_b", False))
    acc = "float32" if out.dtype in ("float16", "float32") or a.desc.dtype == "float16" else compute_dtype(out.dtype)
    nb = len(batch)
    at = _widened(lw, a, acc, "_widenA")

    def logical_load(desc: Tensor, tensor, bidx, r, c):
        idx = [*bidx, r, c]
        if desc.format == NZ:
            idx = logical_to_nz(desc, idx)
        return tensor(*idx)

    # Contractions read B along its rows (k) for a vector of columns (n): re-lay a
    # transposed or fractal B out as [batch.., K, N] once so the inner loop is contiguous.
    if tb or b.desc.format == NZ:
        packed = lw.compute((*batch, k, n), lambda *i: logical_load(b.desc, b.tensor, i[:nb], *((i[-1], i[-2]) if tb else (i[-2], i[-1]))),
                            role="pack", suffix="_packB")
        bload = lambda bidx, kk, j: packed(*bidx, kk, j)
    else:
        bload = lambda bidx, kk, j: logical_load(b.desc, b.tensor, bidx, kk, j)
    aload = ((lambda bidx, i, kk: logical_load(a.desc, at, bidx, kk, i)) if ta else
             (lambda bidx, i, kk: logical_load(a.desc, at, bidx, i, kk)))
    rk = te.reduce_axis((0, k), name="k")

    def c_logical(*idx):
        bidx, i, j = idx[:nb], idx[nb], idx[nb + 1]
        return te.sum(aload(bidx, i, rk).astype(acc) * bload(bidx, rk, j).astype(acc), axis=rk)
    c = lw.compute((*batch, m, n), c_logical, role="contract")
    bias = ins[2] if len(ins) == 3 else None
    lout = Tensor(out.name, (*batch, m, n), out.dtype)

    def epilogue(*idx):
        lidx = nz_to_logical(out, idx) if out.format == NZ else list(idx)
        v = c(*lidx)
        if bias is not None:
            v = v + bias.load(lout, lidx).astype(acc)
        return v.astype(out.dtype)
    if bias is None and out.format != NZ and out.dtype == acc:
        return c
    return lw.compute(out.shape, epilogue, suffix="_epilogue")


# A depthwise filter of up to this many taps is written out as one sum per output (no reduce
# axis): the nest is then elementwise over NHWC, its vector loop along the channels, and its
# epilogue runs in the same loop. A 7x7 filter is 49 taps.
MAX_UNROLLED_TAPS = 49


def conv2d(lw, op, ins, out):
    x, w = ins
    _real_only(op, ins)
    sh, sw = tuple(op.attrs.get("stride", (1, 1, 1, 1)))[-2:]
    o, kh, kw, cg = w.desc.shape
    og = o // (x.desc.shape[-1] // cg)  # output channels per group
    acc = "float32" if out.dtype in ("float16", "float32") else compute_dtype(out.dtype)
    pads = tuple(op.attrs.get("pad_list", (0, 0, 0, 0)))
    if cg == 1 and kh * kw <= MAX_UNROLLED_TAPS:
        return _depthwise(lw, _padded_reads(x.tensor, pads), w, out, (sh, sw), og, acc)
    xt = _widened(lw, x, acc, "_widenX")
    if any(pads):
        # The padded input as a block of this kernel, not a PadAkg kernel of its own: the
        # schedule inlines it into the contraction's reads or runs it beside them.
        n, h, wd, c = x.desc.shape
        read = _padded_reads(xt, pads)
        xt = lw.compute((n, h + pads[0] + pads[1], wd + pads[2] + pads[3], c), read, suffix="_padX")
    wp = lw.compute((kh, kw, cg, o), lambda i, j, cc, oo: w.tensor(oo, i, j, cc), role="pack", suffix="_packW")
    rh, rw, rc = te.reduce_axis((0, kh), name="rh"), te.reduce_axis((0, kw), name="rw"), te.reduce_axis((0, cg), name="rc")
    # group oo // og reads input channels [group * cg, group * cg + cg)
    chan = (lambda oo: rc) if og == o else (lambda oo: (oo // og) * cg + rc)
    conv = lw.compute(out.shape, lambda n, h, ww, oo: te.sum(
        xt(n, h * sh + rh, ww * sw + rw, chan(oo)).astype(acc) * wp(rh, rw, rc, oo).astype(acc), axis=[rh, rw, rc]),
        role="contract")
    if acc == out.dtype:
        return conv
    return lw.compute(out.shape, lambda *i: conv(*i).astype(out.dtype), suffix="_cast")


def _padded_reads(x, pads):
    """x[n, h, w, c] read at padded coordinates (pads: top, bottom, left, right), the padding
    reading 0. if_then_else, not Select, loads only inside (see `pad`); the clamp keeps the
    load's index in range for the polyhedral model's access relations."""
    pt, _, pl, _ = pads
    if not any(pads):
        return x
    _, h, wd, _ = (int(d) for d in x.shape)

    def read(n, i, j, c):
        inside = tirx.all(i >= pt, i < pt + h, j >= pl, j < pl + wd)
        src = x(n, tirx.max(tirx.min(i - pt, h - 1), 0), tirx.max(tirx.min(j - pl, wd - 1), 0), c)
        return tirx.if_then_else(inside, src, tirx.const(0, x.dtype))
    return read


def _depthwise(lw, x, w: Operand, out: Tensor, stride, og: int, acc: str):
    """One input channel per group (og outputs each): out[n, h, w, o] = sum over the taps of
    x[n, h * sh + i, w * sw + j, o // og] * w[o, i, j, 0], the taps in row-major order. The
    filter is re-laid out as [kh, kw, O] once, so each tap reads a vector of channels."""
    sh, sw = stride
    _, kh, kw, _ = w.desc.shape
    wp = lw.compute((kh, kw, out.shape[-1]), lambda i, j, oo: w.tensor(oo, i, j, 0), role="pack", suffix="_packW")

    def f(n, h, ww, oo):
        c = oo if og == 1 else oo // og
        total = None
        for i in range(kh):
            for j in range(kw):
                t = x(n, h * sh + i, ww * sw + j, c).astype(acc) * wp(i, j, oo).astype(acc)
                total = t if total is None else total + t
        return _to(total, out.dtype)
    return lw.compute(out.shape, f)


def complex_(lw, op, ins, out):
    re, im = ins
    return lw.compute(storage(out)[0], lambda *i: tirx.Select(i[-1] == 0, re.load(out, i[:-1]), im.load(out, i[:-1])))


def complex_part(part: int):
    def build(lw, op, ins, out):
        z = ins[0]
        return lw.compute(out.shape, lambda *i: z.load(out, i, part=part))
    return build


def custom(lw, op, ins, out):
    raise UnsupportedOpError(f"Custom op (func_type={op.attrs.get('func_type')!r}, func_name="
                             f"{op.attrs.get('func_name')!r}) has no TE lowering: akgpy does not compile "
                             "user hybrid/ir_builder code", op=op.name, tensor=out.name)


# -- layout ops that move elements: Concat, StridedSlice, Gather, GatherElements --------------
# Each is one injective block whose reads the poly model sees as they are: Concat's and
# StridedSlice's are (piecewise) affine, a gather's table read is data dependent (the model takes
# it as a read of the whole indexed dim, poly/model.py).

def _read(o: Operand, idx):
    """The operand's element at `idx` (its own index, no broadcast); a scalar constant as is."""
    return o.tensor(*idx) if o.tensor is not None else o.load(o.desc, idx)


def concat(lw, op, ins, out):
    """A chain of if_then_else over the concatenated axis, last input innermost. Each input's
    index is clamped into its extent as well: a vector loop may evaluate a branch it does not
    take (see `pad`), and the clamps are min/max, which the poly model keeps exact."""
    _real_only(op, ins)
    axis = op.attrs["axis"] % len(out.shape)
    pieces, start = [], 0
    for o in ins:
        n = o.desc.shape[axis]
        if n:  # an empty input contributes nothing (and has no element to clamp to)
            pieces.append((o, start, n))
        start += n

    def f(*i):
        v = None
        for o, begin, n in reversed(pieces):
            j = tirx.max(tirx.min(i[axis] - begin, n - 1), 0)
            val = _to(_read(o, [*i[:axis], j, *i[axis + 1:]]), out.dtype)
            v = val if v is None else tirx.if_then_else(i[axis] < begin + n, val, v)
        return v
    return lw.compute(out.shape, f)


def strided_slice(lw, op, ins, out):
    """out[i] = x[start + i * stride] per dim, start as Python's slice clamps it (the reference's
    semantics: negative begin/end count from the end, out-of-range bounds clamp)."""
    _real_only(op, ins)
    x = ins[0]
    shape = x.desc.shape
    strides = list(op.attrs.get("strides") or [1] * len(shape))
    starts = [range(*slice(b, e, s).indices(n)).start
              for n, b, e, s in zip(shape, op.attrs["begin"], op.attrs["end"], strides)]
    return lw.compute(out.shape, lambda *i: _read(x, [b + v * s if s != 1 else v + b
                                                      for v, b, s in zip(i, starts, strides)]))


def _table_index(v, n: int, ty: str):
    """A runtime index into a dim of size n as numpy/ONNX read it (a negative one counts from
    the end), clamped into [0, n): an index outside [-n, n) is the caller's error (the reference
    raises ArgumentError); the kernel never reads outside the table and returns the nearest row,
    as XLA's gather does."""
    w = tirx.Select(v < tirx.const(0, dt(v)), v + tirx.const(n, dt(v)), v)
    w = tirx.max(tirx.min(w, tirx.const(n - 1, dt(v))), tirx.const(0, dt(v)))
    return w.astype(ty) if dt(v) != ty else w


def gather(lw, op, ins, out):
    """out[a.., j.., b..] = x[a.., idx[j..], b..] (np.take)."""
    _real_only(op, ins)
    x, idx = ins
    axis = op.attrs.get("axis", 0) % len(x.desc.shape)
    n, k = x.desc.shape[axis], len(idx.desc.shape)

    def f(*i):
        ty = dt(i[0]) if i else lw.index_dtype
        j = _table_index(_read(idx, i[axis:axis + k]), n, ty)
        return _read(x, [*i[:axis], j, *i[axis + k:]])
    return lw.compute(out.shape, f)


def gather_elements(lw, op, ins, out):
    """ONNX GatherElements: out[i] = x[i with i[axis] replaced by idx[i]]."""
    _real_only(op, ins)
    x, idx = ins
    axis = op.attrs.get("axis", 0) % len(x.desc.shape)
    n = x.desc.shape[axis]

    def f(*i):
        j = _table_index(_read(idx, i), n, dt(i[0]))
        return _read(x, [*i[:axis], j, *i[axis + 1:]])
    return lw.compute(out.shape, f)


def pool2d(lw, op, ins, out):
    """Max or average over windows of the last two dims. Padding never enters a max: an index
    that can fall outside the input is clamped to the nearest row or column, which lies in the
    same window (pads are smaller than the kernel, and no window starts in the tail padding),
    and max ignores a repeat. The max is a reduction over the window (targets/nan_extrema.py
    makes it keep NaN: written out, its NaN selects nested one level per tap and LLVM's code
    generator took a minute on nine). An average is the window's taps written out, a tap that
    can leave the input read through if_then_else (0 outside), divided by its window's count,
    an expression of the output index."""
    x = ins[0]
    _real_only(op, ins)
    a = op.attrs
    (kh, kw), (sh, sw) = a["kernel"], a.get("stride", [1, 1])
    head, tail = a.get("pad_head", [0, 0]), a.get("pad_tail", [0, 0])
    hd, wdim = (1, 2) if a.get("data_format", "NCHW") == "NHWC" else (len(out.shape) - 2, len(out.shape) - 1)
    h, wd = x.desc.shape[hd], x.desc.shape[wdim]
    oh, ow = out.shape[hd], out.shape[wdim]
    cd = compute_dtype(out.dtype)

    def spatial(i):
        return i[hd], i[wdim]

    def at(i, vh, vw):
        """The index i with its spatial dims replaced."""
        j = list(i)
        j[hd], j[wdim] = vh, vw
        return j

    include = bool(a.get("count_include_pad", False))
    dims = ((kh, sh, head[0], tail[0], h, oh), (kw, sw, head[1], tail[1], wd, ow))

    def starts(pos):
        return [p * s - ph for p, (_, s, ph, _, _, _) in zip(pos, dims)]

    def tap(start, t, dim):
        """(index, conditions for it to lie inside x) of tap t of a window starting at start."""
        _, s, ph, _, size, od = dim
        low, high = t < ph, (od - 1) * s - ph + t >= size  # can the tap leave x (statically)?
        v = start + t
        inside = [v >= 0] * bool(low) + [v < size] * bool(high)
        return (tirx.max(tirx.min(v, size - 1), 0) if inside else v), inside

    if a["pool_type"] == "max":
        rh, rw = te.reduce_axis((0, kh), name="rh"), te.reduce_axis((0, kw), name="rw")

        def fmax(*i):
            st = starts(spatial(i))
            # a reduce variable is no constant: clamp wherever some tap can leave x
            idx = [tirx.max(tirx.min(v + r, size - 1), 0) if ph or (od - 1) * s - ph + k > size else v + r
                   for v, r, (k, s, ph, _, size, od) in zip(st, (rh, rw), dims)]
            return te.max(x.tensor(*at(i, *idx)).astype(cd), axis=[rh, rw])
        red = lw.compute(out.shape, fmax, role="reduce")
        if cd == out.dtype:
            return red
        return lw.compute(out.shape, lambda *i: red(*i).astype(out.dtype), suffix="_cast")

    def favg(*i):
        st = starts(spatial(i))
        total = None
        for ti in range(kh):
            for tj in range(kw):
                (vh, ih), (vw, iw) = tap(st[0], ti, dims[0]), tap(st[1], tj, dims[1])
                t = x.tensor(*at(i, vh, vw)).astype(cd)
                if ih or iw:
                    t = tirx.if_then_else(tirx.all(*ih, *iw), t, tirx.const(0, cd))
                total = t if total is None else total + t
        count = None
        for start, (k, _, ph, pt, size, _) in zip(st, dims):
            lo, hi = (-ph, size + pt) if include else (0, size)
            n = tirx.min(start + k, hi) - tirx.max(start, lo)
            count = n if count is None else count * n
        return _to(total / count.astype(cd), out.dtype)
    return lw.compute(out.shape, favg)


def power(lw: Lowerer, op: Op, ins: list[Operand], out: Tensor):
    """x ** n for a constant integer n as products by repeated squaring, so the loop stays a vector
    loop (GELU-tanh's x**3): libm's powf is a scalar call per element, and TVM has no integer
    power. Floats: |n| <= MAX_POW_CHAIN, each product rounding once, within the float tolerance
    of pow's one rounding; other float exponents call pow. Integers: any n >= 0, wrapping as numpy."""
    try:
        n = float(ins[1].desc.value) if ins[1].tensor is None else None
    except (TypeError, ValueError):  # a complex or array value
        n = None
    integral = out.dtype.startswith(("int", "uint"))
    if (n is None or n != int(n) or (n < 0 and integral) or (abs(n) > MAX_POW_CHAIN and not integral)
            or out.dtype.startswith("complex")):
        return elementwise(te.power)(lw, op, ins, out)

    def chain(x, _):
        y, base, k = None, x, abs(int(n))
        while k:
            if k & 1:
                y = base if y is None else _product(y, base)
            base, k = _product(base, base), k >> 1
        y = _one(x) if y is None else y
        return _div(_one(x), y) if n < 0 else y
    return elementwise(chain)(lw, op, ins, out)


MAX_POW_CHAIN = 4

E = elementwise
TERMS = ("term", "term")
BUILDERS: dict[str, Callable] = {
    "Neg": E(lambda x: -x), "Abs": E(tirx.abs), "Exp": math(fastmath.exp, te.exp, fastmath.exp_to_half), "Log": math(fastmath.log, te.log), "Sqrt": E(te.sqrt),
    "Rsqrt": E(lambda x: _one(x) / te.sqrt(x)), "Reciprocal": arith(lambda x: _div(_one(x), x), ("divisor",)),
    "Tanh": math(fastmath.tanh, te.tanh, fastmath.tanh_to_half), "Erf": E(fastmath.erf),
    "Add": arith(lambda a, b: a + b, TERMS),
    "Sub": arith(lambda a, b: a - b, TERMS), "Mul": arith(_product, TERMS),
    "RealDiv": arith(_div, ("numerator", "divisor")), "Maximum": extremum(True), "Minimum": extremum(False),
    "Pow": power,
    "Greater": E(lambda a, b: a > b), "GreaterEqual": E(lambda a, b: a >= b),
    "Less": E(lambda a, b: a < b), "LessEqual": E(lambda a, b: a <= b),
    "Equal": arith(_equal, ("compared", "compared")),
    "Select": E(_select), "Cast": cast, "AddN": addn,
    "Complex": complex_, "CReal": complex_part(0), "CImag": complex_part(1),
    "BroadcastTo": broadcast_to, "OneHot": one_hot,
    "Reshape": reshape, "Transpose": transpose, "PadAkg": pad, "UnPadAkg": unpad,
    "ReduceSum": _reduce("sum"), "ReduceMax": _reduce("max"),
    "MatMul": matmul, "Conv2D": conv2d, "Custom": custom,
    "Pool2D": pool2d,
    "Concat": concat, "StridedSlice": strided_slice, "Gather": gather, "GatherElements": gather_elements,
    "InplaceAssign": None, "Assign": None,  # handled by the Lowerer: they rebind buffers
}
