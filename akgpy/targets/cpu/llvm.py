"""LLVM code generation for a CPU Target (its `tvm()` form: the CPU LLVM names, never the
generic x86-64 that `mcpu: native` gives)."""
from __future__ import annotations

import re

import tvm

from ...errors import CompileError
from ...schedule.attrs import LATENCY_ATTR
from ...target import Target
from .. import half_round_trips
from . import native_fp16, stream_stores, tir_pipeline


def has_fp16_arithmetic(target: Target) -> bool:
    return target.is_x86 and target.has("avx512fp16")


# LLVM's machine scheduler holds back independent work that would raise register pressure. With
# the 16 vector registers of x86 without AVX-512 that keeps a chain of float16 roundings (each a
# vcvtps2ph/vcvtph2ps pair, several lanes' registers side by side) nearly serial: kernels the
# schedule marks so (schedule/attrs.LATENCY_ATTR) are scheduled for parallelism instead. Zen 3,
# 2 threads, kernel alone, interleaved, 11 runs: bert's three float16 GELU graphs 0.78-0.80x
# (~8645 6.36 -> 4.97 ms, ~0750 9.40 -> 7.51). Not for float32 vector math: yolo's softplus
# losses 0.87-1.11x, the sigmoid cross-entropy gradients 0.99-1.15x (41 corpus graphs with exp,
# log or tanh: no consistent gain); not for every kernel: the MatMul template's register tile
# spilled (yolo ~6576 2.15x slower), register transposes 1.05-1.08x. AVX-512 hosts (32
# registers) keep LLVM's default: not measured.
ILP_OPTIONS = ("-misched-regpressure:bool=false",)


def _for_latency_bound(target: Target, tgt):
    if not target.is_x86 or target.has("avx512f"):
        return tgt
    cfg = dict(tgt.export())
    cfg["cl-opt"] = [*cfg.get("cl-opt", ()), *ILP_OPTIONS]
    return tvm.target.Target(cfg)


def build(mod, target: Target):
    tgt = target.tvm()
    if any((f.attrs or {}).get(LATENCY_ATTR) for _, f in mod.functions_items()):
        tgt = _for_latency_bound(target, tgt)
    stream = target.is_x86 and any(stream_stores.ATTR in (f.attrs or {}) for _, f in mod.functions_items())
    pipeline = tir_pipeline.register(stream)
    # float16 ops in float16 where the CPU has them; then the round trips left that change no value
    fp16 = has_fp16_arithmetic(target)

    def simplify(f):
        return half_round_trips.drop_half_round_trips(native_fp16.native_fp16(f) if fp16 else f)
    mod = tvm.IRModule({gv: simplify(f) if isinstance(f, tvm.tirx.PrimFunc) else f
                        for gv, f in mod.functions_items()}, attrs=mod.attrs)
    try:
        return _compile(mod, tgt, pipeline)
    except (RuntimeError, ValueError, TypeError) as e:  # TVM's failed checks, whatever their Python type
        raise CompileError(f"LLVM code generation failed: {type(e).__name__}: {str(e).strip().splitlines()[-1]}") from None


def _compile(mod, tgt, pipeline):
    try:
        with _without_argument_asserts():
            return tvm.compile(mod, target=tgt, tir_pipeline=pipeline)
    except RuntimeError as e:
        if not _CSE_USE_BEFORE_DEF.search(str(e)):
            raise
    with _without_argument_asserts({"tirx.disable_cse_tir": True}):
        return tvm.compile(mod, target=tgt, tir_pipeline=pipeline)


# TVM 0.27's CommonSubexprElimTIR can leave a `cse_vN` it introduced used before its definition
# (LLVM codegen then refuses the function). Seen on fuzzed graphs where one vector loop holds a
# statement whose value is a Let (te/extrema's NaN-keeping min of a select) and a sibling that
# reads the same elements (tests/test_llvm_target.py builds one). Such a kernel compiles again
# without that pass; LLVM's own CSE remains. Not every kernel: without it 622 of the 713 corpus
# .info graphs get other LLVM IR.
_CSE_USE_BEFORE_DEF = re.compile(r"variable cse_v\d+ has been used before definition")


def _without_argument_asserts(extra: dict | None = None) -> "tvm.transform.PassContext":
    """The caller's pass context with TVM's assertions left out of the generated code.

    Those are the entry function's checks of each argument (type code, ndim, dtype, shape,
    strides, offset, device): about 10 branches and messages per argument, which LLVM then
    optimises and JIT-compiles. They made compiling the 206-scalar AddN of bert's LAMB
    (`Fused_AddN_Reshape_LessEqual_fusion_14762145945188140836`) take 3.8 s, 0.41 s without
    them, and 60 random corpus graphs a median 0.113 s, 0.087 s without. They guard nothing
    akgpy's own callers need: Program and ModelProgram check every array's count, dtype and
    shape before they pass it, and make it aligned and compact, which TVM never checked (a
    misaligned array crashed). `Kernel.func`, the entry function for direct callers, checks
    the same in Python (runtime/program.py)."""
    cur = tvm.transform.PassContext.current()
    return tvm.transform.PassContext(opt_level=cur.opt_level, required_pass=list(cur.required_pass),
                                     disabled_pass=list(cur.disabled_pass), instruments=list(cur.instruments),
                                     config={**dict(cur.config), "tirx.disable_assert": True, **(extra or {})})
