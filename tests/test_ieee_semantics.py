"""IEEE 754 and numpy semantics of compiled kernels, bit for bit (issue 48, defects 2, 3, 5, 6).

TVM's simplifier folds float expressions as if no value were NaN, inf or -0 (x - x -> 0,
x * 0 -> 0, x == x -> True, x / c -> x * (1 / c)) and aborts on x / 0.0; integer division by
zero and INT_MIN / -1 trap (SIGFPE); a float != 0 is LLVM's ordered compare, false for NaN. Every
case here runs a compiled program under both schedules, in float16 and float32, on NaN, +-inf,
+-0, subnormals and float16's extremes, and compares with the reference bit for bit: + - * / and
the compares round once in both, so nothing but a fold or a trap can make them differ."""
from __future__ import annotations

import numpy as np
import pytest

import akgpy
from akgpy import GraphBuilder, reference
from akgpy.testing import check_program

SHAPE = (4, 48)
SPECIAL = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 3.0, 0.1, -2.5, 65504.0, -65504.0, 6e-8, -6e-8,
           6.1e-5, 1e-45, -1e-45, 1e-39, 3e38, -3e38, 7.0, 1e4, -1e-3]


def _specials(dtype: str, seed: int) -> np.ndarray:
    """Every special value at least once, then a shuffled mix of them and ordinary values."""
    rng = np.random.default_rng(seed)
    with np.errstate(over="ignore"):
        vals = np.array(SPECIAL, np.float32).astype(dtype)
        a = rng.standard_normal(SHAPE).astype(dtype)
    flat = a.reshape(-1)
    flat[:len(vals)] = vals
    hit = rng.random(flat.size) < 0.5
    flat[hit] = rng.choice(vals, int(hit.sum()))
    return a


def _bitwise_mismatch(got: np.ndarray, want: np.ndarray) -> str | None:
    """Same values, same NaN positions, same signs of zero and infinity."""
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype.kind == "f":
        same = (got == want) & (np.signbit(got) == np.signbit(want)) | (np.isnan(got) & np.isnan(want))
    else:
        same = got == want
    if same.all():
        return None
    i = np.flatnonzero(~same)[0]
    return f"{int((~same).sum())} elements differ, e.g. got {got.flat[i]!r}, want {want.flat[i]!r}"


def _check(g, inputs) -> None:
    with np.errstate(all="ignore"):
        want = akgpy.reference.run(g, [a.copy() for a in inputs])
    for schedule in ("poly", "plain"):
        got = akgpy.fuse(g, schedule=schedule)(*[a.copy() for a in inputs])
        for name, o, w in zip(g.outputs, got, want):
            bad = _bitwise_mismatch(o, w)
            assert bad is None, f"{g.name} {schedule} {name}: {bad}"


def _zeros(b, x):
    return b.broadcast_to(0.0, x.shape, x.dtype)


# each a graph TVM's simplifier would fold (or abort on) where IEEE gives NaN, inf or -0
FOLDS = {
    "x_minus_x": lambda b, x, y: x - x,
    "x_times_1_minus_x": lambda b, x, y: x * 1.0 - x,  # a fenced x * 1 simplified to the Sub's fenced x
    "x_times_1_times_1_minus_x": lambda b, x, y: (x * 1.0) * 1.0 - x,
    "x_times_1_eq_x": lambda b, x, y: b.equal(x * 1.0, x),
    "x_times_y_minus_x_times_y": lambda b, x, y: (lambda p: p - p)(x * y),
    "x_times_0": lambda b, x, y: x * 0.0,
    "0_times_x": lambda b, x, y: b.mul(0.0, x),
    "x_plus_1_minus_x": lambda b, x, y: (x + 1.0) - x,
    "x_eq_x": lambda b, x, y: b.equal(x, x),
    "x_plus_y_minus_y": lambda b, x, y: (x + y) - y,
    "x_minus_x_plus_y": lambda b, x, y: x - (x + y),
    "x_plus_0": lambda b, x, y: x + 0.0,  # -0 + 0 is +0
    "x_minus_neg0": lambda b, x, y: x - (-0.0),  # -0 - (-0) is +0
    "0_plus_x": lambda b, x, y: b.add(0.0, x),
    "0_div_x": lambda b, x, y: b.div(0.0, x),
    "x_div_0": lambda b, x, y: x / 0.0,
    "x_div_neg0": lambda b, x, y: x / -0.0,
    "x_div_broadcast_0": lambda b, x, y: x / _zeros(b, x),
    "reciprocal_of_broadcast_0": lambda b, x, y: b.reciprocal(_zeros(b, x)) * x,
    "x_times_broadcast_0": lambda b, x, y: x * _zeros(b, x),
    "x_div_3": lambda b, x, y: x / 3.0,  # x * (1 / 3) rounds differently for some x
    "x_div_0_1": lambda b, x, y: x / 0.1,
    "x_div_subnormal": lambda b, x, y: x / 1e-40,  # 1 / 1e-40 overflows float32
    "x_div_4": lambda b, x, y: x / 4.0,  # exact as x * 0.25: may stay a product
    "select_minus_branch": lambda b, x, y: b.select(b.greater(x, y), x, np.inf) - np.inf,
    "max_plus_1_minus_max": lambda b, x, y: (lambda m: (m + 1.0) - m)(x.max(axis=1, keepdims=True)),
    "addn_with_zero": lambda b, x, y: b.addn(x, _zeros(b, x)),
    "sub_after_assign": lambda b, x, y: (lambda t: t - x)(b.assign(y, x + 1.0)),
}


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("case", sorted(FOLDS))
def test_float_identities_are_not_folded(case, dtype):
    b = GraphBuilder(f"fold_{case}")
    x, y = b.input("x", SHAPE, dtype), b.input("y", SHAPE, dtype)
    b.output(FOLDS[case](b, x, y))
    _check(b.build(), [_specials(dtype, 1), _specials(dtype, 2)])


