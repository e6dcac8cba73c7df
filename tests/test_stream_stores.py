"""Streaming (non-temporal) stores: a kernel that moves more than the cache holds writes its
outputs past the cache, only with whole-line aligned vector stores, only when (nearly) all of
its output bytes can, and the results still match the reference."""
from __future__ import annotations

import numpy as np
import pytest
import tvm
from tvm.script import tirx as T

import akgpy
from akgpy import GraphBuilder
from akgpy.errors import CompileError
from akgpy.targets.cpu.stream import ATTR
from akgpy.targets import default_config
from akgpy.targets.cpu import llvm
from akgpy.targets.cpu.defaults import STREAM_MIN_BYTES_EMR
from akgpy.targets.cpu.stream_stores import _sink
from akgpy.testing import check_program

# stream at test sizes; 64-byte vectors whatever the host (an AVX2 host's 32-byte ones never
# fill a line per store, so they never stream; LLVM splits the wider ones)
FORCE = default_config().replace(stream_min_bytes=1 << 20)
WIDE = {"kind": "llvm", "vector_bytes": 64}  # the host's CPU with 64-byte vectors
X86 = akgpy.resolve_target(None).is_x86  # non-temporal stores are emitted for x86 hosts only


def _graph(rows=512, cols=1024, dtype="float32"):
    b = GraphBuilder("stream_add")
    x = b.input("x", (rows, cols), dtype)
    y = b.input("y", (rows, cols), dtype)
    b.output(x * 2.0 + y)
    return b.build()


def _nt(prog) -> int:
    return prog.kernels[0].source.count("!nontemporal")


def _streams(prog) -> bool:
    """Streams where the host can, and only there."""
    return (_nt(prog) > 0) == X86


@pytest.mark.parametrize("schedule", ["poly", "plain"])
def test_large_outputs_stream_and_match(schedule):
    g = _graph()
    prog = akgpy.fuse(g, schedule=schedule, config=FORCE, target=WIDE)
    assert _streams(prog)
    assert ("llvm.x86.sse.sfence" in prog.kernels[0].source) == X86  # the caller's stores are fenced
    assert not check_program(g, prog)
    if schedule == "poly":
        assert "streaming stores: candidates" in prog.kernels[0].explain()


def test_float16_outputs_stream():
    g = _graph(dtype="float16")
    prog = akgpy.fuse(g, config=FORCE, target=WIDE)
    assert _streams(prog)
    assert not check_program(g, prog)


def test_small_kernels_and_off_keep_plain_stores():
    g = _graph()
    default = akgpy.fuse(g)  # 6 MiB moved: below any default threshold
    assert _nt(default) == 0 and "streaming stores: none" in default.kernels[0].explain()
    off = akgpy.fuse(g, config=default_config().replace(stream_min_bytes=0))
    assert _nt(off) == 0 and "streaming stores: none (off)" in off.kernels[0].explain()


@pytest.mark.parametrize("mcpu", ["skylake-avx512", "znver3", "emeraldrapids"])
def test_default_threshold_is_twice_the_llc_or_the_cpus_measured_one(mcpu):
    """Emerald Rapids (a VM guest under a 300 MiB shared L3) streams from 16 MiB: there the pair
    of a producer and its consumer ran 0.72-0.80x with the output streamed from 32 MB moved."""
    llc = akgpy.resolve_target({"kind": "llvm", "mcpu": mcpu}).llc_bytes  # the target's, not the host's
    want = STREAM_MIN_BYTES_EMR if mcpu == "emeraldrapids" else 2 * llc
    assert default_config({"kind": "llvm", "mcpu": mcpu}).stream_min_bytes == want


def test_an_output_read_by_a_later_statement_is_forwarded_and_streams():
    b = GraphBuilder("stream_reuse")
    x = b.input("x", (512, 1024))
    y = b.input("y", (512, 1024))
    m = x * y
    b.output(m)
    b.output(m + 1.0)
    g = b.build()
    prog = akgpy.fuse(g, config=FORCE, target=WIDE)
    assert not check_program(g, prog)
    assert _streams(prog)


