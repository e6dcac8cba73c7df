"""Float16 round trips that cannot change a value are dropped (akgpy/targets/half_round_trips.py):
which values the pass proves float16, the code it saves on a masked float16 graph, and that
the results are bit for bit those without it, special values included."""
from __future__ import annotations

import re

import numpy as np
import pytest
from tvm import tirx
from tvm.script import tirx as T

import akgpy
from akgpy import GraphBuilder
from akgpy.targets import half_round_trips
from akgpy.targets.half_round_trips import _Values, drop_half_round_trips
from akgpy.targets.half_round_trips import holds_in_half
from akgpy.testing import check_program, random_inputs


def _trip(value_fn, dtype="float16", out="float32"):
    """out[i] = Cast(out, Cast(float16, value_fn(h[i], f[i], c[i]))), h float16 (or `dtype`),
    f float32, c a bool compare."""
    @T.prim_func
    def f(h: T.Buffer((16,), dtype), f: T.Buffer((16,), "float32"), o: T.Buffer((16,), out)):
        for i in range(16):
            o[i] = T.Cast(out, T.Cast("float16", value_fn(h[i], f[i], f[i] > T.float32(0))))
    return f


def _stored(func):
    return func.body.body.value


F32 = lambda x: T.Cast("float32", x)  # noqa: E731


@pytest.mark.parametrize("name,value_fn", [
    ("a widened float16", lambda h, f, c: F32(h)),
    ("a mask times a float16", lambda h, f, c: F32(h) * F32(c)),
    ("a float16 times a mask", lambda h, f, c: F32(T.Cast("float16", c)) * F32(h)),
    ("a negated float16 (Neg)", lambda h, f, c: F32(h) * T.float32(-1.0)),
    ("a float16 times a sign", lambda h, f, c: F32(h) * T.Select(c, T.float32(1.0), T.float32(-1.0))),
    ("a select of float16 values", lambda h, f, c: T.Select(c, F32(h), T.float32(0.5))),
    ("a max and a min", lambda h, f, c: T.max(T.min(F32(h), T.float32(6.0)), T.float32(0.0))),
    ("fabs", lambda h, f, c: T.fabs(F32(h))),
])
def test_values_float16_holds_lose_the_round_trip(name, value_fn):
    func = _trip(value_fn)
    out = drop_half_round_trips(func)
    assert not out.same_as(func), name
    assert "float16" not in re.sub(r'h: T.Buffer\(\(16,\), "float16"\)', "", out.script()), name


@pytest.mark.parametrize("name,value_fn,dtype", [
    ("a float32 value", lambda h, f, c: f, "float16"),
    ("a product of float16 values", lambda h, f, c: F32(h) * F32(h), "float16"),
    ("a constant float16 rounds", lambda h, f, c: T.Select(c, F32(h), T.float32(0.1)), "float16"),
    ("a sum with a mask", lambda h, f, c: F32(h) + F32(c), "float16"),
    ("a mask times a float32", lambda h, f, c: f * F32(c), "float16"),
    ("a float16 times two (it may overflow)", lambda h, f, c: F32(h) * T.float32(2.0), "float16"),
    ("a widened int16 (float16 holds integers up to 2048 only)", lambda h, f, c: F32(h), "int16"),
])
def test_values_float16_may_round_keep_it(name, value_fn, dtype):
    func = _trip(value_fn, dtype)
    assert drop_half_round_trips(func).same_as(func), name


def test_a_let_bound_masked_product_loses_it_too():
    @T.prim_func
    def f(h: T.Buffer((16,), "float16"), c: T.Buffer((16,), "bool"), o: T.Buffer((16,), "float32")):
        for i in range(16):
            v = T.float32()
            o[i] = T.Cast("float32", T.Cast("float16", T.Let(v, where={v: F32(h[i]) * F32(c[i])})))
    out = drop_half_round_trips(f)
    assert not out.same_as(f) and not isinstance(_stored(out), tirx.Cast)


