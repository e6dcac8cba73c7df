"""Dense NHWC Conv2D kernels of ResNet-50 against akgpy's MatMul of the implicit-GEMM shape
(M = N*OH*OW, N = O, K = KH*KW*C): GFLOP/s of each, calls interleaved in one process, medians.
Not a test: run by hand, `TVM_NUM_THREADS=2 python bench/bench_conv.py [names]`."""
from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("TVM_NUM_THREADS", "2")

import numpy as np  # noqa: E402

import akgpy  # noqa: E402
from akgpy.graph.builder import GraphBuilder  # noqa: E402

ROUNDS = int(os.environ.get("ROUNDS", "10"))

# name: (input H (padded), C, kernel, stride, O)
CASES = {
    "3x3_56x64": (58, 64, 3, 1, 64),
    "3x3_14x256": (16, 256, 3, 1, 256),
    "3x3_7x512": (9, 512, 3, 1, 512),
    "3x3s2_7x512": (16, 512, 3, 2, 512),
    "1x1s2_7x2048": (14, 1024, 1, 2, 2048),
    "1x1s2_14x1024": (28, 512, 1, 2, 1024),
    "stem_7x7s2": (230, 3, 7, 2, 64),
}


def conv_prog(h, c, k, s, o):
    b = GraphBuilder("conv")
    oh = (h - k) // s + 1
    x, w = b.input("x", (1, h, h, c)), b.input("w", (o, k, k, c))
    b.output(b.op("Conv2D", [x, w], (1, oh, oh, o), "float32", stride=[1, 1, s, s]))
    return akgpy.fuse(b.build()), oh


def gemm_prog(m, k, n):
    b = GraphBuilder("gemm")
    a, bb = b.input("a", (m, k)), b.input("b", (k, n))
    b.output(b.matmul(a, bb))
    return akgpy.fuse(b.build())


def timed(fns: dict, rounds=ROUNDS) -> dict:
    for f in fns.values():
        f(), f()
    times = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            t = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t)
    return {k: min(v) for k, v in times.items()}


def main(names):
    rng = np.random.default_rng(0)
    for name in names:
        h, c, k, s, o = CASES[name]
        prog, oh = conv_prog(h, c, k, s, o)
        m, kk = oh * oh, k * k * c
        gemm = gemm_prog(m, kk, o)
        x = rng.standard_normal((1, h, h, c)).astype(np.float32)
        w = rng.standard_normal((o, k, k, c)).astype(np.float32)
        a = rng.standard_normal((m, kk)).astype(np.float32)
        bm = rng.standard_normal((kk, o)).astype(np.float32)
        y = prog(x, w)
        ref = np.einsum("nhwc,ohwc->no", np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(1, 2))
                        [:, ::s, ::s][:, :oh, :oh].reshape(-1, c, k, k).transpose(0, 2, 3, 1), w)
        err = float(np.abs(np.asarray(y).reshape(-1, o) - ref).max() / (np.abs(ref).max() + 1e-9))
        t = timed({"conv": lambda: prog(x, w), "gemm": lambda: gemm(a, bm)})
        fl = 2 * m * kk * o / 1e9
        print(f"{name:16s} M={m:5d} K={kk:5d} N={o:5d}  conv {t['conv']*1e3:7.3f} ms {fl/t['conv']:6.1f} GF/s"
              f"  gemm {t['gemm']*1e3:7.3f} ms {fl/t['gemm']:6.1f} GF/s  ratio {t['conv']/t['gemm']:.2f}  relerr {err:.1e}",
              flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or list(CASES))