def test_kernels_writing_more_than_they_read_stream_only_where_the_cpu_gains():
    b = GraphBuilder("stream_widen")
    b.output(b.input("x", (512, 1024), "float16").astype("float32"))  # writes twice its reads
    g = b.build()
    prog = akgpy.fuse(g, config=FORCE.replace(stream_write_heavy=False), target=WIDE)
    assert _nt(prog) == 0 and "writes more than it reads" in prog.kernels[0].explain()
    assert not check_program(g, prog)
    prog = akgpy.fuse(g, config=FORCE.replace(stream_write_heavy=True), target=WIDE)
    assert _streams(prog) and "streaming stores: candidates" in prog.kernels[0].explain()
    assert not check_program(g, prog)


@pytest.mark.parametrize("mcpu,heavy,share", [("znver5", True, 0.0), ("znver4", True, 0.0), ("znver3", True, 0.9),
                                               ("emeraldrapids", True, 0.0), ("sapphirerapids", False, 0.9),
                                               ("skylake-avx512", False, 0.9)])
def test_the_streaming_policy_is_a_per_cpu_default(mcpu, heavy, share):
    """Measured: write-heavy kernels 35-40% faster streamed on Zen 5, 12-14% slower on a Xeon VM
    LLVM calls rocketlake, 0.40-0.57x on Emerald Rapids; mixed streamed and cached outputs 15%
    faster on Zen 5 (bert ~4253), 5% slower on rocketlake, 0.54x on Emerald Rapids."""
    cfg = default_config({"kind": "llvm", "mcpu": mcpu})
    assert cfg.stream_write_heavy is heavy and cfg.stream_share == share


@pytest.mark.parametrize("dtype,vector_bytes,streams", [("float32", 64, True), ("float16", 64, True),
                                                          ("float16", 32, False)])  # 32-byte stores
def test_read_heavy_kernels_below_the_threshold_stream_only_whole_line_stores(dtype, vector_bytes, streams):
    """A kernel that reads at least what it writes and moves between
    `stream_read_heavy_min_bytes` and `stream_min_bytes` streams only its stores of whole lines:
    its 16-lane float16 stores (32 bytes) ran 3.7x slower streamed (case3, 36 MiB, Zen 4), its
    whole-line ones 0.43-0.88x on 22 of 56 such corpus kernels. A write-heavy one does not."""
    b = GraphBuilder("stream_read_heavy")
    x, y = b.input("x", (512, 1024)), b.input("y", (512, 1024))
    b.output((x * 2.0 + y).astype(dtype))  # 4 MiB read, 2 or 1 MiB written
    g = b.build()
    cfg = FORCE.replace(stream_min_bytes=64 << 20, stream_read_heavy_min_bytes=1 << 20, stream_share=0.0)
    target = {**WIDE, "vector_bytes": vector_bytes}
    prog = akgpy.fuse(g, config=cfg, target=target)
    text = prog.kernels[0].explain()
    assert "reading at least what it writes); code generation streams each store of whole lines" in text, text[:3000]
    assert _streams(prog) if streams else _nt(prog) == 0
    assert not check_program(g, prog)
    # the same kernel under the 2x threshold alone, or write-heavy: no stream below it
    assert _nt(akgpy.fuse(g, config=cfg.replace(stream_read_heavy_min_bytes=0), target=target)) == 0
    b = GraphBuilder("stream_write_heavy")
    b.output(b.input("h", (512, 1024), "float16").astype("float32"))
    wh = b.build()
    prog = akgpy.fuse(wh, config=cfg.replace(stream_write_heavy=True), target=target)
    assert _nt(prog) == 0 and "streaming stores: none (kernel moves 3 MiB < 64 MiB)" in prog.kernels[0].explain()


@pytest.mark.parametrize("mcpu,llcs", [("znver4", 1), ("znver3", 1), ("znver5", 0), ("skylake-avx512", 0)])
def test_the_read_heavy_threshold_is_a_per_cpu_default(mcpu, llcs):
    cfg = default_config({"kind": "llvm", "mcpu": mcpu})
    assert cfg.stream_read_heavy_min_bytes == llcs * akgpy.resolve_target({"kind": "llvm", "mcpu": mcpu}).llc_bytes


def test_the_share_decides_whether_part_of_the_outputs_streams():
    """An output a later loop reads back (the row sum of y) cannot stream; the other output can.
    At the Xeon's share (0.9) neither does, at 0 the one that can streams."""
    b = GraphBuilder("stream_part")
    x = b.input("x", (512, 1024))
    y = x * 2.0
    b.output(y)
    b.output(b.reduce_sum(y, axis=(1,)))
    b.output(x + 1.0)
    g = b.build()
    force = FORCE.replace(stream_write_heavy=True)  # it writes twice what it reads; not the host's policy
    held = akgpy.fuse(g, config=force.replace(stream_share=0.9), target=WIDE)
    assert _nt(held) == 0 and "at least 90% of their bytes" in held.kernels[0].explain()
    part = akgpy.fuse(g, config=force.replace(stream_share=0.0), target=WIDE)
    assert _streams(part) and "streams each store that fills whole lines" in part.kernels[0].explain()
    assert not check_program(g, held) and not check_program(g, part)


