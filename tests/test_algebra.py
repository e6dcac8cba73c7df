"""Graph rewrites that cut math (akgpy/graph/algebra.py), checked on the rewritten graph and
against the reference of the original one."""
from __future__ import annotations

import re

import numpy as np
import pytest

import akgpy
from akgpy import GraphBuilder
from akgpy.graph.algebra import share_exp
from akgpy import reference
from akgpy.targets import default_config
from akgpy.testing import check_program, compare

INEXACT = default_config().replace(inexact_math=True)  # share_exp is ~1.5 ulp, not exact


def _sigmoid_ce(dtype="float32", reduce=False, exp_of_x_output=False):
    """softplus(-|x|) + max(x, 0) - x z, and the sigmoid 1 / (1 + exp(-x)) - z: yolo's loss."""
    b = GraphBuilder("sigmoid_ce")
    x, z = b.input("x", (64, 255), dtype), b.input("z", (64, 255), dtype)
    e = b.exp(-b.abs(x))
    loss = b.log(e + 1.0) + b.maximum(x, 0.0) - x * z
    b.output(loss.sum() if reduce else loss)
    f = b.exp(-x)
    b.output(1.0 / (f + 1.0) - z)
    if exp_of_x_output:
        b.output(f)
    return b.build()


def test_exp_of_minus_x_is_taken_from_exp_of_minus_abs_x():
    """One exp per element where there were two: exp(-x) = x >= 0 ? e : 1 / e with
    e = exp(-|x|), for a sigmoid 1 / (1 + exp(-x)). Checked where exp(-x) overflows and e
    underflows (x = -100), where e is subnormal (x = -88, -87.5: te/fastmath.py's exp gives 0
    there, so 1 / e is inf and the sigmoid 0 where it was 6e-39), at 0, -0, at the float32 exp
    limits, and on the loss."""
    g = _sigmoid_ce()
    got = share_exp(g)
    assert got is not None
    rewritten, note = got
    assert [op.name for op in rewritten.ops].count("Exp") == 1 and "share_exp" in note
    assert [op.name for op in rewritten.ops].count("RealDiv") == 1  # c * select(x >= 0, 1, e) / (e + 1)
    assert [op.name for op in g.ops].count("Exp") == 2  # the graph itself is left alone
    assert "share_exp" not in akgpy.fuse(g).explain()  # not exact for every x: off by default
    prog = akgpy.fuse(g, config=INEXACT)
    assert "share_exp" in prog.explain()
    rng = np.random.default_rng(0)
    x = rng.uniform(-12, 12, (64, 255)).astype(np.float32)
    x.flat[:13] = [-100.0, 100.0, 0.0, -0.0, -88.0, -87.5, -87.0, 88.0, 87.0, -1e-30, 1e-30, -89.0, 89.0]
    z = rng.uniform(0, 1, (64, 255)).astype(np.float32)
    got = prog(x, z)
    assert not compare(g, got, [x, z], reference.run(g, [x.copy(), z.copy()]), [x, z])
    sig = got[1] + z  # 1 / (1 + exp(-x)), to float32 rounding
    want = 1.0 / (1.0 + np.exp(-x.astype(np.float64)))
    assert np.all(np.abs(sig - want) <= 1e-6 + 1e-6 * want)


def test_exp_of_minus_x_is_not_shared_where_it_is_used_as_it_is():
    """exp(-x) itself an output: 1 / e would be inf for x in [-88.7, -87.3], where exp(-x) is
    finite, so the graph keeps its own exp there."""
    g = _sigmoid_ce(exp_of_x_output=True)
    assert share_exp(g) is None
    assert not check_program(g, akgpy.fuse(g))


@pytest.mark.parametrize("dtype,reduce", [("float16", False), ("float32", True)])
def test_exp_sharing_is_left_out_where_it_does_not_pay(dtype, reduce):
    """Not in float16 (1 / e rounds once more: a float16 ulp, the whole tolerance), nor where
    exp(-|x|) feeds a reduction whose loop the elementwise consumers of exp(-x) do not run in
    (rows of 255 summed whole: no rider fits): they would compute exp(-|x|) and a division."""
    g = _sigmoid_ce(dtype, reduce)
    assert share_exp(g) is None
    prog = akgpy.fuse(g)
    assert "share_exp" not in prog.explain()
    assert not check_program(g, prog)


def test_exp_sharing_with_a_reduction_is_kept_where_the_sigmoid_rides_in_its_loop():
    """yolo's loss (`~3153`): softplus(-|x|) terms summed over everything, the sigmoid's gradient
    an output of the same shape. Rewritten to take e from the sum's exp(-|x|), the gradient runs
    in the sum's loops (poly/riders.py) and the exp is computed once; the pipeline keeps the
    rewrite only then (and not with share_math off)."""
    b = GraphBuilder("sigmoid_ce_sum")
    x, z, w = b.input("x", (2, 16, 16, 3, 2)), b.input("z", (2, 16, 16, 3, 2)), b.input("w", (2, 16, 16, 3, 1))
    loss = w * (b.log(b.exp(-b.abs(x)) + 1.0) + b.maximum(x, 0.0) - x * z)  # per-anchor weights
    b.output(loss.sum(), 1.0 / (b.exp(-x) + 1.0) - z)
    g = b.build()
    assert share_exp(g) is None and share_exp(g, reduced=True) is not None
    prog = akgpy.fuse(g, config=INEXACT)
    text = prog.explain()
    assert "share_exp" in text and re.search(r"runs in the loops of S_ReduceSum_\d+_lanes_update: both evaluate Exp_\d+", text), text[:3000]
    assert not check_program(g, prog)
    off = akgpy.fuse(g, config=INEXACT.replace(share_math=False))
    assert "share_exp" not in off.explain() and not check_program(g, off)


def test_a_sigmoid_of_another_sum_takes_exp_of_minus_x_from_e():
    """c / (exp(-x) + k) with k other than 1 has no common denominator: exp(-x) itself is
    select(x >= 0, e, 1 / e), as before."""
    b = GraphBuilder("sigmoid_k")
    x, z = b.input("x", (64, 255)), b.input("z", (64, 255))
    b.output(b.log(b.exp(-b.abs(x)) + 1.0) + b.maximum(x, 0.0) - x * z, 3.0 / (b.exp(-x) + 2.0) - z)
    g = b.build()
    rewritten, _ = share_exp(g)
    assert [op.name for op in rewritten.ops].count("Exp") == 1 and [op.name for op in rewritten.ops].count("RealDiv") == 2
    prog = akgpy.fuse(g, config=INEXACT)
    x = np.random.default_rng(1).uniform(-12, 12, (64, 255)).astype(np.float32)
    x.flat[:6] = [-100.0, 100.0, 0.0, -0.0, -88.0, 88.0]
    z = np.zeros((64, 255), np.float32)
    got = prog(x, z)
    assert not compare(g, got, [x, z], reference.run(g, [x.copy(), z.copy()]), [x, z])
