"""Software prefetch (akgpy/targets/cpu/prefetch.py): which reads get one, and how far ahead."""
from __future__ import annotations

import pytest
from tvm import ir, tirx
from tvm.script import tirx as T
from tvm.sym import Analyzer
import tvm_ffi

import akgpy
from akgpy import GraphBuilder
from akgpy.errors import CompileError
from akgpy.targets import default_config
from akgpy.targets.cpu.prefetch import prefetch_func
from akgpy.targets.cpu.stream import ATTR as STREAM_ATTR
from akgpy.targets.cpu.stream import PREFETCH_ATTR
from akgpy.testing import check_program


def _prefetched(func, distance=2048, rw=0) -> list[tuple[str, object, object]]:
    """(buffer, prefetched index minus the index of the access it serves, that access's index)
    per read prefetch (rw 0) or write prefetch (rw 1: the store it serves) the pass inserts, in
    order."""
    out = prefetch_func(func.with_attr(PREFETCH_ATTR, distance))
    found, ana = [], Analyzer()

    def on_seq(seq):
        stmts = list(seq.seq)
        for k, st in enumerate(stmts):
            if isinstance(st, tirx.Evaluate) and isinstance(st.value, ir.Call) and st.value.op.name == "tirx.prefetch":
                if int(st.value.args[1].value) != rw:
                    continue
                target = st.value.args[0].args[0]  # address_of(buf[index])
                nxt = next(s for s in stmts[k:] if isinstance(s, tirx.BufferStore))
                if rw:
                    assert nxt.buffer.same_as(target.source)
                    base = nxt.indices[0].base
                else:
                    loads = []
                    tvm_ffi.structural_walk(nxt.value, [(ir.TensorLoad, loads.append)])
                    base = next(ld for ld in loads if ld.source.same_as(target.source)).indices[0].base
                found.append((target.source.name, ana.simplify(target.indices[0] - base), base))
    tvm_ffi.structural_walk(out.body, [(tirx.SeqStmt, on_seq)])
    return found


def _offsets(found) -> list[tuple[str, int]]:
    return [(name, int(d.value)) for name, d, _ in found]


@T.prim_func
def _stream(A: T.Buffer((65536,)), B: T.Buffer((65536,))):
    for i in range(4096):
        B[T.Ramp(i * 16, 1, 16)] = A[T.Ramp(i * 16, 1, 16)] + T.Broadcast(T.float32(1), 16)


@T.prim_func
def _two_outputs(A: T.Buffer((65536,)), B: T.Buffer((65536,)), C: T.Buffer((65536,))):
    for i in range(4096):  # A read by both stores, B read back right after it is written
        B[T.Ramp(i * 16, 1, 16)] = A[T.Ramp(i * 16, 1, 16)] + T.Broadcast(T.float32(1), 16)
        C[T.Ramp(i * 16, 1, 16)] = A[T.Ramp(i * 16, 1, 16)] * B[T.Ramp(i * 16, 1, 16)]


def test_a_stream_is_prefetched_the_distance_ahead_and_outputs_are_not():
    assert _offsets(_prefetched(_stream)) == [("A", 512)]  # 2048 bytes of float32
    assert _offsets(_prefetched(_stream, distance=1024)) == [("A", 256)]
    assert _offsets(_prefetched(_two_outputs)) == [("A", 512)]  # once per line, and no B
    # an output written by an earlier loop nest is prefetched where a later one reads it
    assert _offsets(_prefetched(_written_then_summed)) == [("A", 512), ("B", 32 * 1024)]


def test_a_store_into_an_argument_gets_a_write_prefetch_unless_it_may_stream():
    """A written line not in cache is read first (for ownership), and a loop heavy in arithmetic
    keeps few of those reads in flight (bert GELU backward ~0750, whose output a later loop sums
    so it cannot stream: kernel alone, LLC flushed, 0.90-0.92x). An output that may stream
    (marked, and read by no loop of the kernel) gets none: its prefetch would count as a read
    back, and targets/cpu/stream_stores.py would not stream it."""
    assert _offsets(_prefetched(_stream, rw=1)) == [("B", 512)]
    assert _offsets(_prefetched(_two_outputs, rw=1)) == [("B", 512), ("C", 512)]
    assert _offsets(_prefetched(_columns, rw=1)) == []  # 4 KiB of partial sums: cached
    assert _offsets(_prefetched(_short_rows, rw=1)) == []  # a copy: no arithmetic to hide a miss behind
    marked = _two_outputs.with_attr(STREAM_ATTR, {"B.data": ["out_b", 1 << 18], "C.data": ["out_c", 1 << 18]})
    assert _offsets(_prefetched(marked, rw=1)) == []  # B is read right after its store: forwarded
    summed = _written_then_summed.with_attr(STREAM_ATTR, {"B.data": ["out_b", 1 << 22]})
    assert _offsets(_prefetched(summed, rw=1)) == [("B", 512)]  # a later nest reads B back