def test_a_bool_round_trip_becomes_a_select_of_one_and_zero():
    out = _stored(drop_half_round_trips(_trip(lambda h, f, c: c)))
    assert isinstance(out, tirx.Select) and float(out.true_value.value) == 1.0 and float(out.false_value.value) == 0.0


def test_a_round_trip_into_float64_becomes_one_widening():
    out = _stored(drop_half_round_trips(_trip(lambda h, f, c: F32(h) * F32(c), out="float64")))
    assert isinstance(out, tirx.Cast) and str(out.ty) == "float64" and str(out.value.ty) == "float32"


def _masked(shape=(64, 256)):
    """ReLU-gradient-like float16 chain: d = x - x * f16(x > y), e = 0.1 * (x * f16(x > y))."""
    b = GraphBuilder("masked_half")
    x, y = b.input("x", shape, "float16"), b.input("y", shape, "float16")
    p = b.mul(b.cast(b.greater(x, y), "float16"), x)
    b.output(b.sub(x, p), b.mul(p, 0.0999755859375))
    return b.build()


def _conversions(prog) -> int:
    """float16 <-> float32 conversion instructions in the machine code. (LLVM IR would not
    count them: InstCombine narrows a subtraction of widened float16 values to a float16 one,
    which x86 without AVX512-FP16 then widens again.)"""
    asm = "\n".join(k._executable.mod.inspect_source("asm") for k in prog.kernels)
    return len(re.findall(r"\bvcvt(?:ph2ps|ps2ph)\b", asm))


def _specials(g, seed):
    xs = random_inputs(g, seed)
    special = np.array([np.inf, -np.inf, np.nan, -0.0, 0.0, 65504, -65504, 2.0 ** -24, -(2.0 ** -24), 6.1e-5],
                       np.float16)
    for k, a in enumerate(xs):
        flat = a.reshape(-1)
        flat[k::97][: len(special) * 8] = np.tile(special, 8)[: len(flat[k::97])]
    return xs


# an x86 CPU without AVX512-FP16, where float16 values convert (on a host with it, float16 ops
# are native and there is no conversion to count); every x86 host these tests run on has AVX2
NO_FP16_TARGET = {"kind": "llvm", "mcpu": "haswell"}


def test_a_masked_float16_graph_converts_less_and_gives_the_same_bits(monkeypatch):
    g = _masked()
    prog = akgpy.fuse(g, target=NO_FP16_TARGET)
    with monkeypatch.context() as m:
        m.setattr(half_round_trips, "drop_half_round_trips", lambda f: f)
        before = akgpy.fuse(g, target=NO_FP16_TARGET)
    # per 8 elements: x and y widen, the masked product rounds and widens again, each output
    # rounds (6); without the product's round trip, 4
    assert _conversions(prog) < _conversions(before)
    for seed in (0, 1):
        xs = _specials(g, seed)
        got, want = prog(*[a.copy() for a in xs]), before(*[a.copy() for a in xs])
        for a, b in zip(got, want):
            assert np.array_equal(a, b, equal_nan=True) and np.array_equal(np.signbit(a), np.signbit(b))
        assert not check_program(g, prog, seed)


def test_a_let_chain_is_analysed_once_per_var(monkeypatch):
    """16 lets, each reading the one before twice: one walk per var, not 2^16."""
    e, binds = tirx.Cast("float32", tirx.Var("h", "float16")), []
    for k in range(16):
        v = tirx.Var(f"v{k}", "float32")
        binds.append((v, e))
        e = tirx.Select(tirx.LT(v, tirx.FloatImm("float32", 0.0)), v, v)
    for v, value in reversed(binds):
        e = tirx.Let(v, value, e)
    calls = [0]
    half = _Values.half

    def counted(self, x):
        calls[0] += 1
        return half(self, x)
    monkeypatch.setattr(_Values, "half", counted)
    assert _Values(tirx.Evaluate(e)).half(e)
    assert calls[0] < 200


@pytest.mark.parametrize("v,held", [(0.5, True), (65504.0, True), (float("inf"), True), (float("nan"), True),
                                    (0.1, False), (70000.0, False), (2.0 ** -25, False)])
def test_constants_float16_holds(v, held):
    assert holds_in_half(v) is held