def test_division_by_a_constant_whose_reciprocal_is_exact_stays_a_product():
    """x / 4 is x * 0.25 for every x (both round x * 2^-2 once): that rewrite is exact and kept,
    while x / 3 stays a division."""
    for c, op in ((4.0, "fmul"), (3.0, "fdiv")):
        b = GraphBuilder("div_const")
        x = b.input("x", (64, 256))
        b.output(x / c)
        ll = akgpy.fuse(b.build()).kernels[0].source
        assert f"{op} <" in ll, f"x / {c}: no vector {op}"
        if op == "fmul":
            assert "fdiv" not in ll


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_cast_to_bool_and_select_take_nan_as_true(dtype):
    """numpy and C: bool(NaN) is True; TVM's float != is LLVM's ordered compare, false for NaN."""
    b = GraphBuilder("nan_truth")
    x, y = b.input("x", SHAPE, dtype), b.input("y", SHAPE, dtype)
    b.output(x.astype("bool"), b.select(x, y, -y))
    g = b.build()
    xs = [_specials(dtype, 3), _specials(dtype, 4)]
    _check(g, xs)
    truth = akgpy.fuse(g)(*xs)[0]
    assert truth[np.isnan(xs[0])].all() and not truth[xs[0] == 0].any()


INT_CASES = {
    "x_div_y": lambda b, x, y: x / y,
    "x_div_0": lambda b, x, y: x / 0,
    "x_div_broadcast_0": lambda b, x, y: x / b.broadcast_to(0, x.shape, x.dtype),
    "reciprocal": lambda b, x, y: b.reciprocal(y),
    "x_div_minus_1": lambda b, x, y: x / -1,
}


def _int_inputs(dtype: str) -> list[np.ndarray]:
    info = np.iinfo(dtype)
    rng = np.random.default_rng(5)
    x = rng.integers(info.min, info.max, SHAPE, dtype=dtype, endpoint=True)
    y = rng.integers(-3, 4, SHAPE, dtype=dtype)
    x.flat[:6] = [info.min, info.min, info.max, -7, 7, 0]
    y.flat[:6] = [-1, 0, -1, 2, -2, 0]
    return [x, y]


@pytest.mark.parametrize("dtype", ["int32", "int64", "int8"])
@pytest.mark.parametrize("case", sorted(INT_CASES))
def test_integer_division_by_zero_and_overflow_have_one_result(case, dtype):
    """Truncating division; x / 0 is 0 and INT_MIN / -1 is INT_MIN (numpy's integer results),
    in the kernel and the reference; no SIGFPE."""
    b = GraphBuilder(f"intdiv_{case}")
    x, y = b.input("x", SHAPE, dtype), b.input("y", SHAPE, dtype)
    b.output(INT_CASES[case](b, x, y))
    g = b.build()
    xs = _int_inputs(dtype)
    _check(g, xs)
    if case == "x_div_y":
        got = akgpy.fuse(g)(*xs)[0]
        info = np.iinfo(dtype)
        assert list(got.flat[:6]) == [info.min, 0, -info.max, -3, -3, 0]


def test_reference_integer_division_is_exact_in_int64():
    """Through float64, 2**62 + 1 would lose its last bit."""
    b = GraphBuilder("int64_div")
    x, y = b.input("x", (3,), "int64"), b.input("y", (3,), "int64")
    b.output(x / y)
    g = b.build()
    xs = [np.array([2 ** 62 + 1, -(2 ** 62) - 3, 9], np.int64), np.array([1, 1, -2], np.int64)]
    got, = akgpy.reference.run(g, xs)
    assert list(got) == [2 ** 62 + 1, -(2 ** 62) - 3, -4]


def test_share_exp_is_off_unless_inexact_math_is_asked_for():
    """c / (exp(-x) + 1) with c = inf at x = -88: IEEE gives inf; share_exp's c * e / (e + 1)
    gives inf * 0 = NaN where e = exp(-|x|) underflows. Off by default, on with inexact_math."""
    from akgpy.targets import default_config
    b = GraphBuilder("sigmoid_inf")
    x, c = b.input("x", (64, 256)), b.input("c", (64, 256))
    b.output(b.log(b.exp(-b.abs(x)) + 1.0) + b.maximum(x, 0.0), c / (b.exp(-x) + 1.0))
    g = b.build()
    xs = np.full((64, 256), -88.0, np.float32)
    cs = np.full((64, 256), np.inf, np.float32)
    want = reference.run(g, [xs, cs])
    prog = akgpy.fuse(g)
    assert "share_exp" not in prog.explain()
    got = prog(xs, cs)
    np.testing.assert_array_equal(got[1], want[1])
    loose = akgpy.fuse(g, config=default_config().replace(inexact_math=True))
    assert "share_exp" in loose.explain()


@pytest.mark.parametrize("schedule", ["poly", "plain"])
def test_equal_of_bools(schedule):
    """Equal on two bool operands (a mask compared with a mask or a constant, as torch's
    decompositions emit): TVM's LLVM code generator compared i1 vectors with `fcmp`, invalid IR."""
    b = GraphBuilder("eq_bool")
    x, y = b.input("x", (64,), "bool"), b.input("y", (64,), "bool")
    b.output(b.equal(x, y), b.equal(x, False))
    g = b.build()
    prog = akgpy.fuse(g, schedule=schedule)
    assert not check_program(g, prog)
    assert not check_program(g, prog, seed=1)