def test_off_inserts_nothing():
    off = _stream.with_attr(PREFETCH_ATTR, 0)
    assert prefetch_func(off).same_as(off)
    assert prefetch_func(_stream).same_as(_stream)  # not marked


@T.prim_func
def _columns(A: T.Buffer((1 << 20,)), B: T.Buffer((1024,))):
    for j in range(64):
        for i in range(1024):  # down a column: the next read is the next row, 4 KiB on
            B[T.Ramp(j * 16, 1, 16)] = B[T.Ramp(j * 16, 1, 16)] + A[T.Ramp(i * 1024 + j * 16, 1, 16)]


@T.prim_func
def _short_rows(A: T.Buffer((1 << 20,)), B: T.Buffer((1 << 20,))):
    for i in range(8192):
        for j in range(8):  # rows of 128 floats: 4 rows make 2 KiB
            B[T.Ramp(i * 128 + j * 16, 1, 16)] = A[T.Ramp(i * 128 + j * 16, 1, 16)]


@T.prim_func
def _written_then_summed(A: T.Buffer((1 << 20,)), B: T.Buffer((1 << 20,)), C: T.Buffer((1024,))):
    for i in range(1024):
        for j in range(64):
            B[T.Ramp(i * 1024 + j * 16, 1, 16)] = A[T.Ramp(i * 1024 + j * 16, 1, 16)] * T.Broadcast(T.float32(2), 16)
    for j in range(64):  # a later nest sums B's columns: 4 MiB written long before, not cached
        for i in range(1024):
            C[T.Ramp(j * 16, 1, 16)] = C[T.Ramp(j * 16, 1, 16)] + B[T.Ramp(i * 1024 + j * 16, 1, 16)]


def test_the_address_follows_the_innermost_loop_that_moves_the_read():
    # down a column, one line per step: 2 KiB of lines ahead is 32 rows, not 2 KiB along the row
    assert _offsets(_prefetched(_columns)) == [("A", 32 * 1024)]
    # the short inner loop continues along the stream: j's coefficient, extrapolated 32 steps
    assert _offsets(_prefetched(_short_rows)) == [("A", 512)]


@T.prim_func
def _wide(A: T.Buffer((65536,), "float16"), B: T.Buffer((65536,), "float16")):
    for i in range(512):  # a register chain of 128 float16 lanes: 4 lines per read
        B[T.Ramp(i * 128, 1, 128)] = A[T.Ramp(i * 128, 1, 128)] * T.Broadcast(T.float16(2), 128)


def test_each_line_of_a_wide_read_is_prefetched_once():
    assert _offsets(_prefetched(_wide)) == [("A", 1024 + 32 * m) for m in range(4)]


@T.prim_func
def _reused(A: T.Buffer((1 << 20,)), bias: T.Buffer((1024,)), B: T.Buffer((1 << 20,))):
    T.func_attr({"tirx.noalias": True})
    tmp = T.alloc_buffer((1024,))
    for i in range(1024):
        for j in range(64):
            tmp[T.Ramp(j * 16, 1, 16)] = A[T.Ramp(i * 1024 + j * 16, 1, 16)] + bias[T.Ramp(j * 16, 1, 16)]
        for j in range(64):  # the same row again, and a local: both cached
            B[T.Ramp(i * 1024 + j * 16, 1, 16)] = A[T.Ramp(i * 1024 + j * 16, 1, 16)] * tmp[T.Ramp(j * 16, 1, 16)]


@T.prim_func
def _halves(A: T.Buffer((1 << 20,)), B: T.Buffer((1 << 20,)), C: T.Buffer((1 << 20,))):
    for i in range(512):
        for j in range(64):  # a GLU's two halves of each 2048-float row: different regions
            B[T.Ramp(i * 1024 + j * 16, 1, 16)] = A[T.Ramp(i * 2048 + j * 16, 1, 16)]
        for j in range(64):
            C[T.Ramp(i * 1024 + j * 16, 1, 16)] = A[T.Ramp(i * 2048 + 1024 + j * 16, 1, 16)]


