"""The framework's side of the kernel-meta ABI (docs/kernel_meta.md) for tests, through ctypes
alone: MindSpore's callbacks rebuilt in C (an OpenMP parallel_launch that runs
omp_get_max_threads() tasks, as akg_cpu_kernel_mod.cc's does, and malloc/free that count), and
a call that passes numpy arrays as `void **args`. It imports neither akgpy nor TVM: a test runs it
in a process that never loaded them."""
from __future__ import annotations

import ctypes
import json
import subprocess
from pathlib import Path
from typing import Sequence

import numpy as np


LAUNCHER = r"""
#include <omp.h>
#include <stdatomic.h>
#include <stdlib.h>
static atomic_long launches, mallocs, frees;
typedef int (*task_fn)(int, int, void *);
int host_launch(task_fn f, void *cdata, int nthreads) {
  (void)nthreads;
  atomic_fetch_add(&launches, 1);
  int n = omp_get_max_threads();
#pragma omp parallel num_threads(n)
  { f(omp_get_thread_num(), n, cdata); }
  return 0;
}
/* a launcher that runs exactly the tasks asked for, one after another (0 asked: none run) */
int host_launch_literal(task_fn f, void *cdata, int nthreads) {
  atomic_fetch_add(&launches, 1);
  for (int i = 0; i < nthreads; ++i) f(i, nthreads, cdata);
  return 0;
}
/* a broken launcher: announces two tasks and runs one */
int host_launch_short(task_fn f, void *cdata, int nthreads) {
  (void)nthreads;
  atomic_fetch_add(&launches, 1);
  f(0, 2, cdata);
  return 0;
}
void *host_malloc(size_t n) { atomic_fetch_add(&mallocs, 1); return malloc(n); }
void host_free(void *p) { atomic_fetch_add(&frees, 1); free(p); }
void host_threads(int n) { omp_set_num_threads(n); }
long host_count(int which) { return which == 0 ? launches : which == 1 ? mallocs : frees; }
"""


class Callbacks(ctypes.Structure):
    _fields_ = [("parallel_launch", ctypes.c_void_p), ("malloc", ctypes.c_void_p), ("free", ctypes.c_void_p),
                ("extend", ctypes.c_void_p)]


class Host:
    def __init__(self, workdir: Path, threads: int = 3, launcher: str = "host_launch"):
        src, lib = workdir / "host.c", workdir / "libhost.so"
        if not lib.exists() or not src.exists() or src.read_text() != LAUNCHER:
            src.write_text(LAUNCHER)
            subprocess.run(["cc", "-O2", "-fPIC", "-shared", "-fopenmp", "-std=gnu11", "-o", str(lib), str(src)],
                           check=True, capture_output=True)
        self.lib = ctypes.CDLL(str(lib))
        self.lib.host_count.restype = ctypes.c_long
        self.lib.host_threads(threads)
        self.callbacks = Callbacks(ctypes.cast(getattr(self.lib, launcher), ctypes.c_void_p).value,
                                   ctypes.cast(self.lib.host_malloc, ctypes.c_void_p).value,
                                   ctypes.cast(self.lib.host_free, ctypes.c_void_p).value, None)

    def counts(self) -> dict[str, int]:
        return {k: self.lib.host_count(i) for i, k in enumerate(("launches", "mallocs", "frees"))}

    def call(self, meta_json: Path, inputs: Sequence[np.ndarray], *, misalign: bool = False,
             outputs: Sequence[np.ndarray] | None = None) -> tuple[int, list[np.ndarray]]:
        """(return code, output arrays in the .json's output order, fake slots included) of one
        call on `inputs` (written in place where the kernel assigns them). `misalign`: outputs
        start one element past a 64-byte boundary."""
        meta = json.loads(Path(meta_json).read_text())
        lib = ctypes.CDLL(str(Path(meta_json).with_suffix(".so")), mode=ctypes.RTLD_LOCAL)
        fn = getattr(lib, meta["kernelName"])
        fn.restype, fn.argtypes = ctypes.c_int, [ctypes.POINTER(ctypes.c_void_p)]
        slots = [a for a in meta["args"] if a["role"] in ("output", "fake_output")]
        if outputs is None:
            outputs = [_empty(a["shape"], np.dtype(a["dtype"]), misalign) for a in slots]
        ptrs = [ctypes.addressof(self.callbacks)] + [a.ctypes.data for a in inputs] + [o.ctypes.data for o in outputs]
        assert len(ptrs) == len(meta["args"]), (len(ptrs), len(meta["args"]))
        rc = fn((ctypes.c_void_p * len(ptrs))(*ptrs))
        return rc, list(outputs)


def _empty(shape, dtype, misalign: bool) -> np.ndarray:
    n = int(np.prod(shape, dtype=np.int64))
    itemsize = np.dtype(dtype).itemsize
    raw = np.empty(n * itemsize + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + (itemsize if misalign else 0)
    out = raw[start:start + n * itemsize].view(dtype).reshape(shape)
    if out.dtype.kind == "f":
        out.fill(np.nan)
    else:
        out.view(np.uint8).fill(0x5A)
    return out
