"""Float64 sums of float16, small-integer and bool terms add runs of up to 8 terms in float32
first (akgpy/targets/sum_runs.py): which loops qualify, the shape of the rewrite, the exactness
of integer runs, the error bound of float16 ones, and the prefetch look-ahead over a run."""
from __future__ import annotations

import re

import numpy as np
import pytest
import tvm_ffi
from tvm import ir, tirx
from tvm.script import tirx as T

import akgpy
from akgpy import GraphBuilder
from akgpy.schedule.config import ScheduleConfig
from akgpy.targets import sum_runs
from akgpy.targets.cpu import tir_pipeline
from akgpy.testing import check_program, random_inputs


def _loads(node, name) -> int:
    found = []
    tvm_ffi.structural_walk(node, [(ir.TensorLoad, lambda ld: found.append(ld) if ld.source.name == name else None)])
    return len(found)


def _column_loop(rows: int, dtype: str = "float16", step: int = 64):
    """acc[0:8] += f64(f32(x[k, 0:8])) over `rows` rows of `step` elements, as TVM lowers it."""
    @T.prim_func
    def f(x: T.Buffer((rows * step,), dtype), acc: T.Buffer((8,), "float64")):
        for k in range(rows):
            acc[T.Ramp(0, 1, 8)] = acc[T.Ramp(0, 1, 8)] + T.Cast("float64x8", T.Cast("float32x8", x[T.Ramp(k * step, 1, 8)]))
    return f


def _top_loop(func):
    return func.body if isinstance(func.body, tirx.For) else None


def test_a_long_loop_becomes_an_outer_loop_over_runs_of_eight():
    out = sum_runs.sum_runs(_column_loop(64))
    loop = _top_loop(out)
    assert loop is not None and int(loop.extent.value) == 8 and loop.loop_var.name == "k_run"
    store = loop.body
    assert isinstance(store, tirx.BufferStore) and _loads(store.value, "x") == 8
    # one widening of the run's float32 total, added to the float64 accumulator
    assert str(store.value.ty) == "float64x8" and isinstance(store.value.b, tirx.Cast)
    assert str(store.value.b.value.ty) == "float32x8"


@pytest.mark.parametrize("rows,run", [(16, 8), (12, 6), (20, 5), (9, 3), (14, 7), (8, 8), (6, 6)])
def test_the_run_is_the_largest_divisor_up_to_eight(rows, run):
    loop = _top_loop(sum_runs.sum_runs(_column_loop(rows)))
    assert loop is not None and int(loop.extent.value) == rows // run
    assert isinstance(loop.body, tirx.BufferStore) and _loads(loop.body.value, "x") == run


def test_a_prime_extent_over_eight_stays_as_it_was():
    f = _column_loop(11)
    assert sum_runs.sum_runs(f).same_as(f)


@pytest.mark.parametrize("steps,runs", [(6, False), (8, False), (16, True)])
def test_a_short_walk_along_one_row_stays_and_a_long_one_runs(steps, runs):
    """Lane partials summing a short row vector after vector (resnet's 7 x 7 average pools ran
    slower in runs) stay as they were; a row of more than 8 vectors runs."""
    f = _column_loop(steps, step=8)
    assert sum_runs.sum_runs(f).same_as(f) != runs


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "bool"])
def test_integer_and_bool_terms_run_too(dtype):
    assert _loads(sum_runs.sum_runs(_column_loop(16, dtype)).body, "x") == 8


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32"])
def test_terms_that_could_overflow_or_round_do_not(dtype):
    """float32 and bfloat16 terms can overflow a float32 run (3e38 + 3e38), int32 ones round."""
    f = _column_loop(16, dtype)
    assert sum_runs.sum_runs(f).same_as(f)


@T.prim_func
def _elementwise(x: T.Buffer((1024,), "float16"), acc: T.Buffer((1024,), "float64")):
    for k in range(128):  # the update's index moves with the loop: no sum along it
        acc[T.Ramp(k * 8, 1, 8)] = acc[T.Ramp(k * 8, 1, 8)] + T.Cast("float64x8", T.Cast("float32x8", x[T.Ramp(k * 8, 1, 8)]))


@T.prim_func
def _parallel(x: T.Buffer((1024,), "float16"), acc: T.Buffer((8,), "float64")):
    for k in T.parallel(128):
        acc[T.Ramp(0, 1, 8)] = acc[T.Ramp(0, 1, 8)] + T.Cast("float64x8", T.Cast("float32x8", x[T.Ramp(k * 8, 1, 8)]))


