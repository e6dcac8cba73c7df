"""float16 ops in float16 registers (akgpy/targets/cpu/native_fp16.py): which ops the pass rewrites,
that AVX512-FP16 code comes out, and that its results are bit-identical to float32-then-round."""
from __future__ import annotations

import re

import numpy as np
import pytest
import tvm_ffi
from tvm import tirx

import akgpy
from akgpy import GraphBuilder
from akgpy.targets.cpu import llvm
from akgpy.targets.cpu.native_fp16 import native_fp16
from akgpy.testing import check_program

N = (64, 512)


def _chain():
    """((a * b + c) / a - 0.5) * 0.25 in float16, plus a float16 * float32 product (mixed: stays)."""
    b = GraphBuilder("fp16_chain")
    x, y, z = (b.input(n, N, "float16") for n in "abc")
    w = b.input("w", N, "float32")
    b.output(((x * y + z) / x - 0.5) * 0.25, b.cast(x, "float32") * w)
    return b.build()


def _ops16(func) -> dict[str, int]:
    seen: dict[str, int] = {}

    def see(e):
        if str(e.ty).startswith("float16"):
            seen[type(e).__name__] = seen.get(type(e).__name__, 0) + 1
    tvm_ffi.structural_walk(func.body, [(t, see) for t in (tirx.Add, tirx.Sub, tirx.Mul, tirx.Div)])
    return seen


def _scheduled(prog):
    return [f for _, f in prog.kernels[0]._mod.functions_items()][0]


def test_float16_ops_of_float16_operands_are_rewritten_and_mixed_ones_kept():
    func = _scheduled(akgpy.fuse(_chain(), target=_no_fp16_target()))
    assert _ops16(func) == {}  # the lowering computes float16 ops in float32
    got = _ops16(native_fp16(func))
    # a*b, +c, /a, -0.5 and *0.25 (constants float16 holds exactly); the float32 product is
    # not float16-rounded and stays float32
    assert got == {"Mul": 2, "Add": 1, "Div": 1, "Sub": 1}, got


def test_float16_constants_are_float16_values():
    """A float16 constant 0.1 is float16's 0.0999755859375 (the reference's value), not float32's
    0.1, so the op is a float16 op too."""
    b = GraphBuilder("fp16_const")
    x = b.input("x", N, "float16")
    b.output(x * 0.1)
    func = _scheduled(akgpy.fuse(b.build(), target=_no_fp16_target()))
    assert _ops16(native_fp16(func)) == {"Mul": 1}


def _no_fp16_target():
    """The host's CPU with AVX512-FP16 off, also where LLVM's model of it has the feature."""
    host = akgpy.resolve_target(None)
    off = {"mattr": ["-avx512fp16"]} if host.is_x86 else {}
    return {"kind": "llvm", "mcpu": host.cpu, **off}


def test_avx512fp16_targets_get_packed_half_instructions():
    # compile only: any x86 host's LLVM can generate the code. A CPU that has AVX512-FP16, not
    # the host's with the feature added: on an AVX2 host (Zen 3) +avx512fp16 alone gave scalar
    # half conversions, with no AVX-512 vector length to put the packed ops in
    if not akgpy.resolve_target(None).is_x86:
        pytest.skip("x86 code generation only")
    prog = akgpy.fuse(_chain(), target={"kind": "llvm", "mcpu": "sapphirerapids"})
    asm = prog.kernels[0]._executable.mod.inspect_source("s")
    assert re.search(r"\bvmulph\b", asm) and re.search(r"\bvdivph\b", asm) and re.search(r"\bvaddph\b", asm)
    assert not re.search(r"\bvfn?m(add|sub)\w*ph\b", asm)  # the fences keep products and sums apart
    plain = akgpy.fuse(_chain(), target=_no_fp16_target())
    assert not re.search(r"\bvmulph\b", plain.kernels[0]._executable.mod.inspect_source("s"))


def _edge_inputs(g, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for name in g.inputs:
        t = g.tensors[name]
        mag = np.exp(rng.uniform(np.log(1e-7), np.log(6e4), t.shape))  # subnormals to overflow
        a = (mag * rng.choice([-1.0, 1.0], t.shape)).astype(t.dtype)
        a.flat[:: 97] = 0.0
        out.append(a)
    return out


@pytest.mark.skipif(not llvm.has_fp16_arithmetic(akgpy.resolve_target(None)), reason="host has no AVX512-FP16")
def test_native_results_are_bit_identical_to_float32_rounding():
    g = _chain()
    native, widened = akgpy.fuse(g), akgpy.fuse(g, target=_no_fp16_target())
    assert re.search(r"\bvmulph\b", native.kernels[0]._executable.mod.inspect_source("s"))
    args = _edge_inputs(g)
    for got, want in zip(native(*args), widened(*args)):
        assert np.array_equal(got.view(np.uint8), want.view(np.uint8))
    assert not check_program(g, native)


@pytest.mark.parametrize("native, chains", [(True, 2), (False, 4)])
def test_native_fp16_targets_default_to_fewer_chain_registers(native, chains):
    from akgpy.targets import default_config
    host = akgpy.resolve_target(None)
    features = tuple(sorted(set(host.features) - {"avx512fp16"} | ({"avx512fp16"} if native else set())))
    x86 = host if host.is_x86 else host.replace(triple="x86_64-unknown-linux-gnu")
    assert default_config(x86.replace(features=features)).chain_registers == chains


def test_chain_registers_follow_the_target_not_the_host():
    from akgpy.targets import default_config
    x86 = akgpy.resolve_target(None).is_x86
    assert default_config({"kind": "llvm", "mcpu": "skylake"}).chain_registers == 4
    assert default_config({"kind": "llvm", "mcpu": "sapphirerapids"}).chain_registers == (2 if x86 else 4)
