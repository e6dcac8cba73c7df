"""The calling convention of a compiled Program: argument order, in-place writes, copies for
misaligned or strided arrays, DLPack inputs, complex64, dumps."""
from __future__ import annotations

import numpy as np
import pytest

import akgpy
from akgpy import GraphBuilder
from akgpy.errors import ArgumentError
from akgpy.runtime.program import ALIGN, aligned_empty
from akgpy.testing import check_program


def misaligned(a: np.ndarray, offset_bytes: int = 4) -> np.ndarray:
    raw = np.zeros(a.nbytes + 2 * ALIGN, np.uint8)
    start = (-raw.ctypes.data) % ALIGN + offset_bytes
    out = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    assert out.ctypes.data % ALIGN != 0  # numpy calls it aligned only when offset_bytes is a multiple of the itemsize
    return out


def _axpy(n=1000):
    b = GraphBuilder("axpy")
    x = b.input("x", (n,), "float32")
    y = b.input("y", (n,), "float32")
    b.output(x * 2.0 + y)
    return b.build()


def test_misaligned_and_strided_inputs_are_right_not_crashed():
    g = _axpy()
    prog = akgpy.fuse(g)
    x = np.arange(1000, dtype=np.float32)
    y = np.ones(1000, np.float32)
    want = x * 2 + y
    (out,) = prog(misaligned(x), misaligned(y, 8))
    np.testing.assert_array_equal(out, want)
    strided = np.zeros(2000, np.float32)
    strided[::2] = x
    (out,) = prog(strided[::2], y)
    np.testing.assert_array_equal(out, want)
    ro = x.copy()
    ro.flags.writeable = False
    (out,) = prog(ro, y)
    np.testing.assert_array_equal(out, want)


def test_dlpack_input():
    g = _axpy(64)
    prog = akgpy.fuse(g)
    x = aligned_empty((64,), "float32")
    x[...] = np.arange(64)

    class OnlyDLPack:  # a foreign tensor: akgpy sees nothing but the DLPack protocol
        def __init__(self, a): self.a = a
        def __dlpack__(self, **kw): return self.a.__dlpack__(**kw)
        def __dlpack_device__(self): return self.a.__dlpack_device__()

    (out,) = prog(OnlyDLPack(x), np.zeros(64, np.float32))
    np.testing.assert_array_equal(out, np.arange(64, dtype=np.float32) * 2)


def test_wrong_arguments_raise_akgpy_errors():
    prog = akgpy.fuse(_axpy(16))
    x = np.zeros(16, np.float32)
    with pytest.raises(ArgumentError, match="takes 2 inputs"):
        prog(x)
    with pytest.raises(ArgumentError, match="dtype") as e:
        prog(x.astype(np.float16), x)
    assert e.value.tensor == "x"
    with pytest.raises(ArgumentError, match="shape") as e:
        prog(x, np.zeros(17, np.float32))
    assert e.value.tensor == "y"
    with pytest.raises(ArgumentError):
        prog(x, object())


def test_kernel_func_checks_each_array_and_the_machine_code_checks_none():
    """The generated code carries no argument checks (targets/llvm.py leaves TVM's asserts
    out: they were most of the compile time of graphs with many inputs), so Kernel.func checks
    count, dtype, shape and layout itself; a misaligned array used to crash the kernel."""
    prog = akgpy.fuse(_axpy(1000))
    k = prog.kernels[0]
    assert "on argument #" not in k.source  # TVM's assert messages ("Mismatched x.dtype on argument #0")
    x, y, out = (aligned_empty((1000,), "float32") for _ in range(3))
    x[...], y[...] = np.arange(1000), 1.0
    k.func(x, y, out)
    np.testing.assert_array_equal(out, np.arange(1000, dtype=np.float32) * 2 + 1)
    with pytest.raises(ArgumentError, match="takes 3 arrays"):
        k.func(x, y)
    bad = [(misaligned(x, 2), "x", "aligned"), (x.astype(np.float64), "x", "expects float32"),
           (x[:999], "x", "expects float32"), (3, "x", "expects float32"), (out[::-1], "add", "aligned")]
    for a, tensor, message in bad:
        args = [a, y, out] if tensor == "x" else [x, y, a]
        with pytest.raises(ArgumentError, match=message) as e:
            k.func(*args)
        assert e.value.tensor.startswith(tensor)
    ro = aligned_empty((1000,), "float32")
    ro.flags.writeable = False
    with pytest.raises(ArgumentError, match="writable"):
        k.func(x, y, ro)


