"""The user's path: arrays as numpy makes them reach the kernel in place at any alignment their
dtype allows; a copy happens only where the layout requires one, and report() says so; an
in-place target that overlaps another argument still gets the right answer (defect 4 of #48)."""
from __future__ import annotations

import numpy as np
import pytest

import akgpy
from akgpy.errors import ArgumentError
from akgpy.testing import compare, random_inputs

SHAPE = (96, 80)


def at_offset(a: np.ndarray, offset_bytes: int) -> np.ndarray:
    """A copy of `a` starting `offset_bytes` past a 64-byte boundary."""
    raw = np.zeros(a.nbytes + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + offset_bytes
    out = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    assert out.ctypes.data % 64 == offset_bytes % 64
    return out


def check_at(g, prog, offset_of, seed: int = 0):
    """Mismatches of `prog` against the reference with each argument at `offset_of(array)`
    bytes past a 64-byte boundary."""
    inputs = random_inputs(g, seed)
    ref_inputs = [a.copy() for a in inputs]
    kin = [at_offset(a, offset_of(a)) for a in inputs]
    got = prog(*kin)
    return compare(g, got, kin, akgpy.reference.run(g, ref_inputs), ref_inputs)


def _rng_like(shape, dtype, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _elementwise(dtype):
    b = akgpy.GraphBuilder(f"ew_{dtype}")
    x, y = b.input("x", SHAPE, dtype), b.input("y", SHAPE, dtype)
    b.output(b.op("Exp", [x * y + 1.0], SHAPE, dtype), (x - y).sum(axis=1))
    return b.build()


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_unaligned_inputs_go_to_the_kernel_in_place(dtype):
    g = _elementwise(dtype)
    prog = akgpy.fuse(g)
    for offset in range(0, 64, np.dtype(dtype).itemsize * 3):  # every residue class of a line
        assert not check_at(g, prog, lambda a: offset, seed=offset)
    text = prog.report()
    assert "copies: none" in text, text


def test_non_contiguous_and_read_only_inputs_are_copied_and_reported():
    g = _elementwise("float32")
    prog = akgpy.fuse(g)
    x = _rng_like((SHAPE[1], SHAPE[0]), "float32", 1).T  # a transposed view
    y = _rng_like(SHAPE, "float32", 2)
    y.flags.writeable = False
    ref = akgpy.reference.run(g, [x, y])
    got = prog(x, y)
    for r, o in zip(ref, got):
        assert np.allclose(r, o, rtol=1e-4, atol=1e-4)
    text = prog.report()
    assert "x: input copied, not C-contiguous: 1" in text, text
    assert "y: input copied, read-only" in text, text


def test_the_kernel_entry_checks_each_parameters_alignment():
    g = _elementwise("float32")
    k = akgpy.fuse(g).kernels[0]
    (_, func), = k._mod.functions_items()
    # the contract changes alignment only: a symbolic element offset would hide every access's
    # address from the target passes (prefetch found no stride-1 read)
    assert [int(p.ty.data_alignment) for p in func.params] == [p.align for p in k.params] == [4, 4, 64, 64]
    assert all(int(p.ty.elem_offset) == 0 for p in func.params)
    from akgpy.runtime.program import aligned_empty
    args = [aligned_empty(p.shape, p.dtype) for p in k.params]
    args[0] = at_offset(args[0], 4)
    k.func(*args)  # an input needs only the dtype's alignment
    out = k.params.index(next(p for p in k.params if p.kind == "output"))
    args[out] = at_offset(args[out], 16)
    with pytest.raises(ArgumentError, match="64-byte aligned"):
        k.func(*args)


def _transpose_assign():
    b = akgpy.GraphBuilder("alias_t")
    t = b.input("t", (64, 64))
    y = b.input("y", (64, 64))
    b.assign(t, y.transpose(1, 0) + 1.0)
    return b.build()


def test_an_in_place_target_passed_as_the_input_it_reads_transposed_is_right():
    """`assign(t, transpose(y) + 1)` called as prog(a, a): written in place, half the elements
    read an already overwritten y."""
    g = _transpose_assign()
    prog = akgpy.fuse(g)
    a = _rng_like((64, 64), "float32", 3)
    want = a.T + np.float32(1)
    prog(a, a)
    np.testing.assert_allclose(a, want, rtol=1e-6)
    assert "overlaps another argument" in prog.report()


@pytest.mark.parametrize("view", ["shifted_rows", "same_buffer_other_shape"])
def test_partially_overlapping_views_are_right(view):
    g = _transpose_assign()
    prog = akgpy.fuse(g)
    raw = _rng_like((128 * 64,), "float32", 4)
    if view == "shifted_rows":
        t, y = raw[:64 * 64].reshape(64, 64), raw[32 * 64:96 * 64].reshape(64, 64)
    else:
        t, y = raw[:64 * 64].reshape(64, 64), raw[64 * 32 + 5:64 * 96 + 5].reshape(64, 64)
    want = y.T + np.float32(1)
    prog(t, y)
    np.testing.assert_allclose(t, want, rtol=1e-6)


@pytest.mark.parametrize("transpose_a", [False, True])
@pytest.mark.parametrize("alias", ["a", "b"])
def test_an_in_place_matmul_result_over_an_operand_is_right(alias, transpose_a):
    """assign(t, a @ b) called with t the same array as a (or b): written in place, later rows
    read operand rows the kernel had overwritten (2,048-3,584 of 4,096 elements wrong)."""
    n = 64
    b = akgpy.GraphBuilder("alias_mm")
    t, x, w = b.input("t", (n, n)), b.input("x", (n, n)), b.input("w", (n, n))
    b.assign(t, b.matmul(x, w, transpose_a=transpose_a))
    prog = akgpy.fuse(b.build())
    a = _rng_like((n, n), "float32", 6)
    other = _rng_like((n, n), "float32", 7)
    x_, w_ = (a, other) if alias == "a" else (other, a)
    want = (x_.T if transpose_a else x_).astype(np.float64) @ w_.astype(np.float64)
    prog(a, x_, w_)
    np.testing.assert_allclose(a, want, rtol=1e-4, atol=1e-4)


def test_two_in_place_targets_on_one_array_are_refused():
    b = akgpy.GraphBuilder("two_targets")
    t1, t2, y = b.input("t1", (32,)), b.input("t2", (32,)), b.input("y", (32,))
    b.assign(t1, y + 1.0)
    b.assign(t2, y * 2.0)
    prog = akgpy.fuse(b.build())
    a = np.zeros(32, np.float32)
    with pytest.raises(ArgumentError, match="share memory"):
        prog(a, a, np.ones(32, np.float32))


def test_an_in_place_target_alone_is_written_in_place():
    g = _transpose_assign()
    prog = akgpy.fuse(g)
    t = at_offset(np.zeros((64, 64), np.float32), 4)
    y = _rng_like((64, 64), "float32", 5)
    prog(t, y)
    np.testing.assert_allclose(t, y.T + np.float32(1), rtol=1e-6)
    assert "copies: none" in prog.report()


# real graphs of each kind: in-place optimizer updates, float16 layernorm, transposes, reductions,
# broadcasts, a MatMul epilogue
CORPUS_SAMPLE = [
    "networks/bert_base/Fused_Sub_Mul_Cast_AddN_Mul_Mul_Cast_ReduceSum_Cast_Mul_Mul_Mul_Cast_Cast_split_15797801861397653896.info",
    "networks/yolov3_darknet53/Fused_Maximum_Mul_Sub_Abs_Neg_Exp_Add_Log_Add_Mul_ReduceSum_InplaceAssign_ato_more_parallel_6123382873124982380.info",
]


def corpus_sample():
    from .conftest import CORPUS
    picked = [CORPUS / p for p in CORPUS_SAMPLE]
    for pattern in ("*Transpose*", "*InplaceAssign*", "*MatMul*", "*ReduceMax*", "*Cast*BroadcastTo*"):
        picked += sorted(CORPUS.rglob(pattern + ".info"))[:2]
    return sorted({p for p in picked if p.is_file() and p.stat().st_size < 40_000})


@pytest.mark.parametrize("path", corpus_sample(), ids=lambda p: p.name[:60])
def test_corpus_graphs_on_unaligned_arrays_match(path):
    g = akgpy.load_composite(path)
    prog = akgpy.fuse(g)
    for offset_of in (lambda a: a.itemsize, lambda a: 16 if 16 % a.itemsize == 0 else 0):
        bad = check_at(g, prog, offset_of)
        assert not bad, bad


def test_a_model_runs_on_unaligned_inputs_in_place():
    """ModelProgram passes the caller's inputs to its kernels as they are, at any offset."""
    from akgpy import zoo
    model, inputs = zoo.mlp(batch=16, sizes=(64, 128, 96, 10))
    prog = akgpy.fuse(akgpy.from_onnx(model))
    (name, x), = inputs.items()
    want = prog(x)
    for offset in (4, 16, 36):
        got = prog(at_offset(x, offset))
        for w, o in zip(want, got):
            np.testing.assert_array_equal(w, o)  # same kernels, same order of operations
