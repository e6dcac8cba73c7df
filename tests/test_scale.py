"""Scale bounded by counts (issue 48): long chains, many outputs and many readers of one input
compile to one kernel that matches the reference, with expression depth and isl's statement
count bounded by counts, not by timeouts."""
from __future__ import annotations

import tvm_ffi
from tvm import ir, tirx

import akgpy
from akgpy import GraphBuilder
from akgpy.poly.deps import RAR_ALL_PAIRS, dependences
from akgpy.poly.isl_util import maps_of
from akgpy.poly.model import extract
from akgpy.poly.scheduler import MAX_STATEMENTS
from akgpy.schedule.plain import INLINE_MAX_DEPTH, INLINE_MAX_NODES
from akgpy.te.lower import lower
from akgpy.testing import check_program


def _neg_chain(n: int, shape=(64,)):
    b = GraphBuilder(f"neg_chain_{n}")
    y = x = b.input("x", shape)
    for _ in range(n):
        y = -y
    b.output(y)
    return b.build()


def _outputs(n: int, shape=(64,)):
    b = GraphBuilder(f"outputs_{n}")
    x = b.input("x", shape)
    b.output(*[x * float(k + 1) for k in range(n)])
    return b.build()


def _max_expr_depth(mod) -> int:
    """The deepest expression nesting in a scheduled module (an iterative walk of its own)."""
    deepest, stack = [0], [0]

    def visit(node, v):
        stack.append(stack[-1] + 1)
        deepest[0] = max(deepest[0], stack[-1])
        v.default_visit(node)
        stack.pop()
    tvm_ffi.structural_visit(mod["main"].body, [(ir.Expr, visit)])
    return deepest[0]


def test_neg_chain_depth_bounded():
    # 1,000 Negs inlined into one expression were ~2,000 levels deep (3,000 overflowed the stack)
    g = _neg_chain(1000)
    prog = akgpy.fuse(g)
    assert len(prog.kernels) == 1
    assert _max_expr_depth(prog.kernels[0]._mod) <= INLINE_MAX_DEPTH + 16
    assert not check_program(g, prog)


def test_wide_expression_nodes_bounded():
    # y = y + y doubles the inlined tree at every step: 40 steps would be 2**40 nodes
    b = GraphBuilder("doubling")
    y = b.input("x", (32,))
    for _ in range(40):
        y = y + y * 0.5
    b.output(y)
    g = b.build()
    prog = akgpy.fuse(g, schedule="plain")
    assert len(prog.kernels) == 1
    stores = []
    tvm_ffi.structural_walk(prog.kernels[0]._mod["main"].body, [(tirx.BufferStore, stores.append)])

    def size(e) -> int:
        n = [0]
        tvm_ffi.structural_walk(e, [(ir.Expr, lambda _: n.__setitem__(0, n[0] + 1))])
        return n[0]
    assert max(size(st.value) for st in stores) <= 2 * INLINE_MAX_NODES
    assert not check_program(g, prog)


def test_input_reuse_pairs_linear():
    # 100 outputs reading x: all pairs would be 4,950 proximity maps; a chain is 99
    g = _outputs(100)
    model = extract(lower(g).func)
    deps = dependences(model)
    assert 100 > RAR_ALL_PAIRS
    assert len(maps_of(deps.rar)) < 2 * 100


def test_many_outputs_one_kernel():
    # above MAX_STATEMENTS the poly path takes the plain schedule, saying why (was 35 s at 150)
    n = MAX_STATEMENTS + 72
    g = _outputs(n)
    prog = akgpy.fuse(g)
    assert len(prog.kernels) == 1
    assert f"{n} statements, above the {MAX_STATEMENTS}" in prog.explain()
    assert not check_program(g, prog)
