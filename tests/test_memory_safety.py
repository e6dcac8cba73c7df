"""Generated kernels read only inside their arguments. Each case places every input right
before a page the process may not touch (and right after one), so a read past either end
faults; it runs in a child process, where a fault is an exit status, not a lost test run."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

_CHILD = textwrap.dedent("""
    import ctypes, mmap, sys
    import numpy as np
    import akgpy
    from akgpy import GraphBuilder
    from akgpy.reference import run
    from akgpy.runtime.program import aligned_empty

    dtype, schedule = sys.argv[1], sys.argv[2]
    PAGE = mmap.PAGESIZE
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    keep = []

    def fenced(a):
        # a copy of `a` that ends where a page with no access begins, after another such page
        n = -(-a.nbytes // PAGE) * PAGE
        m = mmap.mmap(-1, n + 2 * PAGE)
        keep.append(m)
        base = ctypes.addressof(ctypes.c_char.from_buffer(m))
        for at in (base, base + PAGE + n):
            assert libc.mprotect(at, PAGE, 0) == 0, ctypes.get_errno()
        out = np.frombuffer(m, a.dtype, a.size, PAGE + n - a.nbytes).reshape(a.shape)
        out[...] = a
        return out

    b = GraphBuilder("pad_fenced")
    x = b.input("x", (3, 5, 7, 64), dtype)
    b.output(b.op("PadAkg", [x], (3, 7, 10, 64), dtype, head=[0, 1, 2, 0], tail=[0, 1, 1, 0], pad_val=0))
    g = b.build()
    prog = akgpy.fuse(g, schedule=schedule)
    arr = np.random.default_rng(0).standard_normal(g.tensors["x"].shape).astype(dtype)
    k = prog.kernels[0]
    got = aligned_empty(g.tensors[g.outputs[0]].shape, dtype)
    k.unchecked(fenced(arr), got)
    want = run(g, [arr])[0]
    assert np.array_equal(got, want)
    print("ok")
""")


@pytest.mark.parametrize("schedule", ["poly", "plain"])
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_pad_reads_only_inside_its_input(dtype, schedule):
    """PadAkg's source index is clamped into the input, but TVM's simplifier drops the clamp
    inside a Select's true value (it assumes the condition there), and a Select evaluates both
    values: the rows of the padding read past the input's ends (yolo's [32, 52, 52, 256] ->
    [32, 53, 53, 256] read 27 KB past its end, and crashed a long benchmark run)."""
    done = subprocess.run([sys.executable, "-c", _CHILD, dtype, schedule], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), (done.returncode, done.stderr[-2000:])