@pytest.mark.parametrize("aligned", [True, False])
def test_inplace_target_read_at_another_index(aligned):
    """t <- transpose(t) + 1, reading t at another index than the one written: a kernel that
    got t's buffer as both input and output would read already-overwritten values. A
    misaligned t goes through copies, and what reads t after the write still sees the new value."""
    n = 16
    b = GraphBuilder("transpose_inplace")
    t = b.input("t", (n, n), "float32")
    tripled = t * 3.0
    val = t.transpose(1, 0) + 1.0
    d = b.inplace_assign(t, val, tripled, fake_output=False)
    b.output(d, t * 2.0)  # the second output reads t after the write: sees the new value
    g = b.build()
    prog = akgpy.fuse(g)
    data = np.arange(n * n, dtype=np.float32).reshape(n, n)
    arr = aligned_empty((n, n), "float32")
    arr[...] = data
    if not aligned:
        arr = misaligned(arr)
    out_d, out_2 = prog(arr)
    new = data.T + 1
    np.testing.assert_array_equal(arr, new)
    np.testing.assert_array_equal(out_d, data * 3)
    np.testing.assert_array_equal(out_2, new * 2)
    ref_in = [data.copy()]
    ref_d, ref_2 = akgpy.reference.run(g, ref_in)
    np.testing.assert_array_equal(ref_in[0], new)
    np.testing.assert_array_equal(ref_d, data * 3)
    np.testing.assert_array_equal(ref_2, new * 2)


def test_inplace_into_misaligned_and_fake_output():
    n = 100
    b = GraphBuilder("acc")
    acc = b.input("acc", (1,), "float32")
    x = b.input("x", (n,), "float32")
    s = b.reduce_sum(x * x, axis=0, keepdims=True)
    fake = b.inplace_assign(acc, s, s, fake_output=True)
    b.output(fake, x + 1.0)
    g = b.build()
    prog = akgpy.fuse(g)
    xv = np.linspace(0, 1, n, dtype=np.float32)
    target = misaligned(np.zeros(1, np.float32))
    outs = prog(target, xv)
    assert len(outs) == 1, "fake outputs are not returned"
    np.testing.assert_allclose(outs[0], xv + 1, rtol=1e-6)
    np.testing.assert_allclose(target, [np.sum(xv.astype(np.float64) ** 2)], rtol=1e-5)


def test_complex64_in_and_out():
    b = GraphBuilder("cplx")
    re = b.input("re", (8, 4), "float32")
    im = b.input("im", (8, 4), "float32")
    z = b.op("Complex", [re, im], (8, 4), "complex64")
    b.output(z)
    zr = b.op("CReal", [z], (8, 4), "float32")
    b.output(zr * 2.0)
    g = b.build()
    prog = akgpy.fuse(g)
    r = np.random.default_rng(0).random((8, 4), dtype=np.float32)
    i = np.random.default_rng(1).random((8, 4), dtype=np.float32)
    zo, twice = prog(r, i)
    assert zo.dtype == np.complex64 and zo.shape == (8, 4)
    np.testing.assert_array_equal(zo, r + 1j * i)
    np.testing.assert_array_equal(twice, r * 2)

    b = GraphBuilder("cplx_in")
    z = b.input("z", (5,), "complex64")
    b.output(b.op("CImag", [z], (5,), "float32"))
    zin = (np.arange(5) + 1j * np.arange(5, 10)).astype(np.complex64)
    (im_out,) = akgpy.fuse(b.build())(zin)
    np.testing.assert_array_equal(im_out, np.arange(5, 10, dtype=np.float32))
    (im_out,) = akgpy.fuse(b.build())(misaligned(zin, 8))
    np.testing.assert_array_equal(im_out, np.arange(5, 10, dtype=np.float32))


def test_program_exposes_kernels_and_source():
    prog = akgpy.fuse(_axpy(32))
    assert len(prog.kernels) == 1
    k = prog.kernels[0]
    assert k.name == "axpy"
    assert "define" in k.source  # LLVM IR
    assert "T.parallel" in k.tir or "T.vectorized" in k.tir
    assert "axpy" in prog.source()


def test_explain_shows_path_dependences_and_tree():
    b = GraphBuilder("softmax_rows")
    x = b.input("x", (64, 128))
    e = b.exp(x - x.max(axis=1, keepdims=True))
    b.output(e / e.sum(axis=1, keepdims=True))
    for schedule, path in [("poly", "schedule path: poly/isl-ast"), ("plain", "schedule path: plain")]:
        text = akgpy.fuse(b.build(), schedule=schedule).explain()
        assert path in text
        assert "== dependences" in text and "RAW" in text
        assert "schedule tree" in text and "band" in text
        assert "T.parallel" in text


