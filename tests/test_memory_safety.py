"""Generated kernels read and write only inside their arguments. Each case runs with every
argument fenced by no-access pages (akgpy.testing.run_fenced), in a child process, where a
fault is an exit status, not a lost test run. bench/corpus_fenced.py runs the whole corpus so."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

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


def test_fenced_fuzz_runs_random_graphs(tmp_path):
    """bench/fuzz_fenced.py: random layout graphs under random schedule configs, fenced, in a
    child process; the summary counts every graph it drew."""
    tool = Path(__file__).resolve().parent.parent / "bench" / "fuzz_fenced.py"
    done = subprocess.run([sys.executable, str(tool), "--examples", "6", "--max-elements", str(1 << 16),
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout, done.stderr[-2000:])
    assert "6 graphs: 6 ok, 0 mismatched, 0 errors, 0 faulted" in done.stdout, done.stdout
    assert (tmp_path / "current.json").exists() and (tmp_path / "current.cfg").exists()


def test_run_fenced_fences_every_kernel_of_a_model(monkeypatch):
    """A ModelProgram calls its kernels directly (Kernel.unchecked), not through a Program's
    plans: run_fenced must fence those calls too, and put the entries back afterwards."""
    import numpy as np

    import akgpy
    from akgpy import GraphBuilder
    from akgpy.reference import run
    from akgpy.testing import Fence, random_inputs, run_fenced
    b = GraphBuilder("two_kernels", model=True)
    x = b.input("x", (6, 40))
    y = b.exp(-b.abs(x)).sum(axis=(1,), keepdims=True)
    z = b.op("Concat", [y, y], (12, 1), "float32", axis=0)
    b.output(b.tanh(z) * 2.0)
    g = b.build()
    prog = akgpy.fuse(g)
    kernels = [st.kernel for st in prog.steps if st.program is not None]
    assert len(kernels) >= 2, prog
    entries = [k.unchecked for k in kernels]
    fenced = []
    real = Fence.__call__
    monkeypatch.setattr(Fence, "__call__", lambda self, a: fenced.append(a.shape) or real(self, a))
    arrays = random_inputs(g)
    got = run_fenced(prog, arrays)
    assert len(fenced) == sum(len(k.params) for k in kernels)
    assert all(k.unchecked is e for k, e in zip(kernels, entries))
    assert all(np.allclose(a, w, rtol=1e-4, atol=1e-4) for a, w in zip(got, run(g, arrays)))


def test_check_program_shows_elements_a_kernel_leaves_unwritten():
    """relu(x - 2) is all zeros on the test inputs ([0.5, 1.5)), which is what fresh memory
    holds: a kernel writing nothing passed a check of one call. check_program poisons the
    first call's outputs and checks the second's, which get the same buffers."""
    import akgpy
    from akgpy import GraphBuilder
    from akgpy.testing import check_program

    b = GraphBuilder("relu_shift")
    b.output(b.relu(b.input("x", (64, 128)) - 2.0))
    g = b.build()
    prog = akgpy.fuse(g)
    assert not check_program(g, prog)
    prog._plans = [(lambda *args: None, plan) for _, plan in prog._plans]  # a kernel that writes nothing
    bad = check_program(g, prog)
    assert bad and bad[0].bad == 64 * 128, bad
