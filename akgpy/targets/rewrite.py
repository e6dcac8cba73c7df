"""What akgpy's TIR passes share: the walk that replaces each node of one type a rewrite returns
a replacement for (looking inside the others), the values let-bound variables stand for, and the
parts of a loop-carried update."""
from __future__ import annotations

import tvm_ffi
from tvm import ir, tirx


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