def test_dump_switch(tmp_path, monkeypatch):
    monkeypatch.setenv("AKGPY_DUMP", str(tmp_path))
    akgpy.fuse(_axpy(32))
    files = sorted(p.name for p in (tmp_path / "axpy").iterdir())
    assert files == ["0_graph.txt", "1_te.py", "2_scheduled.py", "3_source.ll", "4_explain.txt"]
    assert "schedule tree" in (tmp_path / "axpy" / "4_explain.txt").read_text()
    assert "define" in (tmp_path / "axpy" / "3_source.ll").read_text()


def test_output_buffers_are_recycled_only_after_the_caller_dropped_them():
    import numpy as np
    b = akgpy.GraphBuilder("pool")
    x = b.input("x", (512, 1024))
    b.output(x * 2.0)
    prog = akgpy.fuse(b.build())
    a = np.ones((512, 1024), np.float32)
    first = prog(a)[0]
    kept_ptr = first.ctypes.data
    second = prog(a * 3)[0]  # `first` is alive: a new buffer, `first` untouched
    assert second.ctypes.data != kept_ptr and (first == 2.0).all() and (second == 6.0).all()
    del first
    third = prog(a)[0]  # `first` was dropped: its (already mapped) memory comes back
    assert third.ctypes.data == kept_ptr and (third == 2.0).all() and (second == 6.0).all()


def test_every_output_of_one_size_is_recycled(monkeypatch):
    """Four outputs of one size: after the first calls, no call allocates (two kept per size
    re-allocated two buffers a call: 40 MB ones were fresh mmaps, 19.3 -> 12.7 ms a call)."""
    from akgpy.runtime.program import OutputPool
    made = []
    real = OutputPool._new
    monkeypatch.setattr(OutputPool, "_new", staticmethod(lambda n: made.append(n) or real(n)))
    b = akgpy.GraphBuilder("four")
    x = b.input("x", (512, 1024))
    b.output(x + 1.0, x * 2.0, x - 3.0, -x)
    prog = akgpy.fuse(b.build())
    a = np.ones((512, 1024), np.float32)
    out = None
    for _ in range(3):  # the caller still holds the last results while it calls again
        out = prog(a)
    assert len(made) == 8 and [float(o[0, 0]) for o in out] == [2.0, 2.0, -2.0, -1.0]
    for _ in range(3):
        out = prog(a)
    del out
    for _ in range(3):
        prog(a)
    assert len(made) == 8


def test_a_dropped_output_array_is_handed_out_again_and_a_held_one_never_is():
    """A call returns the previous call's arrays that nobody references any more (no pool pass,
    no new views: ~80-100 us a call after cold caches on bert ~4253); an output the caller
    still holds, directly, through a view or through torch, is never written again."""
    b = akgpy.GraphBuilder("reuse")
    x = b.input("x", (512, 1024))
    b.output(x * 2.0, x + 1.0)
    prog = akgpy.fuse(b.build())
    a = np.ones((512, 1024), np.float32)
    first = prog(a)
    ids = [id(o) for o in first]
    del first
    second = prog(a * 3)
    assert [id(o) for o in second] == ids and float(second[0][0, 0]) == 6.0 and float(second[1][0, 0]) == 4.0
    view = second[0][:2]  # a view keeps output 0 in use; output 1 is dropped
    del second
    third = prog(a)
    assert id(third[0]) != ids[0] and id(third[1]) == ids[1]
    assert (view == 6.0).all() and (third[0] == 2.0).all() and (third[1] == 2.0).all()