@T.prim_func
def _product(x: T.Buffer((1024,), "float16"), acc: T.Buffer((8,), "float64")):
    for k in range(128):  # not a sum of widened loads: a product of them
        acc[T.Ramp(0, 1, 8)] = acc[T.Ramp(0, 1, 8)] * T.Cast("float64x8", T.Cast("float32x8", x[T.Ramp(k * 8, 1, 8)]))


@pytest.mark.parametrize("func", [_elementwise, _parallel, _product], ids=["index-moves", "parallel", "product"])
def test_other_loops_are_left_alone(func):
    assert sum_runs.sum_runs(func).same_as(func)


def _column_sum(rows: int, cols: int, dtype: str):
    b = GraphBuilder(f"column_sum_{dtype}")
    x = b.input("x", (rows, cols), dtype)
    b.output(b.reduce_sum(b.cast(x, "float32"), axis=0))
    return b.build()


def _float_adds(prog) -> int:
    ll = "\n".join(k._executable.mod.inspect_source("ll") for k in prog.kernels)
    return len(re.findall(r"fadd (?:reassoc |contract |fast )*<\d+ x float>", ll))


def test_a_float16_column_sum_adds_in_float32_and_matches():
    g = _column_sum(256, 512, "float16")
    prog = akgpy.fuse(g)
    assert _float_adds(prog) > 0
    assert not check_program(g, prog)


def test_a_float16_sum_widened_straight_to_float64_runs_too():
    """ReduceSum of a float16 input (no Cast op) widens each term straight to float64."""
    b = GraphBuilder("column_sum_direct")
    x = b.input("x", (256, 512), "float16")
    b.output(b.reduce_sum(x, axis=0))
    g = b.build()
    prog = akgpy.fuse(g)
    assert _float_adds(prog) > 0
    assert not check_program(g, prog)


def test_without_the_pass_no_float32_add_is_there(monkeypatch):
    """What the pass adds: the same kernel without it only widens each term and adds float64."""
    monkeypatch.setattr(tir_pipeline, "sum_runs", lambda f: f)
    g = _column_sum(256, 512, "float16")
    prog = akgpy.fuse(g)
    assert _float_adds(prog) == 0
    assert not check_program(g, prog)


@pytest.mark.parametrize("dtype", ["int8", "int16", "bool"])
def test_integer_runs_are_exact(dtype):
    """Each run of 8 is an integer under 2^24: float32 holds it, so the sum is float64
    accumulation's bit for bit, for the extremes of the dtype too."""
    g = _column_sum(512, 64, dtype)
    x = random_inputs(g, seed=3)[0]
    if dtype != "bool":
        info = np.iinfo(dtype)
        x[::3] = info.max
        x[1::3] = info.min
    got = akgpy.fuse(g)(x)[0]
    np.testing.assert_array_equal(got, x.astype(np.float64).sum(axis=0).astype(np.float32))


def test_a_float16_run_stays_within_its_bound():
    """65504 + 2^-24 rounds to 65504 in float32, so the run [65504, 2^-24, -65504, 0, ...]
    totals 0 where float64 keeps 2^-24: the run's error is that, within 3 * 2^-24 times the
    sum of its terms' magnitudes (and far inside the float16 tolerance of 1e-3)."""
    g = _column_sum(64, 16, "float16")
    x = np.zeros((64, 16), np.float16)
    x[0], x[1], x[2] = 65504, 2.0 ** -24, -65504
    got = akgpy.fuse(g, config=ScheduleConfig())(x)[0].astype(np.float64)
    exact = x.astype(np.float64).sum(axis=0)
    bound = 3 * 2.0 ** -24 * np.abs(x.astype(np.float64)).sum(axis=0)
    assert np.all(np.abs(got - exact) <= bound)
    assert np.all(got == 0) and np.all(exact == 2.0 ** -24)  # the run formed (rows 0-7 in one)
    assert np.allclose(got, exact, rtol=1e-3, atol=1e-3)


def test_nan_and_inf_propagate_through_a_run():
    g = _column_sum(64, 16, "float16")
    x = np.ones((64, 16), np.float16)
    x[3, 0], x[5, 1], x[6, 2], x[7, 2] = np.nan, np.inf, np.inf, -np.inf
    got = akgpy.fuse(g)(x)[0]
    assert np.isnan(got[0]) and got[1] == np.inf and np.isnan(got[2]) and np.all(got[3:] == 64)
