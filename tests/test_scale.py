"""Scale bounded by counts (issue 48): long chains, many outputs and many readers of one input
compile to one kernel that matches the reference, with expression depth and isl's statement
count bounded by counts, not by timeouts."""
from __future__ import annotations

import random
import resource

import pytest
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


@pytest.fixture(autouse=True)
def _fresh_peak_rss():
    """The process's peak resident set starts at the current one: an xdist worker's peak is
    otherwise that of every test it ran before (a 500 MB corpus graph)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # Linux: reset the high-water mark that getrusage's ru_maxrss reports
    yield


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
    # (terms that are no stack's consecutive members: 200 inputs, each added twice)
    n = 400
    b = GraphBuilder("addn_twice")
    xs = [b.input(f"x{k}", (16,)) for k in range(n // 2)]
    b.output(b.op("AddN", xs + xs, (16,), "float32"))
    g = b.build()
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


# -- kernels with very many arguments: stacked parameters (te/abi.py) ---------------------------

def _stacked(prog) -> list:
    return [p for p in prog.kernels[0].params if p.members]


def test_addn_of_65536_scalars():
    # 65,537 kernel arguments: TVM's per-argument cost made 4,096 inputs take 250 s; the inputs
    # are one stacked parameter now, and the fold one loop over it. 3-10 s here, by load
    n = 1 << 16
    g = _addn(n, shape=(1,))
    prog = akgpy.fuse(g)
    (k,) = prog.kernels
    assert len(k.params) == 2 and k.params[0].members == tuple(g.inputs) and k.params[0].shape == (n, 1)
    assert not check_program(g, prog)
    assert _peak_rss_gib() <= 4


def test_addn_of_65536_vectors():
    # the same with [8] members; 3-10 s here
    n = 1 << 16
    g = _addn(n, shape=(8,))
    prog = akgpy.fuse(g)
    assert len(prog.kernels[0].params) == 2
    assert not check_program(g, prog)
    assert _peak_rss_gib() <= 4


def test_1000_outputs_one_stacked_parameter():
    # 1,000 outputs were 1,001 arguments (53 s, ~2,000 frames deep in TVM's packed-call wrapper);
    # they are one stacked output now, returned as views of it. 13-45 s here, by load (1,000 loop nests)
    import numpy as np
    g = _outputs(1000)
    prog = akgpy.fuse(g)
    (k,) = prog.kernels
    assert [(p.kind, p.shape) for p in k.params] == [("input", (64,)), ("output", (1000, 64))]
    assert k.params[1].members == tuple(g.real_outputs)
    assert not check_program(g, prog)
    x = np.arange(64, dtype=np.float32)
    first = prog(x)
    kept = first[7]
    del first
    second = prog(x + 1)  # the kept view holds the whole stack: the next call writes another
    assert np.array_equal(kept, x * 8) and np.array_equal(second[7], (x + 1) * 8)
    assert not np.shares_memory(kept, second[7])
    assert "outputs stacked in one array" in prog.report()


def test_params_up_to_the_bound_stay_plain():
    # 255 inputs and the output: 256 parameters, each its own; one input more stacks them all
    from akgpy.te.abi import MAX_KERNEL_PARAMS
    g = _addn(MAX_KERNEL_PARAMS - 1, shape=(4,))
    assert not any(p.members for p in lower(g).params) and len(lower(g).params) == MAX_KERNEL_PARAMS
    g = _addn(MAX_KERNEL_PARAMS, shape=(4,))
    assert [p.shape for p in lower(g).params] == [(MAX_KERNEL_PARAMS, 4), (4,)]


def test_report_says_stacked_inputs_are_copied():
    import numpy as np
    g = _addn(300, shape=(4,))
    prog = akgpy.fuse(g)
    prog(*[np.full(4, k, np.float32) for k in range(300)])
    report = prog.report()
    assert "300 inputs stacked: copied on every call" in report
    assert "x0..x299: 300 inputs copied into one stacked array, the kernel takes them as one parameter" in report
    assert not check_program(g, prog)


def test_kernel_func_takes_stacked_arrays():
    import numpy as np
    from akgpy.errors import ArgumentError
    from akgpy.runtime.program import aligned_empty
    g = _addn(300, shape=(4,))
    k = akgpy.fuse(g).kernels[0]
    stack = np.arange(1200, dtype=np.float32).reshape(300, 4)
    out = aligned_empty((4,), "float32")
    k.func(stack, out)
    acc = stack[0].copy()
    for row in stack[1:]:
        acc += row
    assert np.array_equal(out, acc)
    with pytest.raises(ArgumentError, match="x0..x299"):
        k.func(stack[:299], out)


def test_stacked_members_read_through_views():
    # builders that read a member through its tensor directly: reshape, broadcast, transpose
    b = GraphBuilder("stacked_views")
    xs = [b.input(f"x{k}", (8,)) for k in range(300)]
    terms = [((x.reshape((1, 8)) + x.reshape((8, 1))).transpose((1, 0)) * x) for x in xs]
    b.output(b.op("AddN", terms, (8, 8), "float32"))
    g = b.build()
    prog = akgpy.fuse(g)
    assert [p.shape for p in _stacked(prog)] == [(300, 8)]
    assert not check_program(g, prog)


def test_inplace_targets_stay_individual():
    b = GraphBuilder("stacked_with_target")
    xs = [b.input(f"x{k}", (4,)) for k in range(300)]
    t = b.input("t", (4,))
    b.inplace_assign(t, b.op("AddN", xs, (4,), "float32"))
    g = b.build()
    prog = akgpy.fuse(g)
    assert [(p.kind, p.tensor) for p in prog.kernels[0].params if not p.members] == [("inplace", "t")]
    assert not check_program(g, prog)


def test_inplace_targets_above_the_bound_refused():
    from akgpy.errors import CompileError
    from akgpy.te.abi import MAX_KERNEL_PARAMS
    b = GraphBuilder("many_targets")
    x = b.input("x", (4,))
    for k in range(MAX_KERNEL_PARAMS + 1):
        b.inplace_assign(b.input(f"t{k}", (4,)), x + 1.0)
    with pytest.raises(CompileError, match="many_targets has 257 in-place targets"):
        akgpy.fuse(b.build())


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_stacked_addn_is_the_left_fold(dtype):
    # one serial reduction over the stack, rounding every partial sum as the unrolled fold does:
    # bit for bit the reference's fold; -0.0 terms sum to -0.0 (the reducer starts from -0.0)
    import numpy as np

    from akgpy.reference import run
    n = 300
    b = GraphBuilder(f"fold_{dtype}")
    xs = [b.input(f"x{k}", (4,), dtype) for k in range(n)]
    b.output(b.op("AddN", xs, (4,), dtype))
    g = b.build()
    low = lower(g)
    assert [r for r in low.roles.values() if r != "output"] == ["fold"]
    prog = akgpy.fuse(g)
    rng = np.random.default_rng(0)
    args = [(rng.standard_normal(4) * 10.0 ** rng.integers(-3, 4)).astype(dtype) for _ in range(n)]
    assert np.array_equal(prog(*args)[0], run(g, args)[0])
    zeros = [np.full(4, -0.0, dtype)] * n
    assert np.signbit(prog(*zeros)[0]).all()


def test_complex_inputs_and_outputs_stacked():
    # complex members are float pairs in the stack; outputs come back as complex views
    import numpy as np
    b = GraphBuilder("stacked_complex")
    xs = [b.input(f"x{k}", (3,), "complex64") for k in range(300)]
    b.output(*[x.reshape((3, 1)) for x in xs])
    g = b.build()
    prog = akgpy.fuse(g)
    assert [(p.kind, p.shape) for p in prog.kernels[0].params] == [("input", (300, 3, 2)), ("output", (300, 3, 1, 2))]
    assert not check_program(g, prog)
    args = [np.array([1 + 2j, 3 - 1j, -0.5j], np.complex64) * k for k in range(300)]
    outs = prog(*args)
    assert outs[7].dtype == np.complex64 and np.array_equal(outs[7], args[7].reshape(3, 1))


def test_model_group_with_stacked_inputs():
    # one AddN of 300 inputs is one group above the bound whatever the partition's limits: its
    # step runs through its Program, which stacks, not through the direct kernel call
    import numpy as np

    from akgpy.reference import run
    b = GraphBuilder("stacked_model", model=True)
    xs = [b.input(f"x{k}", (4,)) for k in range(300)]
    b.output(b.op("AddN", xs, (4,), "float32") * 2.0)
    g = b.build()
    mp = akgpy.fuse(g)
    assert any(p.members for k in mp.kernels for p in k.params)
    args = [np.full(4, k / 7, np.float32) for k in range(300)]
    assert np.array_equal(mp(*args)[0], run(g, args)[0])


def test_stack_members_in_order_of_first_read():
    # an AddN of the inputs in reverse order: the stack holds them as the AddN reads them, so the
    # fold is one reduction, and the program still takes the inputs in the graph's order
    import numpy as np

    from akgpy.reference import run
    n = 300
    b = GraphBuilder("addn_reversed")
    xs = [b.input(f"x{k}", (4,)) for k in range(n)]
    b.output(b.op("AddN", xs[::-1], (4,), "float32"))
    g = b.build()
    low = lower(g)
    assert low.params[0].members == tuple(g.inputs[::-1])
    assert [r for r in low.roles.values() if r != "output"] == ["fold"]
    prog = akgpy.fuse(g)
    rng = np.random.default_rng(1)
    args = [(rng.standard_normal(4) * 10.0 ** rng.integers(-3, 4)).astype(np.float32) for _ in range(n)]
    assert np.array_equal(prog(*args)[0], run(g, args)[0])
