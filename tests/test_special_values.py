"""NaN, +-inf, +-0, subnormals and values past float16's range through every elementwise and
reduction op, under both schedules, against the numpy reference: NaN where the reference has
NaN, the same infinities, and finite values within the dtype's tolerance.

Random inputs (akgpy.testing.random_inputs) are finite and moderate, so the corpus and the
property tests never see these. They found that float max/min dropped NaN and that a row max
of -inf gave -FLT_MAX (te/extrema.py, targets/nan_extrema.py)."""
from __future__ import annotations

import re

import numpy as np
import pytest

import akgpy
from akgpy import GraphBuilder

SPECIAL = np.float32([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1e-39, 3e38, -3e38, 1.0, -1.0, 0.5, 2.0,
                      88.8, -88.8, 100.0, -100.0, 1e-30, 65504.0, 70000.0])
SHAPE = (16, 128)


def _inputs(dtype: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(SHAPE).astype(np.float32)
    hit = rng.random(SHAPE) < 0.3
    a[hit] = rng.choice(SPECIAL, int(hit.sum()))
    with np.errstate(over="ignore"):
        return a.astype(dtype)


def _mismatch(got: np.ndarray, want: np.ndarray, tol: float) -> str | None:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    nan_g, nan_w = np.isnan(got), np.isnan(want)
    if (nan_g != nan_w).any():
        i = np.flatnonzero(nan_g != nan_w)[0]
        return f"{int((nan_g != nan_w).sum())} NaN positions differ, e.g. got {got.flat[i]}, want {want.flat[i]}"
    inf_w = np.isinf(want)
    if (np.isinf(got) != inf_w).any() or (got[inf_w] != want[inf_w]).any():
        i = np.flatnonzero((np.isinf(got) != inf_w) | (inf_w & (got != want)))[0]
        return f"infinities differ, e.g. got {got.flat[i]}, want {want.flat[i]}"
    fin = ~nan_w & ~inf_w
    bad = ~np.isclose(got[fin], want[fin], rtol=tol, atol=tol)
    if bad.any():
        i = np.flatnonzero(bad)[0]
        return f"{int(bad.sum())} values differ, e.g. got {got[fin][i]}, want {want[fin][i]}"
    return None


UNARY = ["neg", "abs", "exp", "log", "sqrt", "rsqrt", "reciprocal", "tanh", "erf"]
BINARY = ["add", "sub", "mul", "div", "maximum", "minimum", "pow"]
CASES = {
    **{u: (lambda u: lambda b, x, y: getattr(b, u)(x))(u) for u in UNARY},
    **{o: (lambda o: lambda b, x, y: getattr(b, o)(x, y))(o) for o in BINARY},
    **{f"{o}_const": (lambda o: lambda b, x, y: getattr(b, o)(x, 0.5))(o) for o in ("maximum", "minimum", "div")},
    **{f"const_{o}": (lambda o: lambda b, x, y: getattr(b, o)(b.broadcast_to(0.5, x.shape, x.dtype), x))(o)
       for o in ("maximum", "minimum")},
    "sum_rows": lambda b, x, y: b.reduce_sum(x, axis=1),
    "sum_cols": lambda b, x, y: b.reduce_sum(x, axis=0),
    "max_rows": lambda b, x, y: b.reduce_max(x, axis=1),
    "max_cols": lambda b, x, y: b.reduce_max(x, axis=0),
    "max_all": lambda b, x, y: b.reduce_max(x),
    "softmax": lambda b, x, y: (lambda e: e / e.sum(axis=1, keepdims=True))(b.exp(x - x.max(axis=1, keepdims=True))),
    "select": lambda b, x, y: b.select(b.greater(x, y), x, y),
    "relu": lambda b, x, y: b.relu(x),
    "softplus": lambda b, x, y: b.log(b.exp(-b.abs(x)) + 1.0),
}


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_special_values_match_the_reference(case, dtype):
    b = GraphBuilder(f"special_{case}")
    x, y = b.input("x", SHAPE, dtype), b.input("y", SHAPE, dtype)
    b.output(CASES[case](b, x, y))
    g = b.build()
    xs = [_inputs(dtype, 1), _inputs(dtype, 2)]
    with np.errstate(all="ignore"):
        want = akgpy.reference.run(g, [a.copy() for a in xs])
    for schedule in ("poly", "plain"):
        got = akgpy.fuse(g, schedule=schedule)(*[a.copy() for a in xs])
        for name, o, w in zip(g.outputs, got, want):
            bad = _mismatch(o, w, 1e-3 if dtype == "float16" else 1e-4)
            assert bad is None, f"{case} {dtype} {schedule} {name}: {bad}"


def test_row_max_of_minus_infinity_is_minus_infinity_and_keeps_its_partials():
    """te.max starts a reduction from -FLT_MAX (TVM's rfactor knows the max reducer only with
    that identity); the pass turns the accumulators' start into -inf after the schedule ran,
    so the row is still split into vector partials."""
    b = GraphBuilder("row_max")
    v = b.input("x", (64, 1000))
    b.output(v.max(axis=1))
    g = b.build()
    prog = akgpy.fuse(g)
    assert "rfactor): ReduceMax" in prog.explain()
    x = np.full((64, 1000), -np.inf, np.float32)
    x[1] = 3.0
    x[2, 999] = np.nan
    x[3, 0] = np.nan
    for p in (prog, akgpy.fuse(g, schedule="plain")):
        got = p(x)[0]
        assert got[0] == -np.inf and got[1] == 3.0 and np.isnan(got[2]) and np.isnan(got[3]) and got[4] == -np.inf


def test_relu_keeps_nan_in_one_vector_op():
    """Maximum(x, 0) as `x < 0 ? 0 : x` keeps a NaN x and is still one vmaxps per vector (no
    compare and blend), and so is leaky ReLU's max(0.1 x, x); between two unrelated tensors a
    NaN in the second takes a test and a blend more."""
    b = GraphBuilder("relu")
    v = b.input("x", (64, 1024))
    b.output(b.relu(v))
    asm = akgpy.fuse(b.build()).kernels[0]._executable.mod.inspect_source("s")
    assert re.search(r"^\s+vmaxps\b", asm, re.M) and not re.search(r"^\s+v(blendv|cmp)\w*ps\b", asm, re.M)
    b = GraphBuilder("leaky_relu")  # a NaN x makes 0.1 x NaN too: one select suffices
    v = b.input("x", (64, 1024))
    b.output(b.maximum(v * 0.1, v))
    asm = akgpy.fuse(b.build()).kernels[0]._executable.mod.inspect_source("s")
    assert re.search(r"^\s+vmaxps\b", asm, re.M) and not re.search(r"^\s+v(blendv|cmp)\w*ps\b", asm, re.M)
    b = GraphBuilder("max2")
    v, w = b.input("x", (64, 1024)), b.input("y", (64, 1024))
    b.output(b.maximum(v, w))
    prog = akgpy.fuse(b.build())
    x, y = np.ones((64, 1024), np.float32), np.zeros((64, 1024), np.float32)
    x[0, :3], y[1, :3] = np.nan, np.nan
    got = prog(x, y)[0]
    assert np.isnan(got[0, :3]).all() and np.isnan(got[1, :3]).all() and (got[2:] == 1.0).all()