@T.prim_func
def _big_slices(A: T.Buffer((1 << 22,)), B: T.Buffer((1 << 22,)), C: T.Buffer((1 << 22,))):
    for i in range(4):
        for j in range(65536):  # two passes over a 4 MiB slice: the second is not cached
            B[T.Ramp(i * 1048576 + j * 16, 1, 16)] = A[T.Ramp(i * 1048576 + j * 16, 1, 16)]
        for j in range(65536):
            C[T.Ramp(i * 1048576 + j * 16, 1, 16)] = A[T.Ramp(i * 1048576 + j * 16, 1, 16)]


def test_a_second_pass_is_prefetched_unless_it_rereads_a_small_region():
    assert _offsets(_prefetched(_halves)) == [("A", 512), ("A", 512)]
    assert _offsets(_prefetched(_big_slices)) == [("A", 512), ("A", 512)]


@T.prim_func
def _run_of_rows(A: T.Buffer((4096 * 3072,), "float16"), B: T.Buffer((64,), "float64")):
    for k in range(512):  # a column sum adding a run of 8 rows a step (targets/sum_runs.py)
        B[T.Ramp(0, 1, 64)] = B[T.Ramp(0, 1, 64)] + T.Cast("float64x64", (
            (T.Cast("float32x64", A[T.Ramp(k * 24576, 1, 64)]) + T.Cast("float32x64", A[T.Ramp(k * 24576 + 3072, 1, 64)]))
            + (T.Cast("float32x64", A[T.Ramp(k * 24576 + 6144, 1, 64)]) + T.Cast("float32x64", A[T.Ramp(k * 24576 + 9216, 1, 64)])))
            + ((T.Cast("float32x64", A[T.Ramp(k * 24576 + 12288, 1, 64)]) + T.Cast("float32x64", A[T.Ramp(k * 24576 + 15360, 1, 64)]))
               + (T.Cast("float32x64", A[T.Ramp(k * 24576 + 18432, 1, 64)]) + T.Cast("float32x64", A[T.Ramp(k * 24576 + 21504, 1, 64)]))))


def test_the_reads_of_one_step_count_together():
    """The 8 rows of a run read 8 x 128 bytes a step: 2 KiB ahead is 2 steps (16 rows), not the
    16 steps (128 rows, 768 KiB, past L2) that one 128-byte read alone would ask for."""
    got = _offsets(_prefetched(_run_of_rows))  # offsets from row 0's read: row j's are j rows on
    assert sorted(off for _, off in got) == [(16 + j) * 3072 + 32 * m for j in range(8) for m in (0, 1)]


@T.prim_func
def _backwards(A: T.Buffer((65536,)), B: T.Buffer((65536,))):
    for i in range(4096):  # a reversed walk prefetches below the read
        B[T.Ramp(i * 16, 1, 16)] = A[T.Ramp(65520 - i * 16, 1, 16)]


@T.prim_func
def _two_far_rows(A: T.Buffer((1 << 24,)), B: T.Buffer((1 << 14,))):
    for j in range(1024):
        for i in range(2):  # 32 rows ahead of a 2-row walk is past everything read
            B[T.Ramp(i * 8192 + j * 8, 1, 8)] = A[T.Ramp(i * 8388608 + j * 8, 1, 8)]


def test_the_look_ahead_follows_the_sign_and_stays_within_the_nest():
    assert _offsets(_prefetched(_backwards)) == [("A", -512)]
    assert _prefetched(_two_far_rows) == []


@T.prim_func
def _bool_tiles(A: T.Buffer((1 << 20,), "bool"), B: T.Buffer((1 << 20,), "bool"), n: T.int32):
    for i in range(n):  # an extent isl's partial tiles leave symbolic, and 1-bit elements
        B[T.Ramp(i * 64, 1, 64)] = A[T.Ramp(i * 64, 1, 64)]


def test_bool_reads_under_symbolic_extents_get_a_prefetch_and_no_error():
    assert _offsets(_prefetched(_bool_tiles)) == [("A", 2048)]  # a byte per bool


def test_cached_reads_get_no_prefetch():
    # bias (4 KiB, read by every row), tmp (a local) and the second loop's A (this row, just
    # read by the first loop) stay in cache; only the first loop's A streams
    found = _prefetched(_reused)
    assert _offsets(found) == [("A", 512)]


@T.prim_func
def _gather(A: T.Buffer((65536,)), idx: T.Buffer((4096,), "int32"), B: T.Buffer((4096,))):
    for i in range(4096):  # a scalar read per element, and an indirect one: not prefetched
        B[i] = A[idx[i]] + A[i]


