"""targets/cpu/llvm.build around TVM's compile: the retry without TVM's CSE pass for the kernels it
breaks, and that any other code generation failure stays a CompileError."""
from __future__ import annotations

import pytest
import tvm

import akgpy
from akgpy import GraphBuilder
from akgpy.errors import CompileError
from akgpy.targets.cpu import llvm
from akgpy.testing import check_program


def _min_of_select_beside_addn():
    """Reduced from a fuzzed graph (bench/fuzz_fenced.py, seed 36): one vector loop runs a
    NaN-keeping Minimum of a Select (Let-bound operands) and an AddN reading the same x0."""
    b = GraphBuilder("cse_use_before_def")
    x0, x1, x2, x3 = (b.input("x0", (4, 2)), b.input("x1", (2,)), b.input("x2", (4, 2)), b.input("x3", (2,)))
    x4, x5 = b.input("x4", (1,)), b.input("x5", (2,))
    b.output(b.minimum(b.select(b.greater(x0, x4), x0, x4), x5), b.addn(x0, x1, x2, x3))
    return b.build()


def _spy(monkeypatch):
    calls = []
    compile_ = tvm.compile

    def spy(*args, **kwargs):
        calls.append(bool(tvm.transform.PassContext.current().config.get("tirx.disable_cse_tir", False)))
        return compile_(*args, **kwargs)
    monkeypatch.setattr(tvm, "compile", spy)
    return calls


def test_a_kernel_tvm_cse_breaks_compiles_without_it_and_matches(monkeypatch):
    calls = _spy(monkeypatch)
    g = _min_of_select_beside_addn()
    prog = akgpy.fuse(g)
    # TVM 0.27 fails the first compile (cse_v1 used before definition); should a later TVM not,
    # the retry is dead code and this says so
    assert calls == [False, True]
    for seed in (0, 1):
        assert not check_program(g, prog, seed)


def test_other_code_generation_failures_are_compile_errors_and_not_retried(monkeypatch):
    calls = []

    def broken(*args, **kwargs):
        calls.append(1)
        raise RuntimeError("Check failed: something else entirely")
    monkeypatch.setattr(tvm, "compile", broken)
    b = GraphBuilder("plain_add")
    x = b.input("x", (8, 8))
    b.output(b.add(x, x))
    with pytest.raises(CompileError, match="something else entirely"):
        akgpy.fuse(b.build())
    assert calls == [1]


def test_the_retry_is_recognised_by_the_message_alone():
    assert llvm._CSE_USE_BEFORE_DEF.search("Check failed: (!use_count_.count(v)) is false: "
                                           "variable cse_v12 has been used before definition!")
    assert not llvm._CSE_USE_BEFORE_DEF.search("variable x has been used before definition!")


def _targets(monkeypatch):
    seen = []
    compile_ = tvm.compile

    def spy(mod, target=None, **kwargs):
        seen.append(target)
        return compile_(mod, target=target, **kwargs)
    monkeypatch.setattr(tvm, "compile", spy)
    return seen


def _tanh_gelu(dtype):
    """bert's GELU, x * 0.5 * (1 + tanh(0.7978 * (x + 0.0447 * x^3))): in float16 every op
    rounds, a chain of ten conversion pairs per element."""
    b = GraphBuilder(f"gelu_{dtype}")
    x = b.input("x", (512, 256), dtype)
    inner = (x + x * x * x * 0.044715) * 0.7978846
    b.output(x * 0.5 * (b.tanh(inner) + 1.0))
    return b.build()


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_float16_rounding_chains_ask_llvm_for_parallel_scheduling(monkeypatch, dtype):
    """A kernel whose statements chain float16 roundings is compiled with LLVM's scheduler
    ignoring register pressure on x86 without AVX-512 (bert GELU ~8645 0.78x); float32 math keeps
    LLVM's default (no consistent gain on 41 corpus graphs)."""
    seen = _targets(monkeypatch)
    g = _tanh_gelu(dtype)
    prog = akgpy.fuse(g)
    marked = "float16 rounding chains (" in prog.explain()
    assert marked == (dtype == "float16"), prog.explain()[:3000]
    host = akgpy.resolve_target(None)
    expect = marked and host.is_x86 and not host.has("avx512f")
    assert [tuple(t.attrs.get("cl-opt", ())) for t in seen] == [llvm.ILP_OPTIONS if expect else ()]
    assert not check_program(g, prog)