def test_concurrent_calls_never_share_an_output():
    """Two threads calling one program: each result is its own input's, never the other's."""
    import threading
    b = akgpy.GraphBuilder("threads")
    x = b.input("x", (256, 1024))
    b.output(x * 2.0)
    prog = akgpy.fuse(b.build())
    bad = []

    def work(v):
        a = np.full((256, 1024), v, np.float32)
        for _ in range(30):
            out, = prog(a)
            if not (out == 2 * v).all():
                bad.append(v)
            del out
    threads = [threading.Thread(target=work, args=(v,)) for v in (1.0, 5.0, 9.0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


def test_an_input_is_read_where_it_is_whatever_its_memory_becomes():
    """Nothing about an input array is remembered between calls: one whose memory __setstate__
    replaced (found by review when the runtime remembered pointers) is read at its new memory."""
    b = akgpy.GraphBuilder("memo")
    x = b.input("x", (64, 256))
    b.output(x * 2.0)
    prog = akgpy.fuse(b.build())
    a = aligned_empty((64, 256), np.float32)
    a[:] = 1.0
    for _ in range(3):
        assert (prog(a)[0] == 2.0).all()
    raw = aligned_empty((64 * 256 + 16,), np.float32)
    shifted = raw[1:1 + 64 * 256].reshape(64, 256)  # 4 bytes off the 64-byte boundary
    shifted[:] = 3.0
    assert (prog(shifted)[0] == 6.0).all()
    for v in (4.0, 5.0):
        a.__setstate__((1, (64, 256), np.dtype(np.float32), False, np.full(64 * 256, v, np.float32).tobytes()))
        assert (prog(a)[0] == 2 * v).all()
    assert "copies: none" in prog.report()


@pytest.mark.parametrize("change", ["readonly", "shape", "dtype", "memory"])
@pytest.mark.parametrize("rows", [64, 512])  # under and over the pool's MIN_BYTES
def test_a_dropped_output_changed_in_place_is_not_handed_out_again(change, rows):
    """The same array object comes back to the caller only as it was made: one the caller made
    read-only, reshaped, viewed as another dtype or gave other memory before dropping it would
    break every later call (found by review: DLPack refused the read-only one)."""
    b = akgpy.GraphBuilder("changed")
    x = b.input("x", (rows, 1024))
    b.output(x * 2.0)
    prog = akgpy.fuse(b.build())
    a = np.ones((rows, 1024), np.float32)
    y, = prog(a)
    if change == "readonly":
        y.flags.writeable = False
    elif change == "shape":
        y.shape = (-1,)
    elif change == "dtype":
        y.dtype = np.int32
    else:
        y.__setstate__((1, (rows, 1024), np.dtype(np.float32), False, bytes(rows * 1024 * 4)))
    del y
    for k in (3.0, 5.0):
        out, = prog(a * k)
        assert out.shape == (rows, 1024) and out.dtype == np.float32 and (out == 2 * k).all()
        del out


@pytest.mark.parametrize("schedule", ["poly", "plain"])
def test_graph_returning_an_input_unchanged_copies_it(schedule):
    """No ops at all (a random-graph test drew one): the output is a copy, not the caller's array."""
    b = GraphBuilder("identity")
    x = b.input("x", (3, 5))
    b.output(x)
    g = b.build()
    prog = akgpy.fuse(g, schedule=schedule)
    a = np.arange(15, dtype=np.float32).reshape(3, 5)
    out, = prog(a)
    assert out is not a and np.array_equal(out, a)
    assert not check_program(g, prog)


@pytest.mark.parametrize("missing,want", [((), 64), (("avx512bw",), 32), (("avx512f", "avx512bw", "avx512vl"), 32)])
def test_vector_width_comes_from_the_cpu_features_not_its_name(monkeypatch, missing, want):
    """A Xeon VM that LLVM names "rocketlake" has AVX-512: the width follows LLVM's feature set
    for the host CPU, and 512-bit lanes need the byte/word forms (BW) and short forms (VL) too."""
    import tvm
    from akgpy import target as tg
    have = {"sse2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl"} - set(missing)
    monkeypatch.setattr(tvm.target.codegen, "llvm_get_cpu_features", lambda tgt: have)
    monkeypatch.setattr(tg, "_host_cpu", lambda: "rocketlake")
    caches = (tg._features, tg._host)
    for c in caches:
        c.cache_clear()
    try:
        assert tg.resolve_target(None).vector_bytes == want
        assert tg.resolve_target({"kind": "llvm", "mcpu": "rocketlake"}).vector_bytes == want
    finally:  # the real host's values again, not the mocked ones
        for c in caches:
            c.cache_clear()


def test_large_buffers_start_at_staggered_page_offsets():
    """Buffers of a page or more (outputs, input copies, pool buffers) start at offsets within a
    page that are multiples of 256 and differ from one buffer to the next, so that no output
    starts 32-128 bytes past another buffer's page offset (the loads behind its stores stall:
    5-9x slower on Zen 3) and streams do not share their L1 sets; small ones stay 64-aligned."""
    from akgpy.runtime.program import PAGE, STAGGER, OutputPool
    offsets = [aligned_empty((1024,), np.float32).ctypes.data % PAGE for _ in range(PAGE // STAGGER)]
    assert all(o % STAGGER == 0 for o in offsets) and len(set(offsets)) == PAGE // STAGGER
    pool = OutputPool()
    bufs = pool.take_all([((1 << 18,), np.float32, 1 << 20)] * 4)
    offs = [b.ctypes.data % PAGE for b in bufs]
    assert all(o % STAGGER == 0 for o in offs) and len(set(offs)) == 4
    small = [aligned_empty((7,), np.float32) for _ in range(8)]
    assert all(s.ctypes.data % ALIGN == 0 for s in small)
    b = akgpy.GraphBuilder("three")
    x = b.input("x", (256, 1024))
    b.output(x + 1.0, x * 2.0, x - 3.0)
    prog = akgpy.fuse(b.build())
    outs = prog(np.ones((256, 1024), np.float32))
    offs = {o.ctypes.data % PAGE for o in outs}
    assert len(offs) == 3 and all(o % STAGGER == 0 for o in offs)