@T.prim_func
def _vector_gather(A: T.Buffer((1 << 20,)), idx: T.Buffer((4096,), "int32"), B: T.Buffer((65536,))):
    for i in range(4096):  # a vector at an address read from memory: not linear in i
        B[T.Ramp(i * 16, 1, 16)] = A[T.Ramp(idx[i], 1, 16)]


def test_scalar_and_indirect_reads_get_no_prefetch():
    assert _prefetched(_gather) == []
    assert _prefetched(_vector_gather) == []


def _graph():
    b = GraphBuilder("prefetch_softplus")
    x = b.input("x", (256, 1024), "float32")
    y = b.input("y", (256, 1024), "float32")
    b.output(b.log(b.exp(x) + 1.0) * y)
    return b.build()


@pytest.mark.parametrize("schedule", ["poly", "plain"])
def test_kernels_prefetch_by_default_and_match(schedule):
    g = _graph()
    on = akgpy.fuse(g, schedule=schedule)
    assert default_config().prefetch_bytes > 0
    assert "@llvm.prefetch" in on.kernels[0].source
    assert not check_program(g, on)
    off = akgpy.fuse(g, schedule=schedule, config=default_config().replace(prefetch_bytes=0))
    assert "@llvm.prefetch" not in off.kernels[0].source
    assert not check_program(g, off)
    if schedule == "poly":
        assert "software prefetch: 2048 bytes ahead" in on.kernels[0].explain()
        assert "software prefetch: none (off)" in off.kernels[0].explain()


def test_bad_distance_is_rejected():
    with pytest.raises(CompileError, match="prefetch_bytes"):
        default_config().replace(prefetch_bytes=-1)
    with pytest.raises(CompileError, match="prefetch_bytes"):
        default_config().replace(prefetch_bytes=1.5)


def _targets(func, distance=2048) -> list:
    """The index each prefetch the pass inserts reads ahead, as an expression in the loop vars."""
    out = prefetch_func(func.with_attr(PREFETCH_ATTR, distance))
    calls = []
    tvm_ffi.structural_walk(out.body, [(ir.Call, lambda c: calls.append(c) if c.op.name == "tirx.prefetch" else None)])
    # reads only (rw 0): address_of(buf[index]) -> buf[index]
    return [c.args[0].args[0] for c in calls if int(c.args[1].value) == 0]


def _same(exprs, wanted, func) -> bool:
    """Do the prefetched loads `exprs` read exactly `wanted` (buffer name, index as a function
    of the loop vars, outermost first)?"""
    loops = []
    tvm_ffi.structural_walk(func.body, [(tirx.For, loops.append)], order="pre")
    vs = [lp.loop_var for lp in loops]
    ana = Analyzer()
    got = [(e.source.name, e.indices[0]) for e in exprs]
    want = [(name, f(*vs)) for name, f in wanted]
    return len(got) == len(want) and all(
        gn == wn and ana.can_prove_equal(gi, wi) for (gn, gi), (wn, wi) in zip(got, want))


