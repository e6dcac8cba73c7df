"""The CPU backend's default schedule choices, from the Target's facts and, where measurements
on one CPU differ from the rest, by its LLVM CPU name (the tables below)."""
from __future__ import annotations

from ...schedule.config import ScheduleConfig
from ...target import Target

PREFETCH_BYTES = 2048
# chain_registers where float16 ops run natively (AVX512-FP16, native_fp16.py): no
# conversion pairs left to hide, and 8 float32 registers per tanh polynomial spilled. bert
# GELU ~0750 2.88 -> 2.63 ms at 2, ~4253 3.12 -> 2.97, other float16 graphs within 2%
# (2 threads, kernel alone, interleaved)
NATIVE_FP16_CHAIN_REGISTERS = 2


# narrow_transpose_bytes by the LLVM CPU name of the target, where the measurements differ from
# the default 16. The best width follows the shuffle units, which no feature flag shows: on a
# Xeon (AVX-512BW) 16-byte tiles won (above), on AMD Zen 5 (full-width 512-bit shuffles) 64:
# yolo ~1373 4.1 -> 3.8 and 5.1/6.1 -> 4.2/5.0 ms (three interleaved A/B runs), its x49-pattern
# sibling ~0080 2.07 -> 1.69, vgg ~3714 and eight other float16 transposes of the corpus within
# +-3% (2 threads, kernel alone, a 128 MiB buffer written between calls). Unlisted CPUs keep 16.
NARROW_TRANSPOSE_BYTES_BY_CPU = {"znver5": 64}


# The streaming-store policy by the LLVM CPU name of the target, where it differs from the
# defaults measured on a Xeon VM: there the dropout ~6619 (writes 1.3x its reads) ran 12-14%
# slower streamed, and a kernel mixing streamed and cached output lines ran slower than with
# plain stores alone (streaming ~6619's float32 half cost 5%). A write skips its write-allocate
# read when it streams, and on AMD Zen 5 (STREAM triad 99 GB/s streamed, 64 with plain stores)
# both rules cost time. Kernel alone, 2 threads, interleaved, 21 repeats:
# - stream_write_heavy: dropout ~6619 7.27 -> 4.40 ms and its half-size sibling 3.59 -> 2.17,
#   the cast ~3234 (2x) 4.35 -> 2.81, four PadAkg copies (1.01-1.04x) 22.2 -> 14.2, 10.9 -> 7.1,
#   6.1 -> 3.9, 3.0 -> 1.9 ms; the other three corpus kernels of that kind within 1%.
# - stream_share 0 (each qualifying store streams): bert layernorm ~4253 1.98 -> 1.69 ms, whose
#   output rows read back by the row sum cannot stream; Reshape_Mul_Cast ~4406 6.24 -> 5.21;
#   three yolo Mul -> Transpose kernels, whose transposed half cannot, within +-5% (noise here).
#   These five are every corpus kernel whose streamed stores the share changes.
# On AMD Zen 4 (EPYC VM, 2 threads, same harness, A/B of identical code within +-10% here):
# stream_write_heavy: cast ~3234 0.85x (two runs), dropout ~6619 1.01-1.05x; stream_share 0:
# ~4253 0.76-0.78x (two runs), the other streamed bench kernels within noise.
# On AMD Zen 3 (EPYC VM, AVX2, 2 threads, same harness; A/B of identical code there reads
# 0.89-1.10): stream_write_heavy, on the 10 corpus kernels it changes: the cast ~3234 0.45-0.74
# (five runs), four PadAkg copies 0.57-0.71 (two runs each), Reshape_Mul_Cast ~6517 0.71-0.95,
# three others 0.93-0.99; dropout ~6619 0.89-1.38 (seven runs, bimodal; its half-size sibling
# 0.93-0.96). stream_share 0 was not clearly better there (bert ~4253 0.74, two kernels 1.2-1.4).
# Unlisted CPUs keep the defaults.
_AMD_STREAMS = {"stream_write_heavy": True, "stream_share": 0.0}
# stream_read_heavy_min_bytes, in last-level caches (Zen 4 and Zen 3: measured there). The 56 corpus
# kernels that move 1-2 LLCs (32-64 MiB) and read at least what they write, kernel alone, 2
# threads, interleaved, 5 rounds: geomean 0.85x, 22 of them 0.43-0.88x (vgg's cast-transpose
# ~3714 0.66-0.76x, resnet/yolo elementwise 0.49-0.69x); 3191 (bert dropout, 36 MiB) 1.10-1.14x
# in three runs, other single readings over 1.1x not repeated. Streaming their half- and
# quarter-line stores too cost up to 3.7x (case3: 32-byte float16 stores of 16-lane vectors);
# write-heavy kernels of that size ran slower streamed (bert layernorms ~3896 1.69x, ~8077 1.46x).
# On Zen 3 (default stream_share there) the rule changes the generated code of 3 corpus kernels,
# no others. With the LLC flushed before each call (the bench's conditions: other code runs
# between) yolo ~4409 ran 0.76-0.87x, ~7129 0.91-0.93x, ~2243 0.91-0.94x (two runs); back to
# back, where inputs stay cached, 0.82x, 1.00x, 1.01x.
STREAM_READ_HEAVY_LLCS_BY_CPU = {"znver4": 1, "znver3": 1}
# Intel Emerald Rapids (a 2-vCPU KVM guest whose sysfs reports the socket's 300 MiB L3): the
# guest keeps far less of it than that across kernel calls. A producer and its consumer back to
# back (x * 2 + 1, then * 3; float32, 2 threads, medians of interleaved rounds) ran at 35 GB/s
# up to 8 MiB tensors and at 24 GB/s, DRAM's speed, from 16 MiB; streaming the producer's output
# made the pair 1.08x at 8 MB moved by the producer, 0.95x at 16, 0.72-0.80x from 32 MB to 512
# (the consumer reads from memory either way). A STREAM triad streamed ran 1.3-1.45x its plain
# stores' GB/s at every size from 18 MB. So streaming starts at STREAM_MIN_BYTES_EMR moved, not
# at twice the LLC (600 MiB: no corpus kernel), for write-heavy kernels too, each qualifying
# store. Corpus kernels, kernel alone, interleaved, back to back (their inputs cached), 9
# repeats, the 196 non-contraction graphs moving 4 MB or more that the sweep reached (of 271;
# every network of the corpus): the 82 whose code this changes ran 0.69x (geomean, 0.29-1.09x);
# 16-32 MB 0.73x (29 kernels), 32-64 MB 0.66x (22), 64 MB and more 0.67x (31). stream_share 0
# against 0.9 changes 5 of them: bert layernorm ~4253 3.36 -> 1.81 ms, the others within noise.
# Bench kernels (LLC flushed between calls): the optimizers ~1050 6.15 -> 3.81, ~2769
# 3.90 -> 2.00, ~6743 3.40 -> 1.95 ms, the cast ~3234 12.8 -> 5.0, the layernorms ~3896
# 3.13 -> 1.77 and ~8077 2.55 -> 1.12. Kernels moving 8-16 MB ran 0.78x streamed (31, 0.30-1.10x),
# but alone: their consumer then reads from memory, and the producer/consumer pair above ran
# 1.08x at 8 MB moved, 0.95x at 16, so the bound stays at 16.
STREAM_MIN_BYTES_EMR = 16 << 20
STREAM_POLICY_BY_CPU = {"znver5": _AMD_STREAMS, "znver4": _AMD_STREAMS, "znver3": {"stream_write_heavy": True},
                        "emeraldrapids": {**_AMD_STREAMS, "stream_min_bytes": STREAM_MIN_BYTES_EMR}}


