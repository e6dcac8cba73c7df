"""What akgpy's TIR passes share: the walk that replaces each node of one type a rewrite returns
a replacement for (looking inside the others), the values let-bound variables stand for (and
expressions with them inlined), variable substitution, the loop variables' coefficients of an
index, the parts of a loop-carried update, and the FMA fence the TE builders put on float ops."""
from __future__ import annotations

import functools

import tvm_ffi
from tvm import ir, tirx
from tvm.sym import detect_linear_equation

from ..dtypes import vector_parts

FENCE = "llvm.arithmetic.fence"  # the intrinsic of te/builders.fence


def rewrite_each(func, node_type, rewrite, *, inner_first: bool = False):
    """`func` with each `node_type` node that `rewrite(node)` replaces (None: keep the node and
    look inside it); `func` itself when nothing was replaced. `inner_first`: the nodes inside
    are rewritten first and `rewrite` sees the result (a chain rewritten from its leaves up)."""
    count = [0]

    def on_node(node, mut):
        if inner_first:
            node = mut.default_mutate(node)
        got = rewrite(node)
        if got is None:
            return node if inner_first else mut.default_mutate(node)
        count[0] += 1
        return got

    body = tvm_ffi.structural_mutate(func.body, [(node_type, on_node)])
    return func.with_body(body) if count[0] else func


def let_values(body, *, expressions: bool = False) -> dict:
    """Each variable a let statement in `body` binds (TVM's common subexpressions, a register
    transpose's rows) -> its value; with `expressions`, the variables of let expressions too."""
    lets: dict = {}

    def bind(node) -> None:
        lets[node.var] = node.value
    tvm_ffi.structural_walk(body, [(tirx.Bind, bind)] + ([(tirx.Let, bind)] if expressions else []))
    return lets


def update_parts(store, ops):
    """(accumulator load, other operand, accumulator first) of an update `acc = acc op x` or
    `acc = x op acc`, op one of `ops`, acc the stored element itself; else None."""
    v = store.value
    if not isinstance(v, ops):
        return None
    for acc, other, first in ((v.a, v.b, True), (v.b, v.a, False)):
        if (isinstance(acc, ir.TensorLoad) and acc.source.same_as(store.buffer)
                and len(acc.indices) == len(store.indices)
                and all(tvm_ffi.structural_equal(a, b) for a, b in zip(acc.indices, store.indices))):
            return acc, other, first
    return None


def substitute(expr, mapping: dict):
    """`expr` with each variable in `mapping` replaced by its value (once, not recursively)."""
    return tvm_ffi.structural_mutate(expr, [(tirx.Var, lambda v, mut: mapping.get(v, v))])


def inline_lets(expr, lets: dict, depth: int = 4):
    """`expr` with let-bound variables (TVM's common-subexpression temporaries) replaced by
    their values, so that its dependence on the loop variables shows."""
    for _ in range(depth):
        new = tvm_ffi.structural_mutate(expr, [(tirx.Var, lambda v, mut: lets.get(v, v))])
        if new.same_as(expr):
            break
        expr = new
    return expr


def linear_coefficients(base, loops) -> tuple[int, ...] | None:
    """Integer coefficients of the loop variables (`loops`: (var, extent) pairs) in `base`, then
    its constant; None when not linear in them with constant coefficients."""
    got = detect_linear_equation(base, [v for v, _ in loops])
    if len(got) != len(loops) + 1 or not all(isinstance(c, tirx.IntImm) for c in got):
        return None
    return tuple(int(c.value) for c in got)


def is_one(x) -> bool:
    return isinstance(x, tirx.IntImm) and int(x.value) == 1


def lanes(ty) -> int:
    return vector_parts(ty)[1]


@functools.cache
def fence_id() -> int:
    """The intrinsic id of `FENCE` in TVM's call_llvm_pure_intrin calls."""
    return int(tirx.call_llvm_pure_intrin("float32", FENCE, tirx.FloatImm("float32", 0.0)).args[0].value)


def unfenced(x, fid: int):
    """`x` without the FMA fence around it (fid: `fence_id()`), else `x` itself."""
    if isinstance(x, ir.Call) and x.op.name == "tirx.call_llvm_pure_intrin" and int(x.args[0].value) == fid:
        return x.args[-1]
    return x
