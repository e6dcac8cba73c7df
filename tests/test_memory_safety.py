"""Generated kernels read and write only inside their arguments. Each case runs with every
argument fenced by no-access pages (akgpy.testing.run_fenced), in a child process, where a
fault is an exit status, not a lost test run. bench/corpus_fenced.py runs the whole corpus so."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

_CHILD = textwrap.dedent("""
    import sys
    import numpy as np
    import akgpy
    from akgpy import GraphBuilder
    from akgpy.reference import run
    from akgpy.testing import random_inputs, run_fenced

    dtype, schedule = sys.argv[1], sys.argv[2]

    def pad(b, x):  # head and tail on two dims: rows before the input's start and after its end
        return b.op("PadAkg", [x], (3, 7, 10, 64), dtype, head=[0, 1, 2, 0], tail=[0, 1, 1, 0], pad_val=0)

    cases = {
        "pad": pad,
        "transpose": lambda b, x: x.transpose((0, 3, 1, 2)),
        "broadcast_add": lambda b, x: x + b.input("y", (1, 5, 1, 64), dtype),
        "row_sum": lambda b, x: x.sum(axis=(3,)),
        "column_sum": lambda b, x: x.sum(axis=(0, 1, 2)),
        "reshape_exp": lambda b, x: b.exp(x.reshape((15, 448))),
    }
    for name, make in cases.items():
        b = GraphBuilder(name)
        b.output(make(b, b.input("x", (3, 5, 7, 64), dtype)))
        g = b.build()
        arrays = random_inputs(g)
        got = run_fenced(akgpy.fuse(g, schedule=schedule), arrays)
        want = run(g, arrays)
        tol = 1e-3 if dtype == "float16" else 1e-4
        assert all(np.allclose(a, w, rtol=tol, atol=tol) for a, w in zip(got, want)), name
        print(name, "ok", flush=True)
""")


@pytest.mark.parametrize("schedule", ["poly", "plain"])
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_kernels_touch_only_their_arguments(dtype, schedule):
    """PadAkg's source index is clamped into the input, but TVM's simplifier drops the clamp
    inside a Select's true value (it assumes the condition there), and a Select loads both
    values: the rows of the padding read past the input's ends (yolo's [32, 52, 52, 256] ->
    [32, 53, 53, 256] read 27 KB past its end, and crashed a long benchmark run)."""
    done = subprocess.run([sys.executable, "-c", _CHILD, dtype, schedule], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0 and done.stdout.count(" ok") == 6, (done.returncode, done.stdout,
                                                                      done.stderr[-2000:])