# the most column vectors of a contraction's register tile where the target has 32 vector
# registers (AVX-512): room for 6 x 4 accumulators and 4 + 1 operand registers
# (schedule/plain.register_tile); with 16 the ScheduleConfig default (3)
WIDE_TILE_VECTORS = 4


def default_config(target: Target) -> ScheduleConfig:
    """The default choices for a CPU target: streaming threshold twice its LLC (or the CPU's
    measured one), software prefetch on, fewer chain registers where float16 is native, register
    tiles of up to WIDE_TILE_VECTORS vectors where it has 32 vector registers, the
    narrow-transpose width and the streaming policy by CPU name (NARROW_TRANSPOSE_BYTES_BY_CPU,
    STREAM_POLICY_BY_CPU). A bare ScheduleConfig() has prefetch off and 4 chain registers."""
    native_fp16 = target.is_x86 and target.has("avx512fp16")
    chains = NATIVE_FP16_CHAIN_REGISTERS if native_fp16 else ScheduleConfig.chain_registers
    llc, cpu = target.llc_bytes, target.cpu
    streams = {"stream_min_bytes": 2 * llc, **STREAM_POLICY_BY_CPU.get(cpu, {})}
    wide = {"tile_j_vectors": WIDE_TILE_VECTORS} if target.vector_registers >= 32 else {}
    return ScheduleConfig(stream_read_heavy_min_bytes=STREAM_READ_HEAVY_LLCS_BY_CPU.get(cpu, 0) * llc,
                          narrow_transpose_bytes=NARROW_TRANSPOSE_BYTES_BY_CPU.get(cpu, 16),
                          prefetch_bytes=PREFETCH_BYTES, chain_registers=chains, **wide, **streams)


# Statement instances a nest needs before a self-contained kernel runs it in parallel. Its
# parallel loops run on the caller's launcher (MindSpore's: an OpenMP region per loop), which
# costs microseconds a launch when idle and up to a time slice when another process holds a
# core; TVM's spinning pool, which `min_parallel_work`'s default is sized for, costs less.
# bench/results/mindspore_kernels.md has the per-kernel measurements.
STANDALONE_MIN_PARALLEL_WORK = 1 << 16


def standalone_config(target: Target) -> ScheduleConfig:
    """`default_config` for a kernel the caller's launcher runs, on the caller's buffers: parallel
    only for larger nests, outputs assumed only dtype-aligned (frameworks' allocators give 16
    bytes: a 64-byte assumption would copy most outputs through a temporary each call)."""
    return default_config(target).replace(min_parallel_work=STANDALONE_MIN_PARALLEL_WORK, output_align=0)

