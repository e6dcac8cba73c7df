"""The one place that knows islpy idioms: TIR index expressions -> isl text, safe isl names,
iterating isl lists, padding schedule maps, and the operation budget.

Everything in akgpy/poly builds isl objects from *text* written here, so the translation rules
(what is exact, what is refused) live in one file. Each analysis uses its own isl.Context:
objects from two contexts cannot be combined ("spaces don't match"), and a per-analysis
context lets the scheduler set an operation budget without touching anyone else's work.
"""
from __future__ import annotations

import contextlib
import re

import islpy as isl
from tvm import ir

from ..errors import CompileError

P = ir.prim.expr
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def new_context() -> isl.Context:
    """A fresh context for one analysis (model, dependences, schedule and checks share it)."""
    return isl.Context()


# -- PrimExpr -> isl affine text ---------------------------------------------------------------

def _const(e) -> int | None:
    return int(e.value) if isinstance(e, P.IntImm) else None


def affine(e, env: dict[str, str], block: str) -> str:
    """`e` as isl quasi-affine text; `env` maps a TIR var name to its isl dim name.

    Exact translations only: + and -, * by a constant, floordiv/floormod by a positive
    constant (isl's floor() and mod are floor semantics, as TIR's are), min/max (isl reads
    them as piecewise affine), integer casts. Anything else (var*var, truncdiv, a load used
    as an index) would make the access relation an approximation, so it is refused.
    """
    def go(x) -> str:
        if isinstance(x, P.IntImm):
            return str(int(x.value))
        if isinstance(x, ir.expr.Var):
            if x.name not in env:
                raise CompileError(f"index uses {x.name!r}, which is not an iterator of block {block!r} "
                                   "(symbolic shapes are not supported by the polyhedral model)")
            return env[x.name]
        if isinstance(x, P.Add):
            return f"({go(x.a)} + {go(x.b)})"
        if isinstance(x, P.Sub):
            return f"({go(x.a)} - {go(x.b)})"
        if isinstance(x, P.Mul):
            ca, cb = _const(x.a), _const(x.b)
            if ca is None and cb is None:
                raise CompileError(f"non-affine index {x} (product of two variables) in block {block!r}")
            return f"({ca} * {go(x.b)})" if ca is not None else f"({cb} * {go(x.a)})"
        if isinstance(x, (P.FloorDiv, P.FloorMod)):
            c = _const(x.b)
            if c is None or c <= 0:
                raise CompileError(f"index {x} in block {block!r} divides by {x.b}, not a positive constant")
            return f"floor(({go(x.a)}) / {c})" if isinstance(x, P.FloorDiv) else f"(({go(x.a)}) mod {c})"
        if isinstance(x, (P.Min, P.Max)):
            return f"{'min' if isinstance(x, P.Min) else 'max'}({go(x.a)}, {go(x.b)})"
        if isinstance(x, P.Cast) and str(x.ty).startswith(("int", "uint")) \
                and str(x.value.ty).startswith(("int", "uint")):
            return go(x.value)  # index width changes do not change the value of an in-bounds index
        raise CompileError(f"index expression {x} ({type(x).__name__}) in block {block!r} is not "
                           "quasi-affine; the polyhedral model cannot represent it exactly")
    return go(e)


# -- names -------------------------------------------------------------------------------------

class Namer:
    """Unique isl identifiers, checked against isl's own parser.

    TIR names are C identifiers, but some are isl keywords ("mod", "min", "and" ...) and a
    block may share its name with a buffer (an input called Add_0 and block Add_0), so every
    name is checked and made unique once, here.
    """

    def __init__(self, ctx: isl.Context):
        self.ctx, self.used, self._ok = ctx, set(), {}

    def fresh(self, want: str, fallback: str = "n") -> str:
        base = want if self.valid(want) else fallback + "_" + re.sub(r"\W", "_", want)
        if not self.valid(base):
            base = fallback
        name, n = base, 1
        while name in self.used:
            name, n = f"{base}_{n}", n + 1
        self.used.add(name)
        return name

    def scope(self) -> "Namer":
        """A fresh set of used names (dims are unique per block only) sharing isl's verdicts."""
        inner = Namer(self.ctx)
        inner._ok = self._ok
        return inner

    def valid(self, name: str) -> bool:
        if name not in self._ok:
            ok = bool(_IDENT.match(name))
            if ok:
                try:  # both as a tuple name and as a dim name inside a constraint
                    s = isl.Set(f"{{ {name}[{name}] : {name} = 0 }}", context=self.ctx)
                    ok = s.get_tuple_name() == name and s.get_dim_name(isl.dim_type.set, 0) == name
                except isl.Error:
                    ok = False
            self._ok[name] = ok
        return self._ok[name]