def test_bad_threshold_is_rejected():
    with pytest.raises(CompileError, match="stream_min_bytes"):
        default_config().replace(stream_min_bytes=-1)
    with pytest.raises(CompileError, match="stream_read_heavy_min_bytes"):
        default_config().replace(stream_read_heavy_min_bytes=True)
    with pytest.raises(CompileError, match="stream_write_heavy"):
        default_config().replace(stream_write_heavy=1)
    for bad in (-0.1, 1.5, True, "0.5"):
        with pytest.raises(CompileError, match="stream_share"):
            default_config().replace(stream_share=bad)


# -- the code-generation rule on hand-written loop nests -------------------------------------

def _marked(func, nbytes):
    return tvm.IRModule({"main": func.with_attr(ATTR, {"B.data": ["B", nbytes]})})


@T.prim_func
def _whole_lines(A: T.Buffer((65536,)), B: T.Buffer((65536,))):
    T.func_attr({"global_symbol": "whole_lines", "tirx.noalias": True})
    for i in range(4096):
        B[T.Ramp(i * 16, 1, 16)] = A[T.Ramp(i * 16, 1, 16)] + T.Broadcast(T.float32(1), 16)


@T.prim_func
def _half_lines(A: T.Buffer((65536,)), B: T.Buffer((65536,))):
    T.func_attr({"global_symbol": "half_lines", "tirx.noalias": True})
    for i in range(8192):
        B[T.Ramp(i * 8, 1, 8)] = A[T.Ramp(i * 8, 1, 8)] + T.Broadcast(T.float32(1), 8)


@T.prim_func
def _strided_half_lines(A: T.Buffer((65536,)), B: T.Buffer((65536,))):
    T.func_attr({"global_symbol": "strided_half_lines", "tirx.noalias": True})
    for i in range(4096):  # the first half of each line only: lines never fill
        B[T.Ramp(i * 16, 1, 8)] = A[T.Ramp(i * 16, 1, 8)]


@T.prim_func
def _unaligned_rows(A: T.Buffer((85 * 256,)), B: T.Buffer((85 * 256,))):
    T.func_attr({"global_symbol": "unaligned_rows", "tirx.noalias": True})
    for r in range(256):
        for j in range(5):  # rows of 85: row r starts at 85 r, not on a line
            B[T.Ramp(r * 85 + j * 16, 1, 16)] = A[T.Ramp(r * 85 + j * 16, 1, 16)]


@T.prim_func
def _tile_rows(A: T.Buffer((24576,)), B: T.Buffer((24576,))):
    T.func_attr({"global_symbol": "tile_rows", "tirx.noalias": True})
    for i in range(1024):  # three consecutive 8-lane stores per step, as a transposed tile's block
        B[T.Ramp(i * 24 + 16, 1, 8)] = A[T.Ramp(i * 24, 1, 8)]
        B[T.Ramp(i * 24, 1, 8)] = A[T.Ramp(i * 24 + 8, 1, 8)]
        B[T.Ramp(i * 24 + 8, 1, 8)] = A[T.Ramp(i * 24 + 16, 1, 8)]


@T.prim_func
def _tile_rows_gap(A: T.Buffer((24576,)), B: T.Buffer((24576,))):
    T.func_attr({"global_symbol": "tile_rows_gap", "tirx.noalias": True})
    for i in range(1024):  # the middle third of each step is never written
        B[T.Ramp(i * 24, 1, 8)] = A[T.Ramp(i * 24, 1, 8)]
        B[T.Ramp(i * 24 + 16, 1, 8)] = A[T.Ramp(i * 24 + 16, 1, 8)]


@T.prim_func
def _guarded_halves(A: T.Buffer((65536,)), B: T.Buffer((65536,))):
    T.func_attr({"global_symbol": "guarded_halves", "tirx.noalias": True})
    for i in range(4096):  # one half of each line per step, by condition: lines never fill
        if i % 2 == 0:
            B[T.Ramp(i * 16, 1, 8)] = A[T.Ramp(i * 16, 1, 8)]
        else:
            B[T.Ramp(i * 16 + 8, 1, 8)] = A[T.Ramp(i * 16 + 8, 1, 8)]


