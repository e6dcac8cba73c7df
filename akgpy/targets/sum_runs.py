"""Float64 sums of narrow terms add short runs of them in float32 first.

A float sum accumulates in float64 (`te/builders.SUM_ACC`, docs/semantics.md). When each term
is a widened float16 (or a small integer or bool cast to float), converting every term to
float64 costs more than the memory delivering it: two conversions per element and a float64
add on half a register's lanes.

A serial loop directly around such a sum's update `acc[R] = acc[R] + f64(f32(x))` (or
`f64(x)`), whose index R does not move with the loop (a column sum's rows; `poly/columns.py`'s
rows a step), becomes runs of U iterations: the U terms added pairwise in float32, the run's
total widened once and added to the accumulator. U is the largest divisor of the loop's extent
up to `MAX_RUN`; a loop over the runs remains. A loop of `MAX_RUN` iterations or fewer that
walks one row, vector after vector (a short row summed into lane partials), is left alone: on
resnet's 7 x 7 average pools (`~9221`, 6 steps of 8 lanes) runs measured 1.10-1.25x slower,
kernel alone, interleaved (memory-bound; the cause was not pinned down).

Float16 column sums, kernel alone, 2 threads, this Zen 3 host, A/B in one process (ranges
over repeated runs, which this host's memory bandwidth moved a lot): cache-resident, [2048,
1024] 0.47-0.70x the time, [2048, 3072] 0.53-0.61x, [1216, 30522] (the shape of bert's
output-bias gradient; `poly/columns.py`'s blocks) 0.73-0.90x; with the LLC flushed before each
call [2048, 1024] 0.83-1.05x, [2048, 3072] 0.94-1.13x (its 64-column vectors, 8 rows of them a
step; runs of 4 read 0.89-0.92x in the same runs, and lost on [1216, 30522]), [1216, 30522]
0.80-0.90x. The 13 corpus graphs it changes, flushed, medians of 20: 0.75-1.06x, 12 of them at
or under 1.02x.

Why the sum keeps its contract:
- Integer and bool terms (at most 16 bits): a run of 8 is at most 8 * 65535 < 2^24, exact in
  float32. The result is bit for bit that of float64 accumulation.
- float16 terms: each is at most 65504 in magnitude, so a run cannot overflow float32, and a
  pairwise run of 8 rounds at most 3 times along any path, each time within 2^-24 of its
  partial: the run's error is at most 3 * 2^-24 * (the sum of its terms' magnitudes).
  bfloat16 is left out: its range is float32's, so a run could overflow.
- Infinities and NaN propagate as in float64.
"""
from __future__ import annotations

import tvm_ffi
from tvm import ir, tirx
from tvm.sym import Analyzer

from ..dtypes import vector_parts
from .rewrite import rewrite_each, substitute, update_parts

MAX_RUN = 8
# term dtypes whose float32 runs cannot overflow (and are exact, but for float16's)
RUN_SOURCES = frozenset({"float16", "int8", "uint8", "int16", "uint16", "bool"})


def run_term(e):
    """The float32 term of `f64(f32(x))` or `f64(x)`, x a load of a `RUN_SOURCES` dtype (a
    ReduceSum of a float16 input widens it straight to float64), else None."""
    if not isinstance(e, tirx.Cast) or vector_parts(e.ty)[0] != "float64":
        return None
    inner = e.value
    if isinstance(inner, tirx.Cast) and vector_parts(inner.ty)[0] == "float32":
        return inner if _narrow_load(inner.value) else None
    if not _narrow_load(inner):
        return None
    lanes = vector_parts(e.ty)[1]
    return tirx.Cast("float32" if lanes == 1 else f"float32x{lanes}", inner)


def _narrow_load(x) -> bool:
    return isinstance(x, ir.TensorLoad) and vector_parts(x.ty)[0] in RUN_SOURCES


def uses(expr, var) -> bool:
    """Whether `expr` reads the variable `var`."""
    found = []
    tvm_ffi.structural_walk(expr, [(tirx.Var, lambda v: found.append(v) if v.same_as(var) else None)])
    return bool(found)


def _reads(expr, buf) -> bool:
    found = []
    tvm_ffi.structural_walk(expr, [(ir.TensorLoad, lambda ld: found.append(ld) if ld.source.same_as(buf) else None)])
    return bool(found)


def inlined(body):
    """A loop body of let-bindings (TVM's common subexpressions) and one store, as that store
    with the bound values substituted; any other body unchanged."""
    if not isinstance(body, tirx.SeqStmt):
        return body
    *binds, last = list(body.seq)
    if not isinstance(last, tirx.BufferStore) or not isinstance(last.value, tirx.Add) \
            or not all(isinstance(b, tirx.Bind) for b in binds):
        return body
    lets = {}
    for b in binds:  # in order: a value may use the variables bound before it
        lets[b.var] = substitute(b.value, lets)
    return tirx.BufferStore(last.buffer, substitute(last.value, lets), [substitute(i, lets) for i in last.indices])


def _walks_its_row(load, var) -> bool:
    """Does `var` move the vector load by its own width (the loop walks one row, vector after
    vector)?"""
    idx = list(load.indices)
    if len(idx) != 1 or not isinstance(idx[0], tirx.Ramp):
        return False
    step = index_step(idx[0].base, var)
    return step is not None and abs(step) == int(idx[0].lanes)


def index_step(index, var) -> int | None:
    """How far `index` moves when `var` grows by one, when that is a constant."""
    step = Analyzer().simplify(substitute(index, {var: var + 1}) - index)
    return int(step.value) if isinstance(step, tirx.IntImm) else None


def pairwise(terms):
    """The sum of `terms` as a balanced tree of additions (neighbours first)."""
    while len(terms) > 1:
        terms = [terms[i] + terms[i + 1] if i + 1 < len(terms) else terms[i] for i in range(0, len(terms), 2)]
    return terms[0]


def _runs(loop):
    """The loop as runs of its sum's terms, or None when it is not such a loop."""
    if (loop.kind != tirx.ForKind.SERIAL or not isinstance(loop.extent, tirx.IntImm)
            or not isinstance(loop.min, tirx.IntImm) or int(loop.min.value) != 0):
        return None
    n = int(loop.extent.value)
    u = max((d for d in range(2, MAX_RUN + 1) if n % d == 0), default=0)
    st = inlined(loop.body) if u else None
    parts = update_parts(st, tirx.Add) if isinstance(st, tirx.BufferStore) else None
    if parts is None or any(uses(i, loop.loop_var) for i in st.indices):
        return None
    acc, term, acc_first = parts
    term = run_term(term)
    if term is None or not uses(term, loop.loop_var) or _reads(term, st.buffer) \
            or (n <= MAX_RUN and _walks_its_row(term.value, loop.loop_var)):
        return None
    var = loop.loop_var
    outer = tirx.Var(var.name + "_run", var.ty)
    total = pairwise([substitute(term, {var: outer * u + j}) for j in range(u)])
    wide = tirx.Cast(acc.ty, total)
    new = tirx.BufferStore(st.buffer, acc + wide if acc_first else wide + acc, st.indices)
    return tirx.For(outer, tirx.IntImm(var.ty, 0), tirx.IntImm(var.ty, n // u), tirx.ForKind.SERIAL, new)


def sum_runs(func):
    """`func` with each qualifying sum's loop in float32 runs; unchanged when there is none."""
    return rewrite_each(func, tirx.For, _runs)
