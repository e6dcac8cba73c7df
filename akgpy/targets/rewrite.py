"""The walk akgpy's TIR passes share: replace each node of one type that a rewrite returns a
replacement for, and look inside the others."""
from __future__ import annotations

import tvm_ffi


def rewrite_each(func, node_type, rewrite):
    """`func` with each `node_type` node that `rewrite(node)` replaces (None: keep the node and
    look inside it); `func` itself when nothing was replaced."""
    count = [0]

    def on_node(node, mut):
        got = rewrite(node)
        if got is None:
            return mut.default_mutate(node)
        count[0] += 1
        return got

    body = tvm_ffi.structural_mutate(func.body, [(node_type, on_node)])
    return func.with_body(body) if count[0] else func
