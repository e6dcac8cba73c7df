"""Scale bounded by counts (issue 48): long chains, many outputs and many readers of one input
compile to one kernel that matches the reference, with expression depth and isl's statement
count bounded by counts, not by timeouts."""
from __future__ import annotations

import random
import resource

import tvm_ffi
from tvm import ir, s_tir, tirx

import akgpy
from akgpy import GraphBuilder
from akgpy.poly.deps import RAR_ALL_PAIRS, dependences
from akgpy.poly.isl_util import maps_of
from akgpy.poly.model import extract
from akgpy.poly.scheduler import MAX_STATEMENTS
from akgpy.schedule.plain import (INLINE_MAX_COPIED_NODES, INLINE_MAX_DEPTH, INLINE_MAX_NODES, inline_injective,
                                  root_blocks)
from akgpy.te.builders import ADDN_BLOCK_TERMS
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


# -- issue 48's sizes: 10,000 ops, a long AddN, inlining linear and bounded in total ----------

def _mixed_chain(n: int, shape=(64,)):
    b = GraphBuilder(f"chain_{n}")
    y = b.input("x", shape)
    for k in range(n):
        y = -y if k % 3 == 0 else (y + 0.25 if k % 3 == 1 else y * 0.5)
    b.output(y)
    return b.build()


def _wide(n: int, n_inputs: int = 100, shape=(8, 32)):
    """About n ops over n_inputs inputs, each combining a recent value with any earlier one
    (values stay within the inputs' range), read by four row sums, a column max and an output."""
    rnd = random.Random(0)
    b = GraphBuilder(f"wide_{n}")
    pool = [b.input(f"x{k}", shape) for k in range(n_inputs)]
    ops = 0
    while ops < n - 6:
        a, c = rnd.choice(pool[-200:]), rnd.choice(pool)
        k = rnd.randrange(4)
        pool.append((a + c) * 0.5 if k == 0 else a * c if k == 1 else (a - c) * 0.5 if k == 2 else -a)
        ops += 2 if k in (0, 2) else 1
    b.output(*[pool[-1 - 3 * k].sum(axis=1) for k in range(4)], pool[-2].max(axis=0), pool[-1])
    return b.build()


def _peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20)


def test_chain_of_10000_ops():
    # compute_inline one block at a time was quadratic: 3,000 Negs took 113 s; ~35 s here
    g = _mixed_chain(10_000)
    prog = akgpy.fuse(g)
    assert len(prog.kernels) == 1
    assert _max_expr_depth(prog.kernels[0]._mod) <= INLINE_MAX_DEPTH + 16
    assert not check_program(g, prog)
    assert _peak_rss_gib() <= 4


def test_wide_graph_of_10000_ops():
    # shared values copied into every reader multiplied to ~8 million nodes (380 s of LLVM);
    # the copy budget keeps the function near its own size; ~40 s here
    g = _wide(10_000)
    prog = akgpy.fuse(g)
    assert len(prog.kernels) == 1
    assert not check_program(g, prog)
    assert _peak_rss_gib() <= 4


def _nodes(e) -> int:
    n = [0]
    tvm_ffi.structural_walk(e, [(ir.Expr, lambda _: n.__setitem__(0, n[0] + 1))])
    return n[0]


def test_inlined_copies_bounded():
    # a DAG where every value is read twice: inlining everything doubles per level (2**30 nodes)
    b = GraphBuilder("shared")
    ys = [b.input("x", (32,))]
    for _ in range(30):
        y = ys[-1] * 0.5
        ys.append(y + y * 0.25)
    b.output(ys[-1])
    g = b.build()
    low = lower(g)
    own = sum(_nodes(blk.body) for blk in root_blocks(low.func))
    sch, left = inline_injective(low)
    stores = []
    tvm_ffi.structural_walk(sch.mod["main"].body, [(tirx.BufferStore, stores.append)])
    assert sum(_nodes(st.value) for st in stores) <= 2 * own + INLINE_MAX_COPIED_NODES
    prog = akgpy.fuse(g)
    assert not check_program(g, prog)


def test_one_pass_inlining_is_compute_inline():
    # the one-pass substitution gives what TVM's compute_inline, block by block, gives: a value
    # read by three blocks, broadcast and reshape index maps (60 corpus graphs compared alike)
    b = GraphBuilder("inline_same")
    x, bias = b.input("x", (16, 32)), b.input("b", (32,))
    e = b.op("Abs", [x + bias], (16, 32), "float32")
    r = (e * e - 1.0).reshape((32, 16))
    b.output(r + 2.0, (e / e.sum(axis=1, keepdims=True)))
    low = lower(b.build())
    sch, left = inline_injective(low)
    blocks = root_blocks(low.func)
    chosen = [blk.name_hint for blk in blocks if blk.name_hint not in left]
    assert chosen
    ref = s_tir.Schedule(low.func)
    for name in chosen:
        ref.compute_inline(ref.get_sblock(name))
    assert tvm_ffi.structural_equal(ref.mod["main"], sch.mod["main"])


def _addn(n: int, shape=(16,)):
    b = GraphBuilder(f"addn_{n}")
    xs = [b.input(f"x{k}", shape) for k in range(n)]
    b.output(b.op("AddN", xs, shape, "float32"))
    return b.build()


def test_addn_folds_in_blocks():
    # 400 terms in one expression overflowed the stack; blocks of ADDN_BLOCK_TERMS, same order
    n = 400
    g = _addn(n)
    low = lower(g)
    parts = [name for name in low.roles if name.startswith("AddN_")]
    assert len(parts) == -(-n // ADDN_BLOCK_TERMS)
    prog = akgpy.fuse(g)
    assert len(prog.kernels) == 1
    assert not check_program(g, prog)


def test_reference_and_validator_at_scale():
    # both walk the ops in a loop: no recursion at 10,000 ops or 65,536 AddN terms
    import numpy as np

    from akgpy.reference import evaluate
    g = _mixed_chain(10_000)
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    y = x.astype(np.float64)
    for k in range(10_000):
        y = np.float32(-y if k % 3 == 0 else (y + 0.25 if k % 3 == 1 else y * 0.5)).astype(np.float64)
    assert np.array_equal(evaluate(g, [x])[g.real_outputs[0]], y.astype(np.float32))
    big = _addn(1 << 16, shape=(2,))
    ones = [np.ones(2, np.float32)] * (1 << 16)
    assert evaluate(big, ones)[big.real_outputs[0]].tolist() == [65536.0, 65536.0]
