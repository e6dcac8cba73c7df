"""Float64 sums of a local buffer's lanes add them as vectors, then halve the vector
(akgpy/targets/lane_sums.py): which loops qualify, the shape of the rewrite, and its results."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import ir, tirx
from tvm.script import tirx as T

from akgpy.dtypes import vector_parts
from akgpy.targets import lane_sums


def _partials(n: int, dtype: str = "float64", step: int = 1):
    """out[0] = the sum of a local buffer's n lanes (each twice x's), one lane a step."""
    @T.prim_func
    def f(x: T.Buffer((n * step,), dtype), out: T.Buffer((1,), dtype)):
        part = T.alloc_buffer((n * step,), dtype)
        for c in range(n * step):
            part[c] = x[c] * T.Cast(dtype, 2.0)
        out[0] = T.Cast(dtype, 0.0)
        for c in range(n):
            out[0] = out[0] + part[c * step]
    return f


def _argument_sum(n: int):
    @T.prim_func
    def f(x: T.Buffer((n,), "float64"), out: T.Buffer((1,), "float64")):
        out[0] = T.float64(0.0)
        for c in range(n):
            out[0] = out[0] + x[c]
    return f


def _loops(func) -> list[int]:
    found = []
    tvm_ffi.structural_walk(func.body, [(tirx.For, lambda f: found.append(int(f.extent.value)))])
    return found


def _vector_loads(func) -> list[int]:
    found = []
    tvm_ffi.structural_walk(func.body, [(ir.TensorLoad, lambda ld: found.append(vector_parts(ld.ty)[1])
                                         if ld.source.name == "part" else None)])
    return found


@pytest.mark.parametrize("n,lanes", [(80, 8), (16, 8), (8, 4), (12, 4), (6, 2), (48, 8)])
def test_the_lane_loop_becomes_vector_loads_added_pairwise(n, lanes):
    out = lane_sums.lane_sums(_partials(n))
    assert _loops(out) == [n], "only the loop filling the partials is left"
    assert _vector_loads(out) == [lanes] * (n // lanes)


@pytest.mark.parametrize("func", [
    _partials(7), _partials(13), _partials(3),  # no two vectors of 2, 4 or 8 lanes
    _partials(16, "float32"),  # a float32 total: the order would change its rounding
    _partials(16, step=2),  # not consecutive lanes
    _argument_sum(16),  # an argument's values, not a kernel's own partials
], ids=["7", "13", "3", "float32", "strided", "argument"])
def test_other_sums_stay_as_they_were(func):
    assert lane_sums.lane_sums(func).same_as(func)


def test_an_accumulator_indexed_by_the_loop_is_no_sum():
    @T.prim_func
    def f(x: T.Buffer((16,), "float64"), out: T.Buffer((16,), "float64")):
        part = T.alloc_buffer((16,), "float64")
        for c in range(16):
            part[c] = x[c]
        for c in range(16):
            out[c] = out[c] + part[c]
    assert lane_sums.lane_sums(f).same_as(f)


@pytest.mark.parametrize("n", [80, 8, 6, 48])
def test_the_vector_sum_matches_numpy(n):
    lib = tvm.compile(lane_sums.lane_sums(_partials(n)), target="llvm")
    x = np.random.default_rng(n).standard_normal(n)
    out = tvm.runtime.tensor(np.zeros(1))
    lib(tvm.runtime.tensor(x), out)
    np.testing.assert_allclose(out.numpy()[0], 2 * x.sum(), rtol=1e-14)


def test_infinities_and_nan_propagate():
    lib = tvm.compile(lane_sums.lane_sums(_partials(16)), target="llvm")
    for vals, want in (([np.inf], np.inf), ([np.inf, -np.inf], np.nan), ([np.nan], np.nan)):
        x = np.ones(16)
        x[:len(vals)] = vals
        out = tvm.runtime.tensor(np.zeros(1))
        lib(tvm.runtime.tensor(x), out)
        np.testing.assert_equal(out.numpy()[0], want)
