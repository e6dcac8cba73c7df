"""Value ranges (akgpy/graph/ranges.py): rules on hand-made graphs, and a property test that every
value the numpy reference computes lies in its tensor's range, special inputs included."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from akgpy import GraphBuilder
from akgpy.graph.ranges import FULL, Range, value_ranges
from akgpy.reference import evaluate


def _ranges(build):
    b = GraphBuilder("ranges")
    out = build(b)
    b.output(out)
    g = b.build()
    return g, value_ranges(g), out.name


def test_softplus_log_takes_a_finite_normal_argument():
    g, r, _ = _ranges(lambda b: b.log(b.exp(-b.abs(b.input("x", (8,)))) + 1.0))
    exp_in, exp_out, log_in = (g.ops[i].outputs[0] for i in (1, 2, 3))
    assert r["x"] == FULL
    assert 0.0 <= r[exp_in].hi < 1e-40 and r[exp_in].lo == -math.inf
    assert r[exp_out].within(-1e-40, 1.0 + 1e-5) and r[exp_out].lo <= 0.0
    assert r[log_in].within(1.0 - 1e-5, 2.0 + 1e-5)


def test_rules():
    def check(build, lo, hi, rel=1e-5, abs_=1e-30):  # bounds are widened a little (module doc)
        _, r, out = _ranges(build)
        assert r[out].lo <= lo and math.isclose(r[out].lo, lo, rel_tol=rel, abs_tol=abs_), (r[out], lo, hi)
        assert r[out].hi >= hi and math.isclose(r[out].hi, hi, rel_tol=rel, abs_tol=abs_), (r[out], lo, hi)
    x = lambda b: b.tanh(b.input("x", (4,)))  # noqa: E731  [-1, 1]
    check(lambda b: x(b) * 3.0 - 1.0, -4.0, 2.0)
    check(lambda b: x(b) * b.tanh(b.input("y", (4,))), -1.0, 1.0)
    check(lambda b: b.maximum(x(b), 0.5), 0.5, 1.0)
    check(lambda b: b.sqrt(x(b) + 3.0), math.sqrt(2.0), 2.0)
    check(lambda b: 1.0 / (x(b) + 2.0), 1.0 / 3.0, 1.0)
    check(lambda b: b.select(b.input("c", (4,), "bool"), x(b), 5.0), -1.0, 5.0)
    check(lambda b: b.cast(b.input("c", (4,), "bool"), "float32") * 2.0, 0.0, 2.0)
    check(lambda b: b.cast(b.input("u", (4,), "uint8"), "float16"), 0.0, 255.0, rel=2e-3, abs_=1e-7)


def test_what_it_cannot_bound_is_unbounded():
    # a divisor that may be 0, a cast past float16's largest, an integer product that wraps
    _, r, out = _ranges(lambda b: b.tanh(b.input("x", (4,))) / b.tanh(b.input("y", (4,))))
    assert r[out] == FULL
    _, r, out = _ranges(lambda b: b.cast(b.tanh(b.input("x", (4,))) * 1e5, "float16"))
    assert r[out] == FULL
    _, r, out = _ranges(lambda b: b.cast(b.input("u", (4,), "uint8"), "int8") * 100)
    assert r[out] == Range(-128.0, 127.0)
    # exp(100) is finite in float64 but inf in float32: a log of it must keep its inf test
    _, r, out = _ranges(lambda b: b.exp(100.0 - b.abs(b.input("x", (4,)))))
    assert r[out].hi == math.inf


SPECIAL = np.float32([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3e38, -3e38, 1e-30, 88.0, -90.0])


@st.composite
def chains(draw):
    b = GraphBuilder("ranges_prop")
    x = b.input("x", (64,), draw(st.sampled_from(["float32", "float16"])))
    vals = [x]
    for _ in range(draw(st.integers(1, 8))):
        a = draw(st.sampled_from(vals))
        kind = draw(st.sampled_from(["neg", "abs", "exp", "log", "tanh", "sqrt", "add", "mul", "sub", "max",
                                     "div", "cast", "pair"]))
        c = draw(st.sampled_from([0.5, 2.0, -1.5, 1.0, 100.0]))
        if kind in ("neg", "abs", "exp", "log", "tanh", "sqrt"):
            y = getattr(b, kind)(a)
        elif kind == "add":
            y = a + c
        elif kind == "mul":
            y = a * c
        elif kind == "sub":
            y = c - a
        elif kind == "max":
            y = b.maximum(a, c)
        elif kind == "div":
            y = c / a
        elif kind == "cast":
            y = b.cast(a, "float16" if a.dtype == "float32" else "float32")
        else:
            y = b.add(a, draw(st.sampled_from([v for v in vals if v.dtype == a.dtype])))
        vals.append(y)
    b.output(vals[-1])
    return b.build()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chains(), st.integers(0, 2**31 - 1))
def test_every_reference_value_lies_in_its_range(g, seed):
    rng = np.random.default_rng(seed)
    dt = g.tensors["x"].dtype
    with np.errstate(over="ignore"):  # 3e38 is inf in float16: a special input like the others
        x = np.concatenate([SPECIAL, rng.standard_normal(26) * 50, rng.standard_normal(26)]).astype(dt)
    env = evaluate(g, [x])
    for name, r in value_ranges(g).items():
        if g.tensors[name].is_const:
            continue
        v = np.asarray(env[name], dtype=np.float64)
        v = v[~np.isnan(v)]
        assert np.all((v >= r.lo) & (v <= r.hi)), (name, r, v[(v < r.lo) | (v > r.hi)][:4], g.ops)
