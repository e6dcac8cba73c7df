"""Pow by a constant integer exponent: products by repeated squaring (te/builders.py `power`),
checked against the reference for floats and integers; other float exponents keep calling pow."""
import re

import pytest

import akgpy
from akgpy import GraphBuilder
from akgpy.testing import check_program


def _graph(dtype: str, e):
    b = GraphBuilder("pow")
    x = b.input("x", [3, 37], dtype)
    b.output(b.add(b.pow(x, e), x))
    return b.build()


@pytest.mark.parametrize("dtype,e", [(d, e) for d in ("float32", "float16") for e in (0, 1, 2, 3, 4, 5, -1, -2, 2.5)]
                         + [(d, e) for d in ("int32", "int64") for e in (0, 1, 2, 3, 5, 7)])
def test_pow_matches_reference(dtype, e):
    g = _graph(dtype, e)
    assert check_program(g, akgpy.fuse(g)) == []


def _pow_calls(e) -> list[str]:
    b = GraphBuilder("pow")
    b.output(b.pow(b.input("x", [64, 64], "float32"), e))
    return re.findall(r"llvm\.pow\.|powf", akgpy.fuse(b.build()).source())


def test_integer_exponent_is_a_product_chain():
    assert _pow_calls(3) == []  # GELU-tanh's x**3: a vector loop, no pow call
    assert _pow_calls(2.5) != []  # a fractional exponent still calls pow