def _source(mod) -> str:
    return llvm.build(mod, akgpy.resolve_target(None)).mod.inspect_source("ll")


def test_only_stores_that_fill_whole_lines_stream():
    assert ("!nontemporal" in _source(_marked(_whole_lines, 1 << 18))) == X86
    assert ("!nontemporal" in _source(_marked(_half_lines, 1 << 18))) == X86  # consecutive 32-byte stores
    assert "!nontemporal" not in _source(_marked(_strided_half_lines, 1 << 18))
    assert "!nontemporal" not in _source(_marked(_unaligned_rows, 85 * 256 * 4))
    assert "!nontemporal" not in _source(tvm.IRModule({"main": _whole_lines}))  # not marked
    stores = [ln for ln in _source(_marked(_tile_rows, 24576 * 4)).splitlines() if " store <" in ln]
    assert stores and all(("!nontemporal" in ln) == X86 for ln in stores)  # all three, not some
    assert "!nontemporal" not in _source(_marked(_tile_rows_gap, 24576 * 4))
    assert "!nontemporal" not in _source(_marked(_guarded_halves, 1 << 18))


@T.prim_func
def _reused_output(A: T.Buffer((65536,)), B: T.Buffer((65536,)), C: T.Buffer((65536,))):
    T.func_attr({"global_symbol": "reused_output", "tirx.noalias": True})
    for i in T.parallel(4096):  # C reads back the B it just wrote: forwarded, B still streams
        B[T.Ramp(i * 16, 1, 16)] = A[T.Ramp(i * 16, 1, 16)] * A[T.Ramp(i * 16, 1, 16)]
        C[T.Ramp(i * 16, 1, 16)] = B[T.Ramp(i * 16, 1, 16)] + T.Broadcast(T.float32(1), 16)


def test_a_forwarded_output_is_computed_once_before_its_streaming_stores():
    """The load of B in C's statement takes B's expression; B's store then moves after C's and
    both become one call, so A is loaded once per step. A streaming store has no type-based
    alias tag, and in a parallel loop's body (a closure: no noalias arguments) LLVM reloaded
    A (and recomputed B) after B's store when it came first."""
    mod = tvm.IRModule({"main": _reused_output.with_attr(ATTR, {"B.data": ["B", 1 << 18], "C.data": ["C", 1 << 18]})})
    a = np.random.default_rng(0).standard_normal(65536).astype("float32")
    args = [tvm.runtime.tensor(x) for x in (a, np.empty_like(a), np.empty_like(a))]
    llvm.build(mod, akgpy.resolve_target(None))["main"](*args)
    np.testing.assert_array_equal(args[1].numpy(), a * a)
    np.testing.assert_allclose(args[2].numpy(), a * a + 1, rtol=1e-6)  # LLVM may contract to an FMA
    lines = _source(mod).splitlines()
    nt = [ln for ln in lines if " store <" in ln and "!nontemporal" in ln]
    loads = [ln for ln in lines if "load <16 x float>" in ln]
    assert (len(nt) > 0) == X86
    assert len(loads) * 2 == max(len(nt), 2), (len(loads), len(nt))


def test_a_forwarded_store_moves_to_just_after_its_last_use_and_no_further():
    tirx = tvm.tirx
    a, b, c, d = (tirx.decl_buffer((16,), "float32", n) for n in "ABCD")
    owner = {str(x.data): (x.name, 64) for x in (b, c, d)}
    one = tirx.const(1.0, "float32")
    s0 = tirx.BufferStore(b, tirx.BufferLoad(a, [0]), [0])
    s1 = tirx.BufferStore(c, tirx.BufferLoad(a, [0]) + one, [0])  # B's value, forwarded
    s2 = tirx.BufferStore(d, tirx.BufferLoad(b, [1]), [0])  # reads B itself: B's store stays before
    assert _sink([s0, s1, s2], {0: 1}, owner) == [s1, s0, s2]
    assert _sink([s0, s2, s1], {0: 2}, owner) == [s0, s2, s1]  # it would pass a reader of B
    s3 = tirx.BufferStore(d, tirx.BufferLoad(a, [0]), [1])
    assert _sink([s0, s3, s1], {0: 2}, owner) == [s3, s1, s0]
