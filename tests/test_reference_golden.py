"""Golden values for the numpy reference (`akgpy.reference`), one or more per op of the op table.

Every expected array below is written out literally, computed by hand from the semantics in
the composite format's definitions (docs/semantics.md; never by calling numpy on the same formula): the reference is
the oracle every kernel is checked against, so it is checked against arithmetic done on paper.

Conventions: graphs are built with `akgpy.GraphBuilder` or as composite-JSON dicts fed to
`akgpy.load_composite`; `akgpy.reference.run(graph, inputs)` returns the real outputs in order.
float32 transcendental results are compared with rtol 1e-7 (one float32 rounding of the true
value); everything else (ints, bools, exact float16/float32 values) must match exactly.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import akgpy
from akgpy import GraphBuilder
from akgpy.ops.registry import OPS
from akgpy.reference import run

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "corpus"

# -- coverage bookkeeping ------------------------------------------------------------------------

COVERED: set[str] = set()


def covers(*ops: str):
    """Mark a test as a golden case for these op names (checked against OPS below)."""
    COVERED.update(ops)
    return lambda fn: fn


# -- helpers -------------------------------------------------------------------------------------

def golden(got, expected, dtype: str, *, rtol: float = 0.0) -> None:
    got = np.asarray(got)
    exp = np.asarray(expected)
    assert got.dtype == np.dtype(dtype), f"dtype {got.dtype}, expected {dtype}"
    assert got.shape == exp.shape, f"shape {got.shape}, expected {exp.shape}"
    if rtol:
        np.testing.assert_allclose(got.astype(np.float64), exp.astype(np.float64), rtol=rtol, atol=0)
    else:
        np.testing.assert_array_equal(got, exp.astype(got.dtype) if got.dtype != exp.dtype else exp)
        if got.dtype.kind == "f":  # literal values must be exactly representable: check both ways
            np.testing.assert_array_equal(got.astype(np.float64), np.asarray(expected, dtype=np.float64))


def f32(*rows):
    return np.array(rows if len(rows) != 1 else rows[0], dtype=np.float32)


def arr(values, dtype):
    return np.array(values, dtype=dtype)


def T(name, shape, dtype="float32", value=None, fmt="DefaultFormat") -> dict:
    d = {"data_type": dtype, "format": fmt, "shape": list(shape), "tensor_name": name}
    if value is not None:
        d["value"] = value
    return d


def OP(name, ins, out, **attrs) -> dict:
    return {"name": name, "attr": [{"name": k, "value": v} for k, v in attrs.items()] or None,
            "impl_path": "", "input_desc": [[t] for t in ins], "output_desc": [out]}


def composite(inputs, ops, outputs, name="golden") -> akgpy.Graph:
    doc = {"composite": True, "op": name, "process": "cuda", "platform": "AKG",
           "input_desc": [[t] for t in inputs] or None, "op_desc": ops, "output_desc": outputs}
    return akgpy.load_composite(doc)


def unary(op: str, x: np.ndarray, dtype: str):
    b = GraphBuilder(f"g_{op}")
    v = b.input("x", x.shape, dtype)
    b.output(b.op(op, [v], x.shape, dtype))
    (out,) = run(b.build(), [x])
    return out


def binary(op: str, x: np.ndarray, y: np.ndarray, dtype: str, out_shape, out_dtype=None):
    b = GraphBuilder(f"g_{op}")
    vx, vy = b.input("x", x.shape, dtype), b.input("y", y.shape, dtype)
    b.output(b.op(op, [vx, vy], out_shape, out_dtype or dtype))
    (out,) = run(b.build(), [x, y])
    return out


# -- unary elementwise ---------------------------------------------------------------------------

@covers("Neg")
def test_neg():
    golden(unary("Neg", f32([1.5, -2.0, 0.0, 3.25]), "float32"), [-1.5, 2.0, -0.0, -3.25], "float32")
    golden(unary("Neg", arr([5, -7, 0], np.int32), "int32"), [-5, 7, 0], "int32")


@covers("Abs")
def test_abs():
    golden(unary("Abs", f32([-3.0, 2.5, -0.25, 0.0]), "float32"), [3.0, 2.5, 0.25, 0.0], "float32")
    golden(unary("Abs", arr([-4, 9], np.int32), "int32"), [4, 9], "int32")


@covers("Exp")
def test_exp():
    golden(unary("Exp", f32([0.0, 1.0, -1.0, 2.0]), "float32"),
           [1.0, 2.718281828459045, 0.36787944117144233, 7.38905609893065], "float32", rtol=1e-7)
    # float16: e = 2.71828... rounds to the float16 grid (step 2**-9 in [2, 4)): 1392 * 2**-9
    golden(unary("Exp", arr([1.0, 0.0], np.float16), "float16"), [2.71875, 1.0], "float16")


@covers("Log")
def test_log():
    golden(unary("Log", f32([1.0, 100.0, 0.5]), "float32"), [0.0, 4.605170185988092, -0.6931471805599453],
           "float32", rtol=1e-7)


@covers("Sqrt")
def test_sqrt():
    golden(unary("Sqrt", f32([4.0, 2.0, 0.25, 0.0]), "float32"), [2.0, 1.4142135623730951, 0.5, 0.0],
           "float32", rtol=1e-7)
    # float16: sqrt(2) = 1.41421... -> 1448 * 2**-10
    golden(unary("Sqrt", arr([2.0, 9.0], np.float16), "float16"), [1.4140625, 3.0], "float16")


@covers("Rsqrt")
def test_rsqrt_is_one_over_sqrt():
    golden(unary("Rsqrt", f32([4.0, 0.25, 2.0, 16.0, 3.0]), "float32"),
           [0.5, 2.0, 0.7071067811865476, 0.25, 0.5773502691896258], "float32", rtol=1e-7)


@covers("Reciprocal")
def test_reciprocal():
    golden(unary("Reciprocal", f32([4.0, -0.5, 3.0]), "float32"), [0.25, -2.0, 0.3333333333333333], "float32",
           rtol=1e-7)
    # float16: 1/3 = 0.0101010101|01..b -> 1.0101010101b * 2**-2 = 1365/4096
    golden(unary("Reciprocal", arr([3.0, 8.0], np.float16), "float16"), [0.333251953125, 0.125], "float16")


@covers("Tanh")
def test_tanh():
    golden(unary("Tanh", f32([0.0, 1.0, -2.0, 0.5]), "float32"),
           [0.0, 0.7615941559557649, -0.9640275800758169, 0.46211715726000974], "float32", rtol=1e-7)


# -- binary elementwise --------------------------------------------------------------------------

@covers("Add")
def test_add_broadcasts_numpy_style():
    x = f32([[1.0, 2.0, 3.0]])  # [1, 3]
    y = f32([[10.0], [20.0]])  # [2, 1]
    golden(binary("Add", x, y, "float32", (2, 3)), [[11.0, 12.0, 13.0], [21.0, 22.0, 23.0]], "float32")


@covers("Add")
def test_add_ranks_differ():
    x = f32([[1.0, 2.0], [3.0, 4.0]])
    y = f32([100.0, 200.0])
    golden(binary("Add", x, y, "float32", (2, 2)), [[101.0, 202.0], [103.0, 204.0]], "float32")


@covers("Add")
def test_fp16_rounds_after_every_op():
    """1 + 2**-11 is halfway between 1 and the next float16 (1 + 2**-10): ties-to-even gives 1.
    Done twice, each result rounded to float16 stays 1; without the per-op rounding the exact
    sum 1 + 2**-10 would be representable. Same at 2048, where the float16 step is 2."""
    b = GraphBuilder("fp16_chain")
    x = b.input("x", (2,), "float16")
    y = b.add(x, 2.0 ** -11)
    z = b.add(y, 2.0 ** -11)
    b.output(y, z)
    y_out, z_out = run(b.build(), [arr([1.0, 1.0], np.float16)])
    golden(y_out, [1.0, 1.0], "float16")
    golden(z_out, [1.0, 1.0], "float16")

    b = GraphBuilder("fp16_chain_2048")
    x = b.input("x", (1,), "float16")
    b.output(b.add(b.add(x, 1.0), 1.0))
    (out,) = run(b.build(), [arr([2048.0], np.float16)])
    golden(out, [2048.0], "float16")


@covers("Mul")
def test_fp16_mul_rounds():
    # 1.5 * 1.5 = 2.25 exact; (1 + 2**-10) * (1 + 2**-10) = 1 + 2**-9 + 2**-20 -> 1 + 2**-9 in float16
    x = arr([1.5, 1.0009765625], np.float16)
    golden(binary("Mul", x, x, "float16", (2,)), [2.25, 1.001953125], "float16")


@covers("TensorAdd")
def test_tensor_add_is_add():
    golden(binary("TensorAdd", arr([1, 2], np.int32), arr([3, -4], np.int32), "int32", (2,)), [4, -2], "int32")
    golden(binary("TensorAdd", f32([0.5, 1.5]), f32([0.25, -1.5]), "float32", (2,)), [0.75, 0.0], "float32")


@covers("Sub")
def test_sub():
    golden(binary("Sub", f32([5.0, 1.5, 0.0]), f32([2.0, 3.0, 0.125]), "float32", (3,)), [3.0, -1.5, -0.125],
           "float32")


@covers("Mul")
def test_mul():
    golden(binary("Mul", f32([1.5, -2.0, 0.25]), f32([2.0, 3.0, 4.0]), "float32", (3,)), [3.0, -6.0, 1.0],
           "float32")
    golden(binary("Mul", arr([3, -4], np.int32), arr([-5, -6], np.int32), "int32", (2,)), [-15, 24], "int32")


@covers("RealDiv")
def test_realdiv_float():
    golden(binary("RealDiv", f32([1.0, 7.0, -3.0]), f32([4.0, 2.0, 8.0]), "float32", (3,)), [0.25, 3.5, -0.375],
           "float32")


@covers("RealDiv")
def test_realdiv_int32_truncates_toward_zero():
    x = arr([7, -7, 7, -7, 6, 1, -1, 9], np.int32)
    y = arr([2, 2, -2, -2, 3, 5, 5, -4], np.int32)
    golden(binary("RealDiv", x, y, "int32", (8,)), [3, -3, -3, 3, 2, 0, 0, -2], "int32")


@covers("Div")
def test_div_is_realdiv():
    golden(binary("Div", f32([1.0, 7.0, -3.0]), f32([4.0, 2.0, 8.0]), "float32", (3,)), [0.25, 3.5, -0.375],
           "float32")
    golden(binary("Div", arr([7, -7], np.int32), arr([2, 2], np.int32), "int32", (2,)), [3, -3], "int32")


@covers("Maximum", "Minimum")
def test_maximum_minimum():
    x = f32([1.0, 5.0, -3.0, 0.5])
    y = f32([2.0, 4.0, -3.0, -0.5])
    golden(binary("Maximum", x, y, "float32", (4,)), [2.0, 5.0, -3.0, 0.5], "float32")
    golden(binary("Minimum", x, y, "float32", (4,)), [1.0, 4.0, -3.0, -0.5], "float32")


@covers("Maximum")
def test_maximum_with_constant_is_relu():
    b = GraphBuilder("relu")
    x = b.input("x", (2, 2), "float32")
    b.output(b.relu(x))
    (out,) = run(b.build(), [f32([[-1.0, 2.0], [3.0, -4.0]])])
    golden(out, [[0.0, 2.0], [3.0, 0.0]], "float32")


@covers("Minimum")
def test_minimum_int32_broadcast():
    x = arr([[1, 9], [5, -2]], np.int32)
    y = arr([4], np.int32)
    golden(binary("Minimum", x, y, "int32", (2, 2)), [[1, 4], [4, -2]], "int32")


@covers("Pow")
def test_pow():
    golden(binary("Pow", f32([2.0, 3.0, 4.0, 9.0, 5.0]), f32([3.0, 2.0, 0.5, 1.5, 0.0]), "float32", (5,)),
           [8.0, 9.0, 2.0, 27.0, 1.0], "float32", rtol=1e-7)


@covers("Pow")
def test_pow_constant_exponent():
    b = GraphBuilder("pow15")
    x = b.input("x", (3,), "float32")
    b.output(b.pow(x, 1.5))
    (out,) = run(b.build(), [f32([4.0, 9.0, 1.0])])
    golden(out, [8.0, 27.0, 1.0], "float32", rtol=1e-7)


# -- comparisons and Select ----------------------------------------------------------------------

CMP = {  # x = [1, 2, 3] against the constant 2
    "Greater": [False, False, True],
    "GreaterEqual": [False, True, True],
    "Less": [True, False, False],
    "LessEqual": [True, True, False],
    "Equal": [False, True, False],
}


@covers(*CMP)
@pytest.mark.parametrize("op", list(CMP))
def test_compare_with_constant_gives_bool(op):
    g = composite([T("x", [3])],
                  [OP(op, [T("x", [3]), T("c", [1], value=2.0)], T("out", [3], "bool"))],
                  [T("out", [3], "bool")])
    (out,) = run(g, [f32([1.0, 2.0, 3.0])])
    golden(out, CMP[op], "bool")


@covers(*CMP)
@pytest.mark.parametrize("op", list(CMP))
def test_compare_declared_float32_gives_one_and_zero(op):
    x, y = f32([1.0, 2.0, 3.0]), f32([2.0, 2.0, 2.0])
    expected = [1.0 if v else 0.0 for v in CMP[op]]
    golden(binary(op, x, y, "float32", (3,), "float32"), expected, "float32")


@covers("Greater", "Less")
def test_compare_int32_broadcast():
    x = arr([[1, 5], [3, 3]], np.int32)
    y = arr([3], np.int32)
    golden(binary("Greater", x, y, "int32", (2, 2), "bool"), [[False, True], [False, False]], "bool")
    golden(binary("Less", x, y, "int32", (2, 2), "bool"), [[True, False], [False, False]], "bool")


@covers("Select")
def test_select_bool_condition():
    b = GraphBuilder("select")
    c = b.input("c", (4,), "bool")
    x, y = b.input("x", (4,), "float32"), b.input("y", (4,), "float32")
    b.output(b.select(c, x, y))
    (out,) = run(b.build(), [arr([True, False, True, False], np.bool_), f32([1.0, 2.0, 3.0, 4.0]),
                             f32([10.0, 20.0, 30.0, 40.0])])
    golden(out, [1.0, 20.0, 3.0, 40.0], "float32")


@covers("Select")
def test_select_float_condition_selects_where_nonzero():
    b = GraphBuilder("select_f")
    c = b.input("c", (4,), "float32")
    x, y = b.input("x", (4,), "float32"), b.input("y", (4,), "float32")
    b.output(b.op("Select", [c, x, y], (4,), "float32"))
    (out,) = run(b.build(), [f32([0.0, 2.0, -1.0, -0.0]), f32([1.0, 2.0, 3.0, 4.0]),
                             f32([10.0, 20.0, 30.0, 40.0])])
    golden(out, [10.0, 2.0, 3.0, 40.0], "float32")


@covers("Select")
def test_select_constant_branch_is_filled_in():
    g = composite([T("c", [2, 2], "bool"), T("x", [2, 2], "int32")],
                  [OP("Select", [T("c", [2, 2], "bool"), T("x", [2, 2], "int32"), T("zero", [1], "int32", value=0)],
                      T("out", [2, 2], "int32"))],
                  [T("out", [2, 2], "int32")])
    (out,) = run(g, [arr([[True, False], [False, True]], np.bool_), arr([[5, 6], [7, 8]], np.int32)])
    golden(out, [[5, 0], [0, 8]], "int32")


# -- Cast ----------------------------------------------------------------------------------------

def cast(x: np.ndarray, src: str, dst: str):
    b = GraphBuilder("cast")
    v = b.input("x", x.shape, src)
    b.output(b.cast(v, dst))
    (out,) = run(b.build(), [x])
    return out


@covers("Cast")
def test_cast_float_to_int_truncates_toward_zero():
    golden(cast(f32([1.7, -1.7, 2.5, -0.5, 3.0, -2.999]), "float32", "int32"), [1, -1, 2, 0, 3, -2], "int32")
    # float16 7.9 is 7.8984375
    golden(cast(arr([-2.5, 7.9, 0.75], np.float16), "float16", "int32"), [-2, 7, 0], "int32")


@covers("Cast")
def test_cast_float_to_bool_is_nonzero():
    golden(cast(f32([0.0, -0.0, 0.5, -3.0, 1.0]), "float32", "bool"), [False, False, True, True, True], "bool")
    golden(cast(arr([0.0, 2.0], np.float16), "float16", "bool"), [False, True], "bool")


@covers("Cast")
def test_cast_other_directions():
    golden(cast(arr([True, False, True], np.bool_), "bool", "int32"), [1, 0, 1], "int32")
    golden(cast(arr([True, False], np.bool_), "bool", "float32"), [1.0, 0.0], "float32")
    golden(cast(arr([3, -2, 0], np.int32), "int32", "float32"), [3.0, -2.0, 0.0], "float32")
    # float32 -> float16 rounds to nearest: 0.1 -> 1638 * 2**-14; 1/3 -> 1365 * 2**-12
    golden(cast(f32([0.1, 0.3333333333, 1.5]), "float32", "float16"), [0.0999755859375, 0.333251953125, 1.5],
           "float16")
    golden(cast(arr([0.0999755859375, -65504.0], np.float16), "float16", "float32"), [0.0999755859375, -65504.0],
           "float32")


# -- AddN ----------------------------------------------------------------------------------------

@covers("AddN")
def test_addn():
    b = GraphBuilder("addn")
    xs = [b.input(f"x{i}", (2,), "float32") for i in range(3)]
    b.output(b.addn(*xs))
    (out,) = run(b.build(), [f32([1.0, 2.0]), f32([3.0, 4.0]), f32([5.0, 6.5])])
    golden(out, [9.0, 12.5], "float32")


@covers("AddN")
def test_addn_composite_single_inner_list():
    names = ["input_0", "input_1", "input_2"]
    ins = [T(n, [2], "int32") for n in names]
    doc = {"composite": True, "op": "addn", "process": "cuda",
           "input_desc": [[t] for t in ins],
           "op_desc": [{"name": "AddN", "attr": [{"name": "n", "value": 3}, {"name": "dyn_input_sizes", "value": [3]}],
                        "input_desc": [ins], "output_desc": [T("out", [2], "int32")]}],
           "output_desc": [T("out", [2], "int32")]}
    (out,) = run(akgpy.load_composite(doc), [arr([1, 2], np.int32), arr([10, 20], np.int32), arr([100, -200], np.int32)])
    golden(out, [111, -178], "int32")


@covers("AddN")
def test_addn_float16_is_a_left_fold_in_float16():
    """composite-format.md: AddN is `t1+...+tN`, a left fold (topi::elemwise_sum; Gen `' + '.join`
    over float16 arrays), so every partial sum is a float16: 2048 + 1 = 2049 rounds (ties to even,
    the float16 step at 2048 is 2) to 2048, and so on: the result stays 2048. Summing exactly and
    rounding once would give 2052, which is outside the float16 tolerance of 1e-3 + 1e-3*2048."""
    b = GraphBuilder("addn16")
    xs = [b.input(f"x{i}", (1,), "float16") for i in range(5)]
    b.output(b.addn(*xs))
    (out,) = run(b.build(), [arr([2048.0], np.float16)] + [arr([1.0], np.float16)] * 4)
    golden(out, [2048.0], "float16")


# -- layout ops ----------------------------------------------------------------------------------

@covers("BroadcastTo")
def test_broadcast_to_of_a_constant():
    g = composite([], [OP("BroadcastTo", [T("input_0", [1], value=16.0)], T("out", [2, 1]), shape=[2, 1])],
                  [T("out", [2, 1])])
    (out,) = run(g, [])
    golden(out, [[16.0], [16.0]], "float32")

    g = composite([], [OP("BroadcastTo", [T("input_0", [1], "int32", value=3)], T("out", [2, 3], "int32"),
                          shape=[2, 3])], [T("out", [2, 3], "int32")])
    (out,) = run(g, [])
    golden(out, [[3, 3, 3], [3, 3, 3]], "int32")


@covers("BroadcastTo")
def test_broadcast_to_of_a_tensor():
    b = GraphBuilder("bcast")
    x = b.input("x", (3,), "float32")
    b.output(b.broadcast_to(x, (2, 3)))
    (out,) = run(b.build(), [f32([1.0, 2.0, 3.0])])
    golden(out, [[1.0, 2.0, 3.0], [1.0, 2.0, 3.0]], "float32")


@covers("Reshape")
def test_reshape_uses_output_desc_shape():
    x = f32([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
    for attrs in ({"shape": [-1, 2]}, {}, {"shape": [6, 1]}):  # -1, missing, and a stale attr
        g = composite([T("x", [2, 3])], [OP("Reshape", [T("x", [2, 3])], T("out", [3, 2]), **attrs)],
                      [T("out", [3, 2])])
        (out,) = run(g, [x])
        golden(out, [[0.0, 1.0], [2.0, 3.0], [4.0, 5.0]], "float32")


@covers("Transpose")
def test_transpose_perm():
    b = GraphBuilder("t2")
    x = b.input("x", (2, 3), "int32")
    b.output(b.transpose(x, (1, 0)))
    (out,) = run(b.build(), [arr([[1, 2, 3], [4, 5, 6]], np.int32)])
    golden(out, [[1, 4], [2, 5], [3, 6]], "int32")

    # out.shape[i] = in.shape[perm[i]]: [2,1,3] with perm [2,0,1] -> [3,2,1]; out[c,a,0] = x[a,0,c]
    g = composite([T("x", [2, 1, 3])], [OP("Transpose", [T("x", [2, 1, 3])], T("out", [3, 2, 1]), perm=[2, 0, 1])],
                  [T("out", [3, 2, 1])])
    (out,) = run(g, [f32([[[1.0, 2.0, 3.0]], [[4.0, 5.0, 6.0]]])])
    golden(out, [[[1.0], [4.0]], [[2.0], [5.0]], [[3.0], [6.0]]], "float32")


@covers("PadAkg")
def test_pad():
    g = composite([T("x", [2, 2])],
                  [OP("PadAkg", [T("x", [2, 2])], T("out", [3, 4]), head=[1, 0], tail=[0, 2], pad_val=0)],
                  [T("out", [3, 4])])
    (out,) = run(g, [f32([[1.0, 2.0], [3.0, 4.0]])])
    golden(out, [[0.0, 0.0, 0.0, 0.0], [1.0, 2.0, 0.0, 0.0], [3.0, 4.0, 0.0, 0.0]], "float32")


@covers("PadAkg")
def test_pad_value_and_float16():
    g = composite([T("x", [1, 2], "float16")],
                  [OP("PadAkg", [T("x", [1, 2], "float16")], T("out", [2, 3], "float16"), head=[0, 1], tail=[1, 0],
                      pad_val=7)],
                  [T("out", [2, 3], "float16")])
    (out,) = run(g, [arr([[1.5, -2.0]], np.float16)])
    golden(out, [[7.0, 1.5, -2.0], [7.0, 7.0, 7.0]], "float16")


@covers("UnPadAkg")
def test_unpad():
    g = composite([T("x", [2, 3])], [OP("UnPadAkg", [T("x", [2, 3])], T("out", [2, 2]), tail=[0, 1])],
                  [T("out", [2, 2])])
    (out,) = run(g, [f32([[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])])
    golden(out, [[0.0, 1.0], [3.0, 4.0]], "float32")

    # rank 3, only the last two dims trimmed: x[b, m, n] = 6b + 3m + n, tail [0, 1, 2] -> [2, 1, 1]
    g = composite([T("x", [2, 2, 3], "int32")],
                  [OP("UnPadAkg", [T("x", [2, 2, 3], "int32")], T("out", [2, 1, 1], "int32"), tail=[0, 1, 2])],
                  [T("out", [2, 1, 1], "int32")])
    x = arr([[[0, 1, 2], [3, 4, 5]], [[6, 7, 8], [9, 10, 11]]], np.int32)
    (out,) = run(g, [x])
    golden(out, [[[0]], [[6]]], "int32")


@covers("PadAkg", "UnPadAkg")
def test_pad_then_unpad_round_trip():
    g = composite([T("x", [2, 2])],
                  [OP("PadAkg", [T("x", [2, 2])], T("p", [2, 16]), head=[0, 0], tail=[0, 14], pad_val=0),
                   OP("UnPadAkg", [T("p", [2, 16])], T("out", [2, 2]), tail=[0, 14])],
                  [T("p", [2, 16]), T("out", [2, 2])])
    p, out = run(g, [f32([[1.0, 2.0], [3.0, 4.0]])])
    golden(p, [[1.0, 2.0] + [0.0] * 14, [3.0, 4.0] + [0.0] * 14], "float32")
    golden(out, [[1.0, 2.0], [3.0, 4.0]], "float32")


# -- reductions ----------------------------------------------------------------------------------

X23 = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]


def reduce(op, x, out_shape, **attrs):
    g = composite([T("x", list(x.shape), str(x.dtype))],
                  [OP(op, [T("x", list(x.shape), str(x.dtype))], T("out", out_shape, str(x.dtype)), **attrs)],
                  [T("out", out_shape, str(x.dtype))])
    (out,) = run(g, [x])
    return out


@covers("ReduceSum")
def test_reduce_sum_negative_axis_keep_dims():
    golden(reduce("ReduceSum", f32(X23), [2, 1], axis=[-1], keep_dims=True), [[6.0], [15.0]], "float32")
    golden(reduce("ReduceSum", f32(X23), [1, 3], axis=-2, keep_dims=True), [[5.0, 7.0, 9.0]], "float32")


@covers("ReduceSum")
def test_reduce_sum_empty_axis_is_all_axes():
    golden(reduce("ReduceSum", f32(X23), [1], axis=[], keep_dims=False), [21.0], "float32")
    golden(reduce("ReduceSum", f32(X23), [1, 1], axis=[], keep_dims=True), [[21.0]], "float32")


@covers("ReduceSum")
def test_reduce_sum_axis_forms():
    # int 0 reduces axis 0 only (not Gen's "0 means no axis" bug); duplicates/negatives normalise
    golden(reduce("ReduceSum", f32(X23), [3], axis=0, keep_dims=False), [5.0, 7.0, 9.0], "float32")
    golden(reduce("ReduceSum", f32(X23), [3], axis=[0, -2], keep_dims=False), [5.0, 7.0, 9.0], "float32")
    golden(reduce("ReduceSum", f32(X23), [1], axis=[1, 0, -1], keep_dims=False), [21.0], "float32")
    golden(reduce("ReduceSum", arr([[1, 2], [3, 4]], np.int32), [2], axis=[1], keep_dims=False), [3, 7], "int32")


@covers("ReduceSum")
def test_reduce_sum_float16_accumulates_wide():
    # 2048 + 1 + 1 + 1 + 1 = 2052 (representable in float16: step 2 at 2048); a float16 running
    # sum would be stuck at 2048. composite-format.md: reduce fp16 in fp32 and cast back.
    x = arr([[2048.0, 1.0, 1.0, 1.0, 1.0]], np.float16)
    golden(reduce("ReduceSum", x, [1], axis=[1], keep_dims=False), [2052.0], "float16")


@covers("ReduceMax")
def test_reduce_max():
    x = f32([[1.0, 5.0, 3.0], [4.0, 2.0, -6.0]])
    golden(reduce("ReduceMax", x, [3], axis=[0], keep_dims=False), [4.0, 5.0, 3.0], "float32")
    golden(reduce("ReduceMax", x, [2, 1], axis=[-1], keep_dims=True), [[5.0], [4.0]], "float32")
    golden(reduce("ReduceMax", x, [1], axis=[], keep_dims=False), [5.0], "float32")


# -- OneHot --------------------------------------------------------------------------------------

def one_hot(idx, depth, axis, on, off, out_shape):
    g = composite([T("i", list(idx.shape), "int32")],
                  [OP("OneHot", [T("i", list(idx.shape), "int32"), T("on", [1], value=on), T("off", [1], value=off)],
                      T("out", out_shape), depth=depth, axis=axis)],
                  [T("out", out_shape)])
    (out,) = run(g, [idx])
    return out


@covers("OneHot")
def test_one_hot_last_axis_out_of_range_is_all_off():
    out = one_hot(arr([0, 2, 3, -1], np.int32), 3, -1, 1.0, 0.0, [4, 3])
    golden(out, [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]], "float32")


@covers("OneHot")
def test_one_hot_axis_0_on_off_values():
    out = one_hot(arr([0, 2, 3, -1], np.int32), 3, 0, 5.0, -1.0, [3, 4])
    golden(out, [[5.0, -1.0, -1.0, -1.0], [-1.0, -1.0, -1.0, -1.0], [-1.0, 5.0, -1.0, -1.0]], "float32")


@covers("OneHot")
def test_one_hot_2d_indices_middle_axis():
    # indices [2, 2], depth 2, axis 1 -> out[a, j, b] = on if idx[a, b] == j
    out = one_hot(arr([[0, 1], [1, 5]], np.int32), 2, 1, 1.0, 0.0, [2, 2, 2])
    golden(out, [[[1.0, 0.0], [0.0, 1.0]], [[0.0, 0.0], [1.0, 0.0]]], "float32")


# -- MatMul --------------------------------------------------------------------------------------

A = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]  # [2, 3]
B = [[7.0, 8.0], [9.0, 10.0], [11.0, 12.0]]  # [3, 2]
AB = [[58.0, 64.0], [139.0, 154.0]]  # 1*7+2*9+3*11, 1*8+2*10+3*12; 4*7+5*9+6*11, 4*8+5*10+6*12
AT = [[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]]
BT = [[7.0, 9.0, 11.0], [8.0, 10.0, 12.0]]


def matmul(a, b, *, ta=False, tb=False, dst="float32", bias=None, out_shape=(2, 2)):
    bld = GraphBuilder("mm")
    va, vb = bld.input("a", a.shape, str(a.dtype)), bld.input("b", b.shape, str(b.dtype))
    ins, args = [va, vb], [a, b]
    if bias is not None:
        ins.append(bld.input("bias", bias.shape, str(bias.dtype)))
        args.append(bias)
    bld.output(bld.op("MatMul", ins, out_shape, dst, transpose_a=ta, transpose_b=tb, dst_type=dst))
    (out,) = run(bld.build(), args)
    return out


@covers("MatMul")
def test_matmul_plain_and_transposed():
    h = np.float16
    golden(matmul(arr(A, h), arr(B, h)), AB, "float32")
    golden(matmul(arr(AT, h), arr(B, h), ta=True), AB, "float32")
    golden(matmul(arr(A, h), arr(BT, h), tb=True), AB, "float32")
    golden(matmul(arr(AT, h), arr(BT, h), ta=True, tb=True), AB, "float32")


@covers("MatMul")
def test_matmul_with_bias():
    h = np.float16
    golden(matmul(arr(A, h), arr(B, h), bias=f32([1.0, -1.0])), [[59.0, 63.0], [140.0, 153.0]], "float32")


@covers("MatMul")
def test_matmul_batch():
    # A[0] = [[1, 2]], B[0] = [[3], [4]] -> 11; A[1] = [[5, 6]], B[1] = [[7], [8]] -> 83
    a = f32([[[1.0, 2.0]], [[5.0, 6.0]]])
    b = f32([[[3.0], [4.0]], [[7.0], [8.0]]])
    golden(matmul(a, b, out_shape=(2, 1, 1)), [[[11.0]], [[83.0]]], "float32")


@covers("MatMul")
def test_matmul_float16_output_rounds():
    # 2048 + 1 = 2049 -> float16 2048 (ties to even); 2048 + 2 = 2050 exact
    a = arr([[2048.0, 1.0], [2048.0, 2.0]], np.float16)
    b = arr([[1.0], [1.0]], np.float16)
    golden(matmul(a, b, dst="float16", out_shape=(2, 1)), [[2048.0], [2050.0]], "float16")


def _nz(logical_blocks: dict, n1: int, m1: int, dtype) -> np.ndarray:
    """A FRACTAL_NZ array [n1, m1, 16, 16] from its nonzero 16x16 blocks, keyed by the logical
    block (row block, column block) = (m // 16, n // 16): element (m, n) sits at
    [n // 16, m // 16, m % 16, n % 16], so logical block (i, j) is stored at [j, i]."""
    out = np.zeros((n1, m1, 16, 16), dtype)
    for (i, j), block in logical_blocks.items():
        out[j, i] = block
    return out


@covers("MatMul")
def test_matmul_fractal_nz():
    """A logical [M=16, K=32] = [3I | I], B logical [K=32, N=32] = [[0, 2I], [I, 0]] (16x16 blocks).
    C = A @ B = [3I*0 + I*I | 3I*2I + I*0] = [I | 6I], logical [16, 32].
    NZ storage [N/16, M/16, 16, 16]: A -> [2,1,16,16], B -> [2,2,16,16], C -> [2,1,16,16]."""
    eye = np.eye(16)
    a = _nz({(0, 0): 3 * eye, (0, 1): eye}, n1=2, m1=1, dtype=np.float16)
    b = _nz({(0, 1): 2 * eye, (1, 0): eye}, n1=2, m1=2, dtype=np.float16)
    # the storage the formula gives, spelled out: logical block (0,1) of B lives at b[1, 0]
    assert b[1, 0, 5, 5] == 2 and b[0, 1, 5, 5] == 1 and b[0, 0].sum() == 0 and b[1, 1].sum() == 0
    nz = "FRACTAL_NZ"
    bld = GraphBuilder("mm_nz", process="aicore")
    va = bld.input("a", (2, 1, 16, 16), "float16", nz)
    vb = bld.input("b", (2, 2, 16, 16), "float16", nz)
    bld.output(bld.op("MatMul", [va, vb], (2, 1, 16, 16), "float32", nz, transpose_a=False, transpose_b=False,
                      dst_type="float32", left_format=nz, right_format=nz))
    (out,) = run(bld.build(), [a, b])
    expected = np.zeros((2, 1, 16, 16))
    expected[0, 0] = eye  # logical block (0, 0) = I
    expected[1, 0] = 6 * eye  # logical block (0, 1) = 6I
    golden(out, expected, "float32")


@covers("Sub")
def test_elementwise_mixing_fractal_nz_and_default_broadcasts_logically():
    """x: FRACTAL_NZ, logical [32, 32] stored [2, 2, 16, 16]; y: DefaultFormat [32, 1] with y[m] = m.
    Sub broadcasts y along the logical N axis: out[m, n] = x[m, n] - m, stored NZ, so the element
    (m, n) = (16 i + r, 16 j + c) sits at [j, i, r, c]. With x = 100 everywhere:
    out_nz[j, i, r, c] = 100 - (16 i + r), the same for every j and c."""
    nz = "FRACTAL_NZ"
    b = GraphBuilder("nz_sub", process="aicore")
    x = b.input("x", (2, 2, 16, 16), "float32", nz)
    y = b.input("y", (32, 1), "float32")
    b.output(b.op("Sub", [x, y], (2, 2, 16, 16), "float32", nz))
    (out,) = run(b.build(), [np.full((2, 2, 16, 16), 100.0, np.float32),
                             np.arange(32, dtype=np.float32).reshape(32, 1)])
    rows_block0 = [100.0 - r for r in range(16)]  # i = 0: m = r
    rows_block1 = [84.0 - r for r in range(16)]  # i = 1: m = 16 + r
    expected = np.zeros((2, 2, 16, 16))
    for j in range(2):
        expected[j, 0] = np.array(rows_block0)[:, None]
        expected[j, 1] = np.array(rows_block1)[:, None]
    golden(out, expected, "float32")


# -- Conv2D --------------------------------------------------------------------------------------

X44 = [[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0], [9.0, 10.0, 11.0, 12.0], [13.0, 14.0, 15.0, 16.0]]
W22 = [[1.0, 2.0], [3.0, 4.0]]


def conv(x, w, stride, out_shape):
    g = composite([T("x", list(x.shape), "float16", fmt="NHWC"), T("w", list(w.shape), "float16", fmt="NHWC")],
                  [OP("Conv2D", [T("x", list(x.shape), "float16", fmt="NHWC"),
                                 T("w", list(w.shape), "float16", fmt="NHWC")],
                      T("out", out_shape, "float16", fmt="NHWC"), stride=stride, pad_list=[0, 0, 0, 0],
                      dilation=[1, 1, 1, 1], groups=1, dst_type="float16")],
                  [T("out", out_shape, "float16", fmt="NHWC")])
    (out,) = run(g, [x, w])
    return out


@covers("Conv2D")
def test_conv2d_stride_2():
    # out[h, w] = x[2h, 2w] + 2 x[2h, 2w+1] + 3 x[2h+1, 2w] + 4 x[2h+1, 2w+1]
    x = arr(X44, np.float16).reshape(1, 4, 4, 1)
    w = arr(W22, np.float16).reshape(1, 2, 2, 1)
    out = conv(x, w, [1, 1, 2, 2], [1, 2, 2, 1])
    golden(out, np.array([[44.0, 64.0], [124.0, 144.0]]).reshape(1, 2, 2, 1), "float16")


@covers("Conv2D")
def test_conv2d_stride_1_valid():
    x = arr(X44, np.float16).reshape(1, 4, 4, 1)
    w = arr(W22, np.float16).reshape(1, 2, 2, 1)
    out = conv(x, w, [1, 1, 1, 1], [1, 3, 3, 1])
    expected = [[44.0, 54.0, 64.0], [84.0, 94.0, 104.0], [124.0, 134.0, 144.0]]
    golden(out, np.array(expected).reshape(1, 3, 3, 1), "float16")


@covers("Conv2D")
def test_conv2d_channels_in_and_out():
    # 1x1 kernel, weight OHWI [2,1,1,2] = [[1, 1], [1, -1]]: o0 = c0 + c1, o1 = c0 - c1
    x = arr([[[[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [7.0, 8.0]]]], np.float16)  # [1,2,2,2]
    w = arr([[[[1.0, 1.0]]], [[[1.0, -1.0]]]], np.float16)  # [2,1,1,2]
    out = conv(x, w, [1, 1, 1, 1], [1, 2, 2, 2])
    golden(out, [[[[3.0, -1.0], [7.0, -1.0]], [[11.0, -1.0], [15.0, -1.0]]]], "float16")



@covers("Conv2D")
def test_conv2d_depthwise_groups():
    # groups=2 on 2 channels, weight OHWI [2, 1, 1, 1] = [2, -1]: each channel scaled on its own
    b = GraphBuilder("dw")
    x, w = b.input("x", (1, 1, 2, 2), "float32"), b.input("w", (2, 1, 1, 1), "float32")
    b.output(b.op("Conv2D", [x, w], (1, 1, 2, 2), "float32", stride=[1, 1, 1, 1], groups=2))
    (out,) = run(b.build(), [f32([[[[1.0, 2.0], [3.0, 4.0]]]]), f32([[[[2.0]]], [[[-1.0]]]])])
    golden(out, [[[[2.0, -2.0], [6.0, -4.0]]]], "float32")


@covers("Pool2D")
def test_pool2d_max_and_average_without_padding_counted():
    x = arr([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]], np.float32).reshape(1, 1, 3, 3)
    b = GraphBuilder("pool")
    v = b.input("x", (1, 1, 3, 3), "float32")
    b.output(b.op("Pool2D", [v], (1, 1, 2, 2), "float32", pool_type="max", kernel=[2, 2], stride=[1, 1]),
             b.op("Pool2D", [v], (1, 1, 3, 3), "float32", pool_type="avg", kernel=[2, 2], stride=[1, 1],
                  pad_head=[1, 1], pad_tail=[0, 0]),
             b.op("Pool2D", [v], (1, 1, 2, 2), "float32", pool_type="avg", kernel=[2, 2], stride=[2, 2],
                  pad_head=[1, 1], count_include_pad=True, ceil_mode=True))
    mx, avg, inc = run(b.build(), [x])
    golden(mx, [[[[5.0, 6.0], [8.0, 9.0]]]], "float32")
    golden(avg, [[[[1.0, 1.5, 2.5], [2.5, 3.0, 4.0], [5.5, 6.0, 7.0]]]], "float32")
    # windows rows -1..0 / 1..2, the padding row and column count, nothing past the input does
    golden(inc, [[[[0.25, 1.25], [2.75, 7.0]]]], "float32")


# -- InplaceAssign / Assign ----------------------------------------------------------------------

@covers("InplaceAssign")
def test_inplace_assign_writes_target_and_later_reads_see_it():
    b = GraphBuilder("ia")
    x, y = b.input("x", (2,), "float32"), b.input("y", (2,), "float32")
    before = b.neg(x)  # reads x before the write: old value
    s = b.add(x, y)
    fake = b.inplace_assign(x, s, s, fake_output=True)
    after = b.mul(x, 2.0)  # reads x after the write: new value
    b.output(before, fake, after)
    g = b.build()
    xa = f32([1.0, 2.0])
    outs = run(g, [xa, f32([10.0, 20.0])])
    assert len(outs) == 2, "the fake_output slot is not returned"
    golden(outs[0], [-1.0, -2.0], "float32")
    golden(outs[1], [22.0, 44.0], "float32")
    golden(xa, [11.0, 22.0], "float32")  # the caller's input array holds the written value


@covers("InplaceAssign")
def test_inplace_assign_real_output_is_the_passthrough():
    b = GraphBuilder("ia2")
    x, y = b.input("x", (2,), "int32"), b.input("y", (2,), "int32")
    s = b.add(x, y)
    d = b.inplace_assign(x, s, y, fake_output=False)
    b.output(d)
    xa = arr([1, 2], np.int32)
    (out,) = run(b.build(), [xa, arr([5, 7], np.int32)])
    golden(out, [5, 7], "int32")
    golden(xa, [6, 9], "int32")


@pytest.mark.skipif(not CORPUS.is_dir(), reason="corpus not found")
@covers("InplaceAssign")
def test_inplace_assign_corpus_assign_add():
    # networks/alexnet Fused_AssignAdd: input_0 += input_1 in place, the only output is fake
    g = akgpy.load_composite(CORPUS / "networks/alexnet/Fused_AssignAdd_11514799015909298180.info")
    a = arr([5], np.int32)
    assert run(g, [a, arr([-8], np.int32)]) == ()
    golden(a, [-3], "int32")


@covers("Assign")
def test_assign():
    b = GraphBuilder("assign")
    x, y = b.input("x", (2,), "float32"), b.input("y", (2,), "float32")
    out = b.assign(x, b.mul(y, 3.0))
    later = b.add(x, 1.0)
    b.output(out, later)
    xa = f32([1.0, 2.0])
    o, l = run(b.build(), [xa, f32([5.0, -6.0])])
    golden(o, [15.0, -18.0], "float32")
    golden(l, [16.0, -17.0], "float32")
    golden(xa, [15.0, -18.0], "float32")


# -- complex -------------------------------------------------------------------------------------

@covers("Complex")
def test_complex():
    # written the way the corpus writes it: both parts in one inner input list, attr {}
    doc = {"composite": True, "op": "cplx", "process": "cuda",
           "input_desc": [[T("re", [2])], [T("im", [2])]],
           "op_desc": [{"name": "Complex", "attr": {}, "input_desc": [[T("re", [2]), T("im", [2])]],
                        "output_desc": [T("z", [2], "complex64")]}],
           "output_desc": [T("z", [2], "complex64")]}
    (out,) = run(akgpy.load_composite(doc), [f32([1.0, 2.0]), f32([3.0, -4.0])])
    golden(out, np.array([1 + 3j, 2 - 4j]), "complex64")


@covers("CReal", "CImag")
def test_creal_cimag():
    z = np.array([1 + 2j, -3.5 + 0.5j], dtype=np.complex64)
    for op, expected in (("CReal", [1.0, -3.5]), ("CImag", [2.0, 0.5])):
        g = composite([T("z", [2], "complex64")], [OP(op, [T("z", [2], "complex64")], T("out", [2]))],
                      [T("out", [2])])
        (out,) = run(g, [z])
        golden(out, expected, "float32")


@covers("Complex", "CReal", "CImag", "Add")
def test_complex_round_trip_through_add():
    g = composite([T("a", [1]), T("b", [1])],
                  [OP("Complex", [T("a", [1]), T("b", [1])], T("z", [1], "complex64")),
                   OP("Add", [T("z", [1], "complex64"), T("z", [1], "complex64")], T("w", [1], "complex64")),
                   OP("CReal", [T("w", [1], "complex64")], T("re", [1])),
                   OP("CImag", [T("w", [1], "complex64")], T("im", [1]))],
                  [T("re", [1]), T("im", [1])])
    re, im = run(g, [f32([1.5]), f32([-2.0])])
    golden(re, [3.0], "float32")
    golden(im, [-4.0], "float32")


# -- Custom --------------------------------------------------------------------------------------

# The hybrid script of networks/custom/lu.info, verbatim: back substitution of an upper
# triangular system, column by column, mutating its local copy of b.
LU_SOURCE = ("def solver(a, b):\n  out = output_tensor(b.shape, b.dtype)\n  len = a.shape[0]\n"
             "  for k in range(len):\n    for n in range(len):\n      i = len - n - 1\n"
             "      out[i, k] = b[i, k] / a[i, i]\n      for j in range(i):\n"
             "        b[j, k] = b[j, k] - a[j, i] * out[i, k]\n  return out\n")


def _custom_graph(n: int, source: str = LU_SOURCE, name: str = "solver"):
    return composite([T("input_0", [n, n]), T("input_1", [n, n])],
                     [OP("Custom", [T("input_0", [n, n]), T("input_1", [n, n])], T("output_0_0", [n, n]),
                         func_name=name, func_source_str=source, func_type="hybrid", fake_output=False)],
                     [T("output_0_0", [n, n])])


@covers("Custom")
def test_custom_hybrid_triangular_solve():
    # a = [[2, 1], [0, 4]], b = [[4, 2], [8, 4]]: solve a x = b.
    # column 0: x1 = 8/4 = 2, b0 = 4 - 1*2 = 2, x0 = 2/2 = 1; column 1: x1 = 1, b0 = 1, x0 = 0.5
    a = f32([[2.0, 1.0], [0.0, 4.0]])
    b = f32([[4.0, 2.0], [8.0, 4.0]])
    (out,) = run(_custom_graph(2), [a, b])
    golden(out, [[1.0, 0.5], [2.0, 1.0]], "float32")
    golden(b, [[4.0, 2.0], [8.0, 4.0]], "float32")  # the script mutates its own copy, not the caller's


@covers("Custom")
def test_custom_hybrid_3x3():
    # a = [[1, 2, 3], [0, 1, 4], [0, 0, 2]], b = identity columns scaled: b = [[1,0,0],[0,1,0],[0,0,2]]
    # col 0: x = [1, 0, 0]; col 1: x2 = 0, x1 = 1, x0 = 0 - 2*1 = -2;
    # col 2: x2 = 2/2 = 1, x1 = 0 - 4*1 = -4, x0 = 0 - 3*1 - 2*(-4) = 5
    a = f32([[1.0, 2.0, 3.0], [0.0, 1.0, 4.0], [0.0, 0.0, 2.0]])
    b = f32([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 2.0]])
    (out,) = run(_custom_graph(3), [a, b])
    golden(out, [[1.0, -2.0, 5.0], [0.0, 1.0, -4.0], [0.0, 0.0, 1.0]], "float32")


@pytest.mark.skipif(not CORPUS.is_dir(), reason="corpus not found")
@covers("Custom")
def test_custom_corpus_lu_source_matches():
    doc = json.loads((CORPUS / "networks/custom/lu.info").read_text())
    attrs = {a["name"]: a["value"] for a in doc["op_desc"][0]["attr"]}
    assert attrs["func_source_str"] == LU_SOURCE and attrs["func_type"] == "hybrid"
    # the corpus graph itself at its real size: a = 2I, b = all-ones -> x = b / 2 (the j-loop subtracts
    # a[j, i] * out = 0 since a is diagonal)
    g = akgpy.load_composite(doc)
    (out,) = run(g, [2 * np.eye(128, dtype=np.float32), np.ones((128, 128), np.float32)])
    golden(out, np.full((128, 128), 0.5), "float32")


# -- Erf and the fallback ops (Concat, StridedSlice, Gather) ------------------------------------

@covers("Erf")
def test_erf():
    # erf(1), erf(-0.5), erf(2) from tables (Abramowitz & Stegun 7.1)
    golden(unary("Erf", f32([0.0, 1.0, -0.5, 2.0]), "float32"),
           [0.0, 0.8427007929497149, -0.5204998778130465, 0.9953222650189527], "float32", rtol=1e-7)


@covers("Concat")
def test_concat_axis_1():
    b = GraphBuilder("cat")
    x, y = b.input("x", (2, 1), "int32"), b.input("y", (2, 2), "int32")
    b.output(b.op("Concat", [x, y], (2, 3), "int32", axis=-1))
    (out,) = run(b.build(), [arr([[1], [2]], np.int32), arr([[3, 4], [5, 6]], np.int32)])
    golden(out, [[1, 3, 4], [2, 5, 6]], "int32")


@covers("StridedSlice")
def test_strided_slice_negative_stride_and_clamped_end():
    b = GraphBuilder("sl")
    x = b.input("x", (2, 5), "int32")
    b.output(b.op("StridedSlice", [x], (1, 3), "int32", begin=[1, 4], end=[99, -99], strides=[1, -2]))
    (out,) = run(b.build(), [arr([[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]], np.int32)])
    golden(out, [[9, 7, 5]], "int32")


@covers("Gather")
def test_gather_axis_1_with_negative_index():
    b = GraphBuilder("ga")
    x, i = b.input("x", (2, 3), "float32"), b.input("i", (2,), "int64")
    b.output(b.op("Gather", [x, i], (2, 2), "float32", axis=1))
    (out,) = run(b.build(), [f32([1.0, 2.0, 3.0], [4.0, 5.0, 6.0]), arr([2, -3], np.int64)])
    golden(out, [[3.0, 1.0], [6.0, 4.0]], "float32")


@covers("GatherElements")
def test_gather_elements_axis_1_with_negative_index():
    # ONNX's example: data [[1, 2], [3, 4]], indices [[0, 0], [1, 0]] on axis 1; -1 is the last column
    b = GraphBuilder("ge")
    x, i = b.input("x", (2, 2), "float32"), b.input("i", (2, 2), "int64")
    b.output(b.op("GatherElements", [x, i], (2, 2), "float32", axis=1))
    (out,) = run(b.build(), [f32([1.0, 2.0], [3.0, 4.0]), arr([[0, 0], [-1, 0]], np.int64)])
    golden(out, [[1.0, 1.0], [4.0, 3.0]], "float32")


def test_gather_out_of_range_index_is_an_argument_error():
    b = GraphBuilder("ga2")
    x, i = b.input("x", (3,), "float32"), b.input("i", (1,), "int64")
    b.output(b.op("Gather", [x, i], (1,), "float32", axis=0))
    with pytest.raises(akgpy.errors.ArgumentError, match="index 3 out of range"):
        run(b.build(), [f32([1.0, 2.0, 3.0]), arr([3], np.int64)])


# -- meta ----------------------------------------------------------------------------------------

def test_every_op_has_a_golden_case():
    missing = set(OPS) - COVERED
    assert not missing, f"ops without a golden case: {sorted(missing)}"


def test_reference_does_not_import_tvm():
    code = ("import sys\nimport akgpy.reference\n"
            "bad = sorted(m for m in sys.modules if m == 'tvm' or m.startswith('tvm.'))\n"
            "assert not bad, bad\nprint('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
