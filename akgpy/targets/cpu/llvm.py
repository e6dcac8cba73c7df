"""The LLVM CPU target: the host's real CPU, never the generic x86-64 that `mcpu: native` gives."""
from __future__ import annotations

import functools
import re
from pathlib import Path

import tvm

from ..errors import CompileError
from ..schedule.stream import LATENCY_ATTR
from . import half_round_trips, native_fp16, stream_stores, tir_pipeline


@functools.lru_cache(maxsize=None)
def host_cpu() -> str:
    return str(tvm.target.codegen.llvm_get_system_cpu())


@functools.lru_cache(maxsize=None)
def host_vector_bytes() -> int:
    """The widest vector register the host's code may use: 64 where LLVM's model of the host CPU
    has AVX-512 with byte/word and 128/256-bit forms (F, BW, VL: what 16-bit and 8-bit lanes and
    masked tails need), else 32. From the CPU's features, not its name: a VM can report a model
    (here "rocketlake" for a Xeon) that no name list anticipates."""
    tgt = host_target()
    wide = all(bool(tvm.target.codegen.target_has_features(f, tgt)) for f in ("avx512f", "avx512bw", "avx512vl"))
    return 64 if wide else 32


@functools.lru_cache(maxsize=None)
def host_llc_bytes() -> tuple[int, str]:
    """(size of the host's last-level cache, where it came from: "sysfs" or "fallback")."""
    best = max(_host_caches().values(), default=0)
    return (best, "sysfs") if best else (32 << 20, "fallback")


def host_l2_bytes() -> int:
    """Per-core L2 size from sysfs, else 512 KiB (a common size: 256 KiB - 2 MiB)."""
    return _host_caches().get(2) or 512 << 10


@functools.lru_cache(maxsize=None)
def _host_caches() -> dict[int, int]:
    """{level: bytes} of cpu0's data/unified caches, from sysfs (empty when unreadable)."""
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    out: dict[int, int] = {}
    for d in sorted(base.glob("index*")):
        try:
            if (d / "type").read_text().strip() == "Instruction":
                continue
            s = (d / "size").read_text().strip()
            size = int(s.rstrip("KMG")) * {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1], 1)
            level = int((d / "level").read_text())
            out[level] = max(out.get(level, 0), size)
        except (OSError, ValueError):
            continue
    return out


def _cpu_flags() -> set[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


@functools.lru_cache(maxsize=None)
def host_mattr() -> tuple[str, ...]:
    """Features the host has beyond LLVM's model of its CPU name: a Xeon VM that LLVM calls
    "rocketlake" runs AVX512-FP16, which that model lacks (`native_fp16` needs it)."""
    model = tvm.target.Target({"kind": "llvm", "mcpu": host_cpu()})
    if is_x86(model) and "avx512_fp16" in _cpu_flags() and not tvm.target.codegen.target_has_features("avx512fp16", model):
        return ("+avx512fp16",)
    return ()


@functools.lru_cache(maxsize=None)
def host_target() -> "tvm.target.Target":
    extra = host_mattr()
    return tvm.target.Target({"kind": "llvm", "mcpu": host_cpu(), **({"mattr": list(extra)} if extra else {})})


def has_fp16_arithmetic(tgt) -> bool:
    return is_x86(tgt) and bool(tvm.target.codegen.target_has_features("avx512fp16", tgt))


def is_x86(tgt) -> bool:
    triple = str(tgt.attrs.get("mtriple", "") or tvm.target.codegen.llvm_get_system_triple())
    return triple.startswith(("x86_64", "i686", "i386"))


def resolve(target) -> "tvm.target.Target":
    """The tvm Target for `target`, refused unless it is an LLVM target whose code this host runs:
    a program is called right here, so a GPU or another architecture's target cannot be built."""
    if target is None or (isinstance(target, str) and target in ("llvm", "cpu", "host")):
        return host_target()
    if isinstance(target, dict):
        try:
            tgt = tvm.target.Target(target)
        except Exception as e:  # TVM's ValueError/TVMError on a malformed config
            raise CompileError(f"invalid target {target!r:.120}: {str(e).strip().splitlines()[0][:200]}") from None
    elif isinstance(target, tvm.target.Target):
        tgt = target
    else:
        raise CompileError(f"unsupported target {target!r:.120}: akgpy compiles for 'llvm' (the host CPU) so far")
    if tgt.kind.name != "llvm":
        raise CompileError(f"unsupported target kind {tgt.kind.name!r} ({target!r:.120}): akgpy compiles for "
                           f"'llvm' (the host CPU) so far")
    triple = str(tgt.attrs.get("mtriple", "") or "")
    host = str(tvm.target.codegen.llvm_get_system_triple())
    if triple and triple.split("-")[0] != host.split("-")[0]:
        raise CompileError(f"target triple {triple!r} is not the host's ({host!r}): akgpy runs what it compiles "
                           f"on this machine")
    return tgt


# LLVM's machine scheduler holds back independent work that would raise register pressure. With
# the 16 vector registers of x86 without AVX-512 that keeps a chain of float16 roundings (each a
# vcvtps2ph/vcvtph2ps pair, several lanes' registers side by side) nearly serial: kernels the
# schedule marks so (schedule/stream.LATENCY_ATTR) are scheduled for parallelism instead. Zen 3,
# 2 threads, kernel alone, interleaved, 11 runs: bert's three float16 GELU graphs 0.78-0.80x
# (~8645 6.36 -> 4.97 ms, ~0750 9.40 -> 7.51). Not for float32 vector math: yolo's softplus
# losses 0.87-1.11x, the sigmoid cross-entropy gradients 0.99-1.15x (41 corpus graphs with exp,
# log or tanh: no consistent gain); not for every kernel: the MatMul template's register tile
# spilled (yolo ~6576 2.15x slower), register transposes 1.05-1.08x. AVX-512 hosts (32
# registers) keep LLVM's default: not measured.
ILP_OPTIONS = ("-misched-regpressure:bool=false",)


def _for_latency_bound(tgt):
    if not is_x86(tgt) or tvm.target.codegen.target_has_features("avx512f", tgt):
        return tgt
    cfg = dict(tgt.export())
    cfg["cl-opt"] = [*cfg.get("cl-opt", ()), *ILP_OPTIONS]
    return tvm.target.Target(cfg)


def build(mod, target):
    tgt = resolve(target)
    if any((f.attrs or {}).get(LATENCY_ATTR) for _, f in mod.functions_items()):
        tgt = _for_latency_bound(tgt)
    stream = is_x86(tgt) and any(stream_stores.ATTR in (f.attrs or {}) for _, f in mod.functions_items())
    pipeline = tir_pipeline.register(stream)
    # float16 ops in float16 where the CPU has them; then the round trips left that change no value
    fp16 = has_fp16_arithmetic(tgt)

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
