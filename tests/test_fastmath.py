"""The vectorisable float32 exp/tanh (akgpy/te/fastmath.py) against float64 numpy on a dense grid,
compiled the way every kernel is (through akgpy.fuse), plus inf/NaN/underflow semantics."""
from __future__ import annotations

import re

import numpy as np
import pytest

import akgpy
from akgpy import GraphBuilder

# measured on 2^20 points: exp 0.86 ulp max, log 0.82, tanh 5.2 ulp max (3.4 at the 99.9th percentile, where
# tanh is within 1e-4 of +-1); a wrong coefficient or range reduction is off by thousands of ulp
ULP_BOUND = {"exp": 2, "tanh": 8, "log": 2}


def _run(op: str, x: np.ndarray) -> np.ndarray:
    # rows of whole vector registers: an odd row would add a scalar remainder loop (its own
    # test: test_poly_schedule.py::test_odd_extent_vectorises_full_registers_and_a_remainder)
    n = x.size
    x = np.concatenate([x, np.full(-n % 256, 0.5, np.float32)])
    b = GraphBuilder(f"fast_{op}")
    v = b.input("x", (16, x.size // 16))  # 2-D: a vector loop inside an outer loop
    b.output({"exp": b.exp, "log": b.log, "tanh": b.tanh, "erf": b.erf}[op](v * 1.0))
    prog = akgpy.fuse(b.build())
    assert "T.vectorized" in prog.kernels[0].tir  # the point of these: the loop stays a vector loop
    assert not re.search(r"@(expf|logf|tanhf)\b|llvm\.(exp|log)\.", prog.kernels[0].source)
    # and TVM's vectorizer really kept it a vector loop (it scalarises loops it cannot handle,
    # e.g. any that calls isnan): packed float instructions dominate the machine code
    asm = prog.kernels[0]._executable.mod.inspect_source("s")
    packed = len(re.findall(r"^\s+v\w+ps\b", asm, re.M))
    # vbroadcastss fills a vector with a constant: not scalar math (with 16-lane zmm registers
    # the 15 coefficient broadcasts of tanh outnumber half its packed instructions)
    scalar = len(re.findall(r"^\s+v(?!broadcast)\w+ss\b", asm, re.M))
    assert packed > 2 * scalar, (packed, scalar)
    (out,) = prog(x.reshape(16, -1))
    return out.reshape(-1)[:n]


def _ulps(got: np.ndarray, want64: np.ndarray) -> np.ndarray:
    want = want64.astype(np.float32)
    spacing = np.spacing(np.abs(want)).astype(np.float64)
    return np.abs(got.astype(np.float64) - want64) / spacing


@pytest.mark.parametrize("op,lo,hi", [("exp", -87.0, 88.7), ("tanh", -10.0, 10.0)])
def test_accuracy_on_a_dense_grid(op, lo, hi):
    x = np.concatenate([np.linspace(lo, hi, 1 << 18, dtype=np.float32),
                        np.linspace(-1e-3, 1e-3, 4096, dtype=np.float32),
                        np.float32([0.0, -0.0, 1e-30, -1e-30, 3.9e-4, 4.1e-4, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 0.25, -0.25])])
    assert x.size % 16 == 0
    got = _run(op, x)
    want = (np.exp if op == "exp" else np.tanh)(x.astype(np.float64))
    err = _ulps(got, want)
    assert err.max() <= ULP_BOUND[op], (op, float(err.max()), float(x[err.argmax()]))


def test_erf_accuracy_and_edges():
    """TVM's own LLVM erf returns garbage (1e38 on [-4, 4]); akgpy's rational erf is measured
    against math.erf: 2.4e-7 absolute max on a dense grid, and exact +-1 / NaN at the edges."""
    import math
    x = np.concatenate([np.linspace(-6.0, 6.0, (1 << 16) - 16, dtype=np.float32),
                        np.float32([0.0, -0.0, 1e-30, np.inf, -np.inf, np.nan, 4.0, -4.0, 10.0, -10.0, 0.5, 1.0,
                                    -1.0, 2.0, -2.0, 3.0])])
    got = _run("erf", x)
    want = np.array([math.erf(float(v)) if not np.isnan(v) else np.nan for v in x])
    finite = ~np.isnan(x)
    assert np.abs(got[finite] - want[finite]).max() <= 5e-7
    assert np.isnan(got[~finite]).all()
    assert got[-13] == 1.0 and got[-12] == -1.0  # +-inf


def test_exp_edges():
    x = np.resize(np.float32([np.inf, -np.inf, np.nan, 88.72, 88.8, 100.0, -87.5, -88.5, -100.0, -1e4, 0, 1]), 1024)
    got = _run("exp", x)
    assert got[0] == np.inf and got[1] == 0.0 and np.isnan(got[2])
    assert np.isclose(got[3], np.exp(np.float64(np.float32(88.72))), rtol=1e-6)
    assert got[4] == np.inf and got[5] == np.inf
    assert np.all(np.abs(got[6:10]) <= 2e-38) and np.all(got[6:10] >= 0)


def test_tanh_edges():
    x = np.resize(np.float32([np.inf, -np.inf, np.nan, 8.0, -8.0, 30.0, -30.0, 0.0]), 1024)
    got = _run("tanh", x)
    assert got[0] == 1.0 and got[1] == -1.0 and np.isnan(got[2])
    assert np.all(np.abs(np.abs(got[3:7]) - 1.0) <= 1e-6)


def test_float16_tanh_rounds_as_numpy_for_every_float16_input():
    """A float16 Tanh uses the lower-degree rational (fastmath.tanh_to_half): exhaustively, all
    65536 float16 values (subnormals, +-0, +-inf, NaN) give numpy's float16 tanh bit for bit."""
    x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).reshape(256, 256)
    b = GraphBuilder("tanh16")
    b.output(b.tanh(b.input("x", x.shape, "float16")))
    prog = akgpy.fuse(b.build())
    assert "5.0" in prog.kernels[0].tir  # the float16 clamp, not float32's 9
    (got,) = prog(x)
    with np.errstate(invalid="ignore"):  # NaN inputs
        want = np.tanh(x)
    assert got.dtype == np.float16
    same = (got.view(np.uint16) == want.view(np.uint16)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), (x[~same][:8], got[~same][:8], want[~same][:8])


def test_float16_exp_is_within_an_ulp_of_numpy_for_every_float16_input():
    """A float16 Exp clamps to [-18, 12] and leaves infinities and zeros to the float16 rounding
    (fastmath.exp_to_half): over all 65536 float16 values a handful round an ulp away from
    numpy's float16 exp (float32's exp rounded to float16 does as much), none further; inf, 0
    and NaN exactly where numpy has them."""
    x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).reshape(256, 256)
    b = GraphBuilder("exp16")
    b.output(b.exp(b.input("x", x.shape, "float16")))
    prog = akgpy.fuse(b.build())
    assert "-18.0" in prog.kernels[0].tir  # the float16 clamp, not float32's overflow handling
    (got,) = prog(x)
    with np.errstate(over="ignore", invalid="ignore"):  # inf where float16 overflows; NaN inputs
        want = np.exp(x)
    assert got.dtype == np.float16
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all()
    g, w = got[~nan].astype(np.float64), want[~nan].astype(np.float64)
    assert ((g == np.inf) == (w == np.inf)).all() and ((g == 0) == (w == 0)).all()
    finite = np.isfinite(w) & (w > 0)
    ulps = np.abs(got[~nan][finite].view(np.int16).astype(np.int64) - want[~nan][finite].view(np.int16).astype(np.int64))
    assert ulps.max() <= 1 and (ulps > 0).sum() <= 8, (int(ulps.max()), int((ulps > 0).sum()))


