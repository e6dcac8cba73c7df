"""One thread pool (issue 51): akgpy kernels on the process's OpenMP threads (runtime/launcher.py),
which under torch are torch's intra-op threads. Checks that need a fresh process (thread counts,
which libgomp is mapped, a launcher that cannot be built) run in a subprocess, so no other test's
pools interfere."""
from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import akgpy
from akgpy.graph.builder import GraphBuilder
from akgpy.reference import run as reference
from akgpy.runtime import launcher
from akgpy.runtime.artifact import with_launcher

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

try:
    launcher.library()
    BUILT = None
except launcher.LauncherError as e:  # no C compiler with OpenMP here: only the error tests run
    BUILT = str(e)
needs_launcher = pytest.mark.skipif(BUILT is not None, reason=f"OpenMP launcher not buildable: {BUILT}")


def _subprocess(code: str, **env) -> dict:
    """Run `code` in a fresh interpreter (2 OpenMP threads, the cache off); its last stdout line
    is JSON."""
    full = dict(os.environ, PYTHONPATH=REPO, OMP_NUM_THREADS="2", TVM_NUM_THREADS="2", AKGPY_CACHE="off", **env)
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=full,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def _graph():
    gb = GraphBuilder("pool_mul_add")
    x = gb.input("x", (256, 4096), "float32")
    y = gb.input("y", (256, 4096), "float32")
    gb.output((x * y + x).sum(axis=(1,)))
    return gb.build()


@needs_launcher
def test_openmp_kernel_matches_reference_on_two_threads():
    out = _subprocess("""
        import json, numpy as np, akgpy
        from akgpy.runtime import launcher
        from akgpy.runtime.artifact import with_launcher
        from akgpy.reference import run
        from tests.test_thread_pool import _graph
        g = _graph()
        prog = with_launcher(akgpy.fuse(g), "openmp")
        rng = np.random.default_rng(0)
        xs = [rng.standard_normal((256, 4096), dtype=np.float32) for _ in range(2)]
        before = launcher.stats().launches
        got = prog(*xs)[0]
        want = run(g, xs)[0]
        s = launcher.stats()
        print(json.dumps({"err": float(np.max(np.abs(got - want) / (1e-4 + 1e-4 * np.abs(want)))),
                          "launches": s.launches - before, "team": s.team, "distinct": s.distinct_threads,
                          "max": launcher.max_threads()}))
    """)
    assert out["err"] <= 1.0, out
    assert out["launches"] >= 1, out  # the kernel's parallel loop went through the OpenMP launcher
    assert out["max"] == 2 and out["team"] == 2 and out["distinct"] == 2, out


@needs_launcher
def test_program_and_model_with_launcher_in_process():
    g = _graph()
    prog = akgpy.fuse(g)
    rng = np.random.default_rng(1)
    xs = [rng.standard_normal((256, 4096), dtype=np.float32) for _ in range(2)]
    want = reference(g, xs)[0]
    for launcher_name in ("openmp", "tvm"):
        other = with_launcher(prog, launcher_name)
        np.testing.assert_allclose(other(*xs)[0], want, rtol=1e-4, atol=1e-4)
        assert other.kernels[0].unchecked._lib.launcher == launcher_name
    # the restored kernels still show the code they run
    assert "for" in with_launcher(prog, "openmp").kernels[0].tir


def test_unknown_launcher_is_refused():
    with pytest.raises(launcher.LauncherError, match="unknown parallel launcher 'threads'.*'tvm', 'openmp'"):
        with_launcher(akgpy.fuse(_graph()), "threads")


_LAMBDA = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)


class _Env(ctypes.Structure):  # TVMParallelGroupEnv
    _fields_ = [("sync_handle", ctypes.c_void_p), ("num_task", ctypes.c_int32)]


@needs_launcher
def test_launch_honours_and_refuses_task_counts():
    seen, lock = [], threading.Lock()

    @_LAMBDA
    def body(task, penv, cdata):
        with lock:
            seen.append((task, ctypes.cast(penv, ctypes.POINTER(_Env)).contents.num_task))
        return 0

    most = launcher.max_threads()
    for asked, tasks in ((0, most), (1, 1), (most, most)):
        seen.clear()
        launcher.launch(ctypes.cast(body, ctypes.c_void_p).value, None, asked)
        assert sorted(seen) == [(t, tasks) for t in range(tasks)], (asked, seen)
    for bad in (-1, most + 1):
        with pytest.raises(launcher.LauncherError, match=f"parallel launch of {bad} tasks: the OpenMP launcher "
                                                         f"runs 1 to {most}"):
            launcher.launch(ctypes.cast(body, ctypes.c_void_p).value, None, bad)


