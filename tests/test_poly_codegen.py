"""Code generation of what the polyhedral path (and plain) meets in real graphs: comparisons
converted to numbers in vector lanes (issue 48, defect 7) and index arithmetic of tensors of
2**31 elements or more (defect 8)."""
from __future__ import annotations

import importlib

import pytest

import akgpy
from akgpy import GraphBuilder
from akgpy.errors import CompileError
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


def test_a_tvm_failure_in_code_generation_is_a_compile_error(monkeypatch):
    """TVM raised the check above as a bare ValueError from llvm.build; without the rewrite it
    is an akgpy CompileError naming the failed check."""
    tir_pipeline = importlib.import_module("akgpy.targets.cpu.tir_pipeline")
    monkeypatch.setattr(tir_pipeline, "bool_casts", lambda f: f)
    with pytest.raises(CompileError, match="LLVM code generation failed: ValueError: .*IntImm"):
        akgpy.fuse(_compare_graph("max_rows", "float32", "float32"))


@pytest.mark.parametrize("in_dtype", ["float16", "int32"])
def test_comparison_cast_of_other_inputs(in_dtype):
    g = _compare_graph("max_rows", "float32", "float32", in_dtype=in_dtype)
    assert not check_program(g, akgpy.fuse(g), seed=0)


# -- 2**31 elements and more: int64 index arithmetic (compiled and inspected, never run: 8 GiB) --

BIG_R, BIG_C = 65536, 32769  # 2**31 + 65536 elements


def _big_graph(op: str):
    b = GraphBuilder(f"big_{op}")
    x = b.input("x", [BIG_R, BIG_C])
    if op == "elementwise":
        out = x * 2.0 + 1.0
    elif op == "broadcast_row":
        out = x + b.input("y", [1, BIG_C])
    elif op == "broadcast_column":
        out = x * b.input("y", [BIG_R, 1])
    elif op == "reduce_rows":
        out = b.reduce_sum(x, 1)
    elif op == "reduce_columns":
        out = b.reduce_sum(x, 0)
    elif op == "max_rows":
        out = b.reduce_max(x, 1)
    elif op == "transpose":
        out = x.transpose(1, 0)
    else:  # reshape across dims: a flat offset of the whole tensor
        out = (x + 1.0).reshape(BIG_C, BIG_R)
    b.output(out)
    return b.build()


def _loop_and_index_dtypes(prog) -> set[str]:
    import tvm_ffi
    from tvm import tirx
    func = [f for _, f in prog.kernels[0]._mod.functions_items()][0]
    found = set()

    def on_for(loop):
        found.add(str(loop.loop_var.ty))
        found.add(str(loop.extent.ty))

    def on_store(st):  # a vector store's index is a vector of them: int64x16
        found.update(str(i.ty).partition("x")[0] for i in st.indices if str(i.ty).startswith("int"))
    tvm_ffi.structural_walk(func.body, [(tirx.For, on_for), (tirx.BufferStore, on_store)])
    return found


@pytest.mark.parametrize("op", ["elementwise", "broadcast_row", "broadcast_column", "reduce_rows",
                                "reduce_columns", "max_rows", "transpose", "reshape"])
def test_big_tensor_indices_are_int64(op):
    """"Literal value 2147483648 exceeds range of int32" (or, for a transpose, int32 offsets that
    wrap): every loop, extent and store index of the poly kernel is int64."""
    prog = akgpy.fuse(_big_graph(op))
    assert prog.kernels[0].schedule_path.path == "poly/isl-ast"
    assert _loop_and_index_dtypes(prog) == {"int64"}


@pytest.mark.parametrize("op", ["elementwise", "transpose", "reshape"])
def test_big_tensor_indices_are_int64_plain(op):
    assert _loop_and_index_dtypes(akgpy.fuse(_big_graph(op), schedule="plain")) == {"int64"}


def _mixed_graph():
    b = GraphBuilder("mixed")
    x, y = b.input("x", [48, 96]), b.input("y", [1, 96])
    t = (x + y).transpose(1, 0)
    b.output(b.reduce_sum(t, 1), t.reshape(48, 96) * 0.5, b.reduce_max(x, 0))
    return b.build()


@pytest.mark.parametrize("schedule", ["poly", "plain"])
def test_small_tensors_keep_int32_indices(schedule):
    assert _loop_and_index_dtypes(akgpy.fuse(_mixed_graph(), schedule=schedule)) == {"int32"}


@pytest.mark.parametrize("schedule", ["poly", "plain"])
def test_int64_indices_compute_the_same(schedule, monkeypatch):
    """The int64 lowering, forced on a graph small enough to run, matches the reference."""
    lower = importlib.import_module("akgpy.te.lower")  # the module; akgpy.te.lower is also its function
    monkeypatch.setattr(lower, "index_dtype", lambda shapes: "int64")
    g = _mixed_graph()
    prog = akgpy.fuse(g, schedule=schedule)
    assert _loop_and_index_dtypes(prog) == {"int64"}
    assert not check_program(g, prog, seed=0)


@pytest.mark.parametrize("producer", ["add", "exp", "compare"])
def test_row_reduction_of_an_inlined_producer_is_rfactored(producer):
    """Inlining in one root replacement left the scope's stage-pipeline flag unset, and TVM's
    rfactor refused every row reduction with an inlined producer: scalar chains again."""
    b = GraphBuilder(f"rf_{producer}")
    x, y = b.input("x", [64, 256]), b.input("y", [64, 256])
    v = {"add": lambda: x + y, "exp": lambda: b.op("Exp", [x + y], [64, 256], "float32") * 2.0,
         "compare": lambda: (x > y).astype("float32")}[producer]()
    b.output(b.reduce_max(v, 1))
    g = b.build()
    prog = akgpy.fuse(g)
    assert "row reductions split into vector partial sums (rfactor): ReduceMax" in prog.explain()
    assert not check_program(g, prog, seed=0)