def test_tanh_and_erf_test_nothing_but_their_clamp():
    """NaN passes the clamp's selects and the rational carries it (test_tanh_edges,
    test_erf_accuracy_and_edges check the values): the two clamp selects are the only ones, no
    NaN test or small-x branch of their own."""
    for op in ("tanh", "erf"):
        b = GraphBuilder(op)
        b.output(getattr(b, op)(b.input("x", (16, 256))))
        tir = akgpy.fuse(b.build()).kernels[0].tir
        assert tir.count("T.Select") == 2 and "T.if_then_else" not in tir, (op, tir.count("T.Select"))


def test_log_accuracy_over_the_whole_range():
    x = np.concatenate([np.logspace(-45, 38.5, 1 << 18).astype(np.float32),
                        np.linspace(0.5, 2.0, 1 << 16, dtype=np.float32)])
    x = x[np.isfinite(x) & (x > 0)]
    x = x[: x.size // 16 * 16]
    got = _run("log", x)
    want = np.log(x.astype(np.float64))
    err = _ulps(got, want)
    assert err.max() <= ULP_BOUND["log"], (float(err.max()), float(x[err.argmax()]))


def test_log_edges():
    x = np.resize(np.float32([0.0, -0.0, -1.0, np.inf, -np.inf, np.nan, 1.0, 1e-45]), 1024)
    got = _run("log", x)
    assert got[0] == -np.inf and got[1] == -np.inf and np.isnan(got[2]) and got[3] == np.inf
    assert np.isnan(got[4]) and np.isnan(got[5]) and got[6] == 0.0
    assert np.isclose(got[7], np.log(np.float64(np.float32(1e-45))), rtol=1e-6)


def test_plain_schedule_keeps_libm_in_its_scalar_loops():
    """Polynomial math pays off only in vector loops; the plain schedule's reductions run scalar,
    where libm is faster (measured 110 vs 280 ms on a yolo loss graph), so plain lowers to libm."""
    b = GraphBuilder("plain_math")
    v = b.input("x", (64, 256))
    b.output(b.exp(v).sum(axis=1))
    src = akgpy.fuse(b.build(), schedule="plain").kernels[0].source
    assert re.search(r"@expf\b|llvm\.exp\.", src)


def test_poly_picks_libm_when_no_math_statement_is_vectorised():
    """exp inside a reduction over a 6-wide axis: no vector loop, so the poly schedule keeps
    its schedule but recompiles the statements with libm; a softmax keeps vector math."""
    from akgpy.testing import check_program
    b = GraphBuilder("scalar_math")
    v = b.input("x", (4096, 6))
    b.output(b.exp(v).sum(axis=1))
    g = b.build()
    prog = akgpy.fuse(g)
    assert "float32 exp/log/tanh: libm" in prog.explain()
    assert re.search(r"@expf\b|llvm\.exp\.", prog.kernels[0].source)
    assert not check_program(g, prog)
    b = GraphBuilder("vector_math")
    v = b.input("x", (64, 256))
    e = b.exp(v - v.max(axis=1, keepdims=True))
    b.output(e / e.sum(axis=1, keepdims=True))
    assert "float32 exp/log/tanh: vector math" in akgpy.fuse(b.build()).explain()


def test_exp_without_clamps_inside_a_proven_range():
    """y = 87 tanh(x) is in [-87, 87] (graph/ranges.py), where exp needs neither its overflow
    clamp nor the 2^128 fix-up: they are gone from the kernel and it stays within 2 ulp."""
    x = np.linspace(-3.0, 3.0, 1 << 16, dtype=np.float32)
    b = GraphBuilder("exp_in_range")
    v = b.input("x", (16, x.size // 16))
    y = b.tanh(v) * 87.0
    b.output(y)
    b.output(b.exp(y))
    prog = akgpy.fuse(b.build())
    assert "88.72283935546875" not in prog.kernels[0].tir
    got_y, got = (o.reshape(-1) for o in prog(x.reshape(16, -1)))
    err = _ulps(got, np.exp(got_y.astype(np.float64)))
    assert err.max() <= ULP_BOUND["exp"], (float(err.max()), float(got_y[err.argmax()]))


def test_softplus_drops_the_special_cases_it_cannot_reach():
    """log(1 + exp(-|x|)): the exp's argument is <= 0 and the log's in [1, 2], so the kernel has
    no overflow, zero, negative, subnormal or infinity handling; NaN still gives NaN, +-inf 0."""
    inf, nan = np.inf, np.nan
    x = np.concatenate([np.linspace(-100, 100, 4080, dtype=np.float32),
                        np.float32([inf, -inf, nan, 0, -0.0, 1e-45, 3e38, -3e38, 88.8, -88.8, 1e-30, 20, -20, 1, -1,
                                    0.5])])
    b = GraphBuilder("softplus")
    v = b.input("x", (16, x.size // 16))
    b.output(b.log(b.exp(-b.abs(v)) + 1.0))
    g = b.build()
    prog = akgpy.fuse(g)
    tir = prog.kernels[0].tir
    assert "88.72283935546875" not in tir and 'T.float32("-inf")' not in tir and 'T.float32("nan")' not in tir
    # nor NaN tests (|x| <= inf): NaN passes exp's clamp and the log's arithmetic by itself
    assert 'T.float32("inf")' not in tir
    (got,) = prog(x.reshape(16, -1))
    got = got.reshape(-1)
    (want,) = akgpy.reference.run(g, [x.reshape(16, -1)])
    want = want.reshape(-1)
    assert np.array_equal(np.isnan(got), np.isnan(x)) and got[4080] == 0.0 and got[4081] == 0.0
    ok = ~np.isnan(x)
    assert np.allclose(got[ok], want[ok], rtol=1e-6, atol=1e-7)
    # the same log over an argument that may be 0 keeps its special cases
    b = GraphBuilder("log_anywhere")
    v = b.input("x", (16, 256))
    b.output(b.log(b.exp(-b.abs(v))))
    assert 'T.float32("-inf")' in akgpy.fuse(b.build()).kernels[0].tir


def test_exp_takes_n_and_2_to_the_n_from_one_add():
    """exp's range reduction rounds x log2(e) by adding 1.5 * 2^23 + 127 (fastmath.EXP_MAGIC):
    n is that sum less the constant and 2^n its low bits shifted into the exponent field, with
    no floor (vrndscaleps) and no float -> int conversion in the kernel, which at 16 lanes was
    4 of the exp's ~24 vector ops. Accuracy: test_accuracy_on_a_dense_grid."""
    b = GraphBuilder("exp_ops")
    v = b.input("x", (16, 1024))
    b.output(b.exp(v))
    prog = akgpy.fuse(b.build())
    asm = prog.kernels[0]._executable.mod.inspect_source("s")
    assert re.search(r"^\s+vfmadd\w*ps\b", asm, re.M)  # the kernel is the polynomial one
    assert not re.search(r"^\s+(vrndscaleps|vroundps|vcvt\w*ps2dq)\b", asm, re.M)


def test_log_of_an_argument_in_one_to_two_is_a_polynomial_in_x_minus_1():
    """Where graph/ranges.py proves the argument in [1, 2] (softplus's 1 + exp(-|x|)), log is
    u + u^2 P(u) with u = x - 1: no exponent taken from the bits. Every float32 of [1, 2] is
    within 1.3 ulp (1.26 measured) and log(1) is 0 exactly (NaN: the softplus test above). An
    argument that may leave [1, 2] takes the general path."""
    x = (np.arange((1 << 23) + 1, dtype=np.int64) + 0x3F800000).astype(np.uint32).view(np.float32)
    x = np.concatenate([x, np.full(-x.size % 4096, 1.5, np.float32)])
    b = GraphBuilder("log_unit")
    v = b.input("x", (64, x.size // 64))
    b.output(b.log(b.minimum(b.maximum(v, 1.0), 2.0)))
    prog = akgpy.fuse(b.build())
    assert "T.reinterpret" not in prog.kernels[0].tir
    (got,) = prog(x.reshape(64, -1))
    got = got.reshape(-1)
    assert got[0] == 0.0
    err = _ulps(got[1:], np.log(x[1:].astype(np.float64)))
    assert err.max() <= 1.3, (float(err.max()), float(x[1:][err.argmax()]))
    b = GraphBuilder("log_wider")
    v = b.input("x", (16, 256))
    b.output(b.log(b.minimum(b.maximum(v, 1.0), 2.5)))
    assert "T.reinterpret" in akgpy.fuse(b.build()).kernels[0].tir


def test_exp_and_log_polynomials_fit_far_below_float32_rounding():
    """The polynomials alone, in float64: exp's P of degree 4 and log's of degree 7 are minimax
    fits whose error (3.1e-9 and 5.8e-9) is a twentieth of float32's half-ulp (3e-8 to 6e-8),
    so the ulp bounds above measure rounding, not the fit. A coefficient off in its 4th digit,
    or a polynomial a degree lower (exp: 1.0e-7, log: 3.2e-8), fails."""
    from akgpy.te.fastmath import _EXP_P, _LOG_P
    r = np.linspace(-np.log(2) / 2, np.log(2) / 2, 100001)
    y = 1 + r * (1 + r * np.polyval(_EXP_P, r))
    assert np.max(np.abs(y / np.exp(r) - 1)) < 5e-9
    m = np.linspace(np.sqrt(0.5) - 1, np.sqrt(2) - 1, 100001)
    m = m[np.abs(m) > 1e-6]
    y = m - m * m / 2 + m ** 3 * np.polyval(_LOG_P, m)
    assert np.max(np.abs(y / np.log1p(m) - 1)) < 1e-8