@needs_launcher
def test_failing_task_is_an_error():
    @_LAMBDA
    def body(task, penv, cdata):
        return -7 if task == 0 else 0

    with pytest.raises(launcher.LauncherError, match="a parallel task of the kernel failed"):
        launcher.launch(ctypes.cast(body, ctypes.c_void_p).value, None, 0)


@needs_launcher
def test_barrier_holds_every_task():
    events, lock = [], threading.Lock()
    barrier = launcher.library().akgpy_omp_parallel_barrier
    barrier.argtypes = [ctypes.c_int, ctypes.c_void_p]

    @_LAMBDA
    def body(task, penv, cdata):
        with lock:
            events.append("before")
        barrier(task, penv)
        with lock:
            events.append("after")
        return 0

    launcher.launch(ctypes.cast(body, ctypes.c_void_p).value, None, 0)
    n = launcher.max_threads()
    assert events == ["before"] * n + ["after"] * n


def test_launcher_that_cannot_be_built(tmp_path):
    # a C compiler without OpenMP (TVM's export still links with it)
    cc = tmp_path / "cc-without-openmp"
    cc.write_text('#!/bin/sh\nfor a in "$@"; do [ "$a" = -fopenmp ] && { echo "unsupported option -fopenmp" >&2; '
                  'exit 1; }; done\nexec cc "$@"\n')
    cc.chmod(0o755)
    out = _subprocess("""
        import json, numpy as np, akgpy
        from akgpy.runtime import launcher
        from akgpy.runtime.artifact import with_launcher
        from tests.test_thread_pool import _graph
        prog = akgpy.fuse(_graph())
        msgs = []
        for _ in range(2):  # the reason is kept: the second try says the same, without rebuilding
            try:
                with_launcher(prog, "openmp")
            except launcher.LauncherError as e:
                msgs.append(str(e))
        print(json.dumps(msgs))
    """, CC=str(cc))
    assert len(out) == 2 and out[0] == out[1], out
    assert "cannot build the OpenMP launcher" in out[0] and "unsupported option -fopenmp" in out[0], out
    assert "launcher='tvm'" in out[0], out


_TORCH_THREADS = """
    import json, os, torch
    torch.set_num_threads(2)
    from akgpy.runtime import launcher
    from akgpy.torch.backend import akgpy_backend

    def threads():
        return len(os.listdir("/proc/self/task"))

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256), torch.nn.ReLU())
    x, a = torch.randn(128, 256), torch.randn(512, 512)
    for _ in range(5):
        a @ a  # torch's intra-op pool started
    with torch.no_grad():
        want = model(x)
    # AOTAutograd starts a thread of its own at its first compile, with any backend: one
    # compile that runs no akgpy kernel first, so the count below sees only what akgpy adds
    from torch._dynamo.backends.common import aot_autograd
    plain = torch.compile(torch.nn.Linear(8, 8), backend=aot_autograd(fw_compiler=lambda gm, _: gm.forward))
    with torch.no_grad():
        plain(torch.randn(2, 8))
    torch_only = threads()
    fast = torch.compile(model, backend=akgpy_backend)
    with torch.no_grad():
        for _ in range(5):
            got = fast(x)
            a @ a
    after = threads()
    maps = open("/proc/self/maps").read()
    gomp = sorted({l.split()[-1] for l in maps.splitlines() if "libgomp" in l.rsplit("/", 1)[-1]})
    out = {"torch_only": torch_only, "after": after, "launches": launcher.stats().launches,
           "err": float((got - want).abs().max()), "gomp": gomp}
    print(json.dumps(out))
"""


@needs_launcher
def test_thread_count_does_not_grow_under_torch():
    pytest.importorskip("torch")
    out = _subprocess(_TORCH_THREADS)
    assert out["err"] < 1e-4, out
    assert out["launches"] > 0, out  # the compiled model's kernels ran on the OpenMP launcher
    assert out["after"] <= out["torch_only"], out
    assert len(out["gomp"]) == 1, out  # one OpenMP runtime in the process: torch's


@needs_launcher
def test_thread_count_grows_with_tvm_pool():
    """The same check is not vacuous: a parallel kernel on TVM's pool after torch ops starts threads."""
    pytest.importorskip("torch")
    out = _subprocess("""
        import json, os, torch, numpy as np, akgpy
        torch.set_num_threads(2)
        from akgpy.runtime.artifact import with_launcher
        from tests.test_thread_pool import _graph
        a = torch.randn(512, 512)
        for _ in range(5):
            a @ a
        progs = {l: with_launcher(akgpy.fuse(_graph()), l) for l in ("openmp", "tvm")}
        xs = [np.ones((256, 4096), np.float32)] * 2
        counts = {}
        for name in ("openmp", "tvm"):
            for _ in range(3):
                progs[name](*xs)
                a @ a
            counts[name] = len(os.listdir("/proc/self/task"))
        print(json.dumps(counts))
    """)
    assert out["tvm"] > out["openmp"], out
