"""Code generation of what the polyhedral path (and plain) meets in real graphs: comparisons
converted to numbers in vector lanes (issue 48, defect 7) and index arithmetic of tensors of
2**31 elements or more (defect 8)."""
from __future__ import annotations

import pytest

import akgpy
from akgpy import GraphBuilder
from akgpy.testing import check_program


def _compare_graph(reduce, dtype, to, in_dtype="float32"):
    b = GraphBuilder("cmp_cast")
    x, y = b.input("x", [64, 256], in_dtype), b.input("y", [64, 256], in_dtype)
    mask = (x > y).astype(to)
    if reduce == "max_rows":
        out = b.reduce_max(mask, 1)
    elif reduce == "max_cols":
        out = b.reduce_max(mask, 0)
    elif reduce == "max_all":
        out = b.reduce_max(mask, None)
    elif reduce == "sum_rows":
        out = b.reduce_sum(mask, 1)
    elif reduce == "maximum":
        out = b.op("Maximum", [mask, y.astype(to) if to != in_dtype else y], [64, 256], to)
    elif reduce == "minimum":
        out = b.op("Minimum", [mask, y.astype(to) if to != in_dtype else y], [64, 256], to)
    else:  # exp: fastmath binds its argument once
        out = b.op("Exp", [mask], [64, 256], to)
    b.output(out)
    return b.build()


@pytest.mark.parametrize("schedule", ["poly", "plain"])
@pytest.mark.parametrize("reduce,to", [("max_rows", "float32"), ("max_cols", "float32"), ("max_all", "float32"),
                                       ("max_rows", "float64"), ("max_rows", "float16"), ("sum_rows", "float32"),
                                       ("maximum", "float32"), ("minimum", "float32"), ("exp", "float32")])
def test_comparison_cast_in_vector_lanes(reduce, to, schedule):
    """A Greater cast to a float and reduced by max (or fed to Maximum, Minimum, Exp): the
    comparison ends up in a vector let value, which TVM's code generator could not bind
    ("IntImm can only take scalar, but boolx16")."""
    g = _compare_graph(reduce, "float32", to)
    prog = akgpy.fuse(g, schedule=schedule)
    assert not check_program(g, prog, seed=0)


@pytest.mark.parametrize("in_dtype", ["float16", "int32"])
def test_comparison_cast_of_other_inputs(in_dtype):
    g = _compare_graph("max_rows", "float32", "float32", in_dtype=in_dtype)
    assert not check_program(g, akgpy.fuse(g), seed=0)