def _tile(row: int):
    """A register transpose's inner loop: 2 rows of `row` float16 a step of i, bound to
    variables and stored shuffled; the next step's rows start 2 * row elements on."""
    @T.prim_func
    def f(A: T.Buffer((1 << 22,), "float16"), B: T.Buffer((1 << 22,), "float16")):
        for i in range(1024):
            for j in range(row // 8):
                r0: T.let[T.float16x8] = A[T.Ramp(i * (2 * row) + j * 8, 1, 8)]
                r1: T.let[T.float16x8] = A[T.Ramp(i * (2 * row) + row + j * 8, 1, 8)]
                B[T.Ramp(i * (2 * row) + j * 16, 1, 16)] = T.Shuffle(
                    [r0, r1], [0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15])
    return f


_tile_rows = _tile(512)  # rows of 1 KiB
_tile_long_rows = _tile(2048)  # rows of 4 KiB: long enough for the hardware's prefetcher


@T.prim_func
def _tile_few_steps(A: T.Buffer((1 << 20,), "float16"), B: T.Buffer((1 << 20,), "float16")):
    for k in range(256):
        for i in range(2):  # 2 KiB ahead of 128-byte rows is 16 steps of i: past its 2
            for j in range(8):
                B[T.Ramp(k * 4096 + i * 64 + j * 8, 1, 8)] = A[T.Ramp(k * 4096 + i * 2048 + j * 8, 1, 8)]


@T.prim_func
def _computed_let(A: T.Buffer((1 << 20,)), W: T.Buffer((1 << 20,)), B: T.Buffer((1 << 20,), "float64")):
    T.func_attr({"tirx.noalias": True})
    for i in range(65536):  # a float64 sum's widened term, let-bound once for the stores of its halves
        x: T.let[T.float32x16] = A[T.Ramp(i * 16, 1, 16)] * T.Broadcast(T.float32(2), 16)
        y: T.let[T.float64x16] = T.Cast("float64x16", x * W[T.Ramp(i * 16, 1, 16)])  # through two lets
        B[T.Ramp(i * 16, 1, 8)] = T.Shuffle([y], [0, 1, 2, 3, 4, 5, 6, 7])
        B[T.Ramp(i * 16 + 8, 1, 8)] = T.Shuffle([y], [8, 9, 10, 11, 12, 13, 14, 15])


@T.prim_func
def _views(A: T.Buffer((1 << 20,)), B: T.Buffer((1 << 20,)), C: T.Buffer((1 << 20,))):
    T.func_attr({"tirx.noalias": True})
    A0 = T.decl_buffer((1 << 20,), data=A.data)  # flattening declares a view of A per loop nest
    A1 = T.decl_buffer((1 << 20,), data=A.data)
    for i in range(1024):
        for j in range(64):
            B[T.Ramp(i * 1024 + j * 16, 1, 16)] = A0[T.Ramp(i * 1024 + j * 16, 1, 16)] + T.Broadcast(T.float32(1), 16)
        for j in range(64):  # the same row through the other view: still cached
            C[T.Ramp(i * 1024 + j * 16, 1, 16)] = A1[T.Ramp(i * 1024 + j * 16, 1, 16)] * T.Broadcast(T.float32(2), 16)


def test_a_copy_of_short_rows_prefetches_the_next_step_of_the_loop_around_them():
    # each step reads 2 rows of 1 KiB that the next step does not continue (it starts 1024
    # elements on): 2 KiB ahead is the same rows one step of i later, not row r1 (read now)
    assert _same(_targets(_tile_rows), [("A", lambda i, j: i * 1024 + j * 8 + 1024),
                                        ("A", lambda i, j: i * 1024 + 512 + j * 8 + 1024)], _tile_rows)
    # at 8 KiB, 4 steps ahead
    assert _same(_targets(_tile_rows, 8192), [("A", lambda i, j: i * 1024 + j * 8 + 4096),
                                              ("A", lambda i, j: i * 1024 + 512 + j * 8 + 4096)], _tile_rows)


def test_long_rows_of_a_register_transpose_get_no_prefetch():
    assert _targets(_tile_long_rows) == []  # measured: 1.14-1.16x slower on yolo's 52 x 52 planes
    # a direct read of a copy keeps the rule along its innermost loop when the next run's step
    # lies past the loop around it
    assert _same(_targets(_tile_few_steps), [("A", lambda k, i, j: k * 4096 + i * 2048 + j * 8 + 1024)],
                 _tile_few_steps)


def _transposes():
    b = GraphBuilder("prefetch_transposes")
    for n in range(2):  # yolo's weight-gradient transposes: [N, 3, 3, C] -> [N, C, 3, 3]
        x = b.input(f"x{n}", (256, 3, 3, 512), "float16")
        b.output(b.transpose(x, (0, 3, 1, 2)))
    return b.build()


def test_register_transposes_prefetch_and_match():
    g = _transposes()
    prog = akgpy.fuse(g)
    assert "each tile (8 x 9) is transposed in registers" in prog.explain()
    assert "@llvm.prefetch" in prog.kernels[0].source
    assert not check_program(g, prog)
    off = akgpy.fuse(g, config=default_config().replace(prefetch_bytes=0))
    assert "@llvm.prefetch" not in off.kernels[0].source



def test_let_bound_reads_of_a_computation_are_prefetched_once_per_line():
    """The loads a computing store reaches through let-bound values count as its own (yolo's loss
    ~2380 binds its float64 term once for ten stores: 0.80x with them prefetched), each line once
    for all the stores that use it."""
    assert _same(_targets(_computed_let), [("A", lambda i: i * 16 + 512), ("W", lambda i: i * 16 + 512)],
                 _computed_let)


def test_a_region_read_through_another_view_of_the_same_argument_is_cached():
    assert _same(_targets(_views), [("A0", lambda i, j, _: i * 1024 + j * 16 + 512)], _views)

