"""Per-kernel A/B of akgpy against MindSpore's bundled AKG on the kernels MindSpore asks for.

Both compilers build the same `<op>.info` into a library with the same calling convention
(docs/kernel_meta.md), so each pair is timed in one process on the same arrays: a C loop calls
the kernel back to back (after one warm-up call) through a launcher like MindSpore's (an OpenMP
region of omp_get_max_threads() threads), with array addresses 16 bytes past a cache line, as
MindSpore's allocator hands them out. The bundled AKG's kernels come from running each zoo network
once under stock MindSpore (runner.run_network, mode "bundled"); akgpy's are built from the same
requests with `build_kernel_meta`'s defaults.

    python bench/bench_mindspore_kernels.py [--threads 1 2] [--out bench/results/mindspore_kernels.md]
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

TIMER = r"""
#include <omp.h>
#include <time.h>
typedef int (*task_fn)(int, int, void *);
int launch(task_fn f, void *cdata, int nthreads) {
  (void)nthreads;
  int n = omp_get_max_threads();
#pragma omp parallel num_threads(n)
  { f(omp_get_thread_num(), n, cdata); }
  return 0;
}
typedef int (*kernel_fn)(void **);
double ns_per_call(kernel_fn f, void **args, int n) {
  struct timespec a, b;
  f(args);
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (int i = 0; i < n; ++i) f(args);
  clock_gettime(CLOCK_MONOTONIC, &b);
  return ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / n;
}
"""


def _timer(workdir: Path) -> ctypes.CDLL:
    src, lib = workdir / "timer.c", workdir / "libtimer.so"
    src.write_text(TIMER)
    subprocess.run(["cc", "-O2", "-fPIC", "-shared", "-fopenmp", "-o", str(lib), str(src)], check=True)
    t = ctypes.CDLL(str(lib))
    t.ns_per_call.restype = ctypes.c_double
    return t


def _framework_array(a: np.ndarray) -> np.ndarray:
    """A copy of `a` 16 bytes past a 64-byte boundary."""
    raw = np.empty(a.nbytes + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + 16
    out = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


def _time(timer, lib_path: Path, meta: dict, ptrs, calls: int, repeats: int) -> float:
    lib = ctypes.CDLL(str(lib_path), mode=ctypes.RTLD_LOCAL)
    fn = ctypes.cast(getattr(lib, meta["kernelName"]), ctypes.c_void_p)
    return min(timer.ns_per_call(fn, ptrs, calls) for _ in range(repeats)) / 1e3


def measure(network: str, threads: int, work: Path, calls: int, repeats: int) -> list[dict]:
    """One row per kernel of `network`, timed at `threads` OpenMP threads (this process's own
    setting: run one thread count per process)."""
    import akgpy
    from akgpy.kernel_meta import build_kernel_meta
    from akgpy.mindspore.runner import run_network
    from akgpy.testing import random_inputs
    bundled = work / f"{network}_bundled"
    if not (bundled / "akg_kernel_meta").is_dir():
        run_network(network, "bundled", 3, bundled, timeout=900)
    meta_dir = bundled / "akg_kernel_meta"
    ours = work / f"{network}_akgpy"
    timer = _timer(work)
    libc = ctypes.CDLL(None)
    callbacks = (ctypes.c_void_p * 4)(ctypes.cast(timer.launch, ctypes.c_void_p).value,
                                      ctypes.cast(libc.malloc, ctypes.c_void_p).value,
                                      ctypes.cast(libc.free, ctypes.c_void_p).value, None)
    rows = []
    for info in sorted(meta_dir.glob("*.info")):
        op = info.stem
        if not (meta_dir / f"{op}.so").exists():
            continue
        g = akgpy.load_composite(info)
        if not (ours / f"{op}.json").exists():
            build_kernel_meta(g, ours)
        inputs = [_framework_array(a) for a in random_inputs(g, 0)]
        outputs = [_framework_array(np.zeros(g.tensors[t].shape, akgpy.dtypes.to_numpy(g.tensors[t].dtype)))
                   for t in g.outputs]
        ptrs = (ctypes.c_void_p * (1 + len(inputs) + len(outputs)))(
            ctypes.addressof(callbacks), *[a.ctypes.data for a in inputs], *[o.ctypes.data for o in outputs])
        mine = json.loads((ours / f"{op}.json").read_text())
        theirs = json.loads((meta_dir / f"{op}.json").read_text())
        a_us = _time(timer, ours / f"{op}.so", mine, ptrs, calls, repeats)
        b_us = _time(timer, meta_dir / f"{op}.so", theirs, ptrs, calls, repeats)
        rows.append({"network": network, "op": op, "threads": threads, "elements": max(t.size for t in g.tensors.values()),
                     "akgpy_us": a_us, "bundled_us": b_us})
    return rows


def _child(ns) -> None:
    work = Path(ns.work)
    rows = []
    for net in ns.networks:
        rows += measure(net, ns.threads[0], work, ns.calls, ns.repeats)
    Path(ns.rows).write_text(json.dumps(rows))


def main(argv=None) -> int:
    from akgpy.mindspore.zoo import NETWORKS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--networks", nargs="+", default=list(NETWORKS))
    ap.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--work", default=None, help="directory for the kernels (default: a temporary one)")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "mindspore_kernels.md"))
    ap.add_argument("--rows", default=None, help=argparse.SUPPRESS)  # a child's result file
    ns = ap.parse_args(argv)
    if ns.rows:
        _child(ns)
        return 0
    work = Path(ns.work or tempfile.mkdtemp(prefix="akgpy-bench-kernels-"))
    rows, load = [], []
    for threads in ns.threads:  # OpenMP's thread count is fixed per process
        out = work / f"rows_{threads}.json"
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "AKGPY_CACHE": "off"}
        load.append(os.getloadavg()[0])
        subprocess.run([sys.executable, __file__, "--networks", *ns.networks, "--threads", str(threads),
                        "--calls", str(ns.calls), "--repeats", str(ns.repeats), "--work", str(work),
                        "--rows", str(out)], env=env, check=True)
        rows += json.loads(out.read_text())
    _write(rows, Path(ns.out), load, ns)
    return 0


def _write(rows: list[dict], out: Path, load: list[float], ns) -> None:
    from akgpy.tune.machine import cpu_model
    lines = ["# akgpy's kernels against MindSpore's bundled AKG, kernel by kernel", "",
             f"`python bench/bench_mindspore_kernels.py` on {time.strftime('%Y-%m-%d %H:%M')}, {cpu_model()}, "
             f"{os.cpu_count()} cores; load average at the start of each thread count: {', '.join(f'{x:.2f}' for x in load)}.",
             "Each pair: the same request, the same arrays (16 bytes past a cache line, as MindSpore's), the same "
             f"OpenMP launcher; best of {ns.repeats} runs of {ns.calls} back-to-back calls (us per call). "
             "Speed-up > 1: akgpy faster.", ""]
    for threads in sorted({r["threads"] for r in rows}):
        sel = [r for r in rows if r["threads"] == threads]
        lines += [f"## {threads} thread(s)", "", "| network | kernel | elements | akgpy us | bundled us | speed-up |",
                  "|---|---|---:|---:|---:|---:|"]
        for r in sel:
            lines.append(f"| {r['network']} | {r['op'][:60]} | {r['elements']} | {r['akgpy_us']:.3f} | "
                         f"{r['bundled_us']:.3f} | {r['bundled_us'] / r['akgpy_us']:.2f}x |")
        lines += ["", "| network | kernels | akgpy us (sum) | bundled us (sum) | speed-up of the sum | geomean speed-up |",
                  "|---|---:|---:|---:|---:|---:|"]
        for net in dict.fromkeys(r["network"] for r in sel):
            nr = [r for r in sel if r["network"] == net]
            a, b = sum(r["akgpy_us"] for r in nr), sum(r["bundled_us"] for r in nr)
            gm = statistics.geometric_mean([r["bundled_us"] / r["akgpy_us"] for r in nr])
            lines.append(f"| {net} | {len(nr)} | {a:.2f} | {b:.2f} | {b / a:.2f}x | {gm:.2f}x |")
        lines.append("")
    out.write_text("\n".join(lines))
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(main())