# -- list helpers (islpy's lists are not iterable) -------------------------------------------

def maps_of(umap: isl.UnionMap) -> list[isl.Map]:
    """The maps of `umap`, one per space; a map that is not single-valued (a complex value's
    real and imaginary parts read by one statement: x[i, j, 0] and x[i, j, 1]) comes as its
    single-valued pieces, since every pass reads an access as one index expression each."""
    lst = umap.get_map_list()
    out = []
    for m in (lst.get_at(i) for i in range(lst.n_map())):
        if m.n_basic_map() == 1 or m.is_single_valued():  # the count first: most accesses are one piece
            out.append(m)
            continue
        pieces = m.get_basic_map_list()
        out += [isl.Map.from_basic_map(pieces.get_at(k)) for k in range(pieces.n_basic_map())]
    return out


def sets_of(uset: isl.UnionSet) -> list[isl.Set]:
    lst = uset.get_set_list()
    return [lst.get_at(i) for i in range(lst.n_set())]


def union_map(ctx: isl.Context, maps) -> isl.UnionMap:
    out = isl.UnionMap.empty(isl.Space.params_alloc(ctx, 0))
    for m in maps:
        out = out.union(isl.UnionMap.from_map(m) if isinstance(m, isl.Map) else m)
    return out


def union_set(ctx: isl.Context, sets) -> isl.UnionSet:
    out = isl.UnionSet.empty(isl.Space.params_alloc(ctx, 0))
    for s in sets:
        out = out.union(isl.UnionSet.from_set(s) if isinstance(s, isl.Set) else s)
    return out


# -- schedules ---------------------------------------------------------------------------------

def flat_schedule_map(sched) -> isl.UnionMap:
    """A schedule (isl.Schedule or UnionMap) as statement -> anonymous time vector of one length.

    lex_lt_union_map only compares points of the same space, so time vectors of different
    lengths or tuple names would look unordered and every dependence between them violated.
    Padding with zeros is the usual meaning of a shorter time vector.
    """
    umap = sched.get_map() if isinstance(sched, isl.Schedule) else sched
    maps = maps_of(umap)
    n = max((m.dim(isl.dim_type.out) for m in maps), default=0)
    out = []
    for m in maps:
        k = m.dim(isl.dim_type.out)
        m = m.reset_tuple_id(isl.dim_type.out).add_dims(isl.dim_type.out, n - k)
        for q in range(k, n):
            m = m.fix_val(isl.dim_type.out, q, isl.Val.zero(m.get_ctx()))
        out.append(m)
    return union_map(umap.get_ctx(), out)


def schedule_from_text(ctx: isl.Context, text: str) -> isl.Schedule:
    """Inverse of isl.Schedule.to_str(): the way a schedule crosses a process boundary
    (isl.Schedule does not pickle)."""
    return isl.Schedule.read_from_str(ctx, text)


@contextlib.contextmanager
def context_options(ctx: isl.Context, options: dict[str, int]):
    """Set isl Context options (names without set_/get_) inside the block, restore them after."""
    try:
        old = {k: getattr(ctx, "get_" + k)() for k in options}
    except AttributeError as e:
        raise CompileError(f"unknown isl option: {e}") from None
    for k, v in options.items():
        getattr(ctx, "set_" + k)(v)
    try:
        yield
    finally:
        for k, v in old.items():
            getattr(ctx, "set_" + k)(v)


class BudgetExhausted(CompileError):
    """isl stopped at its operation budget: deterministic, unlike a wall-clock bound."""


@contextlib.contextmanager
def operation_budget(ctx: isl.Context, max_operations: int, what: str):
    """Cap isl's work inside the block; exhausting it raises BudgetExhausted, not a hang."""
    ctx.reset_operations()
    ctx.set_max_operations(max_operations)  # set after parsing: parsing counts operations too
    try:
        yield
    except isl.Error as e:
        if "maximal number of operations exceeded" in str(e):
            raise BudgetExhausted(f"{what}: isl operation budget ({max_operations}) exhausted") from None
        raise CompileError(f"{what} failed in isl: {str(e).splitlines()[0]}") from None
    finally:
        ctx.set_max_operations(0)
        ctx.reset_operations()
        with contextlib.suppress(Exception):
            ctx.reset_error()
