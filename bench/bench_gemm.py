"""float32 GEMM throughput: akgpy's generated kernels against onnxruntime (MLAS), torch (oneDNN /
MKL) and numpy at fixed shapes, as a share of the FMA peak that bench/fma_peak.c measures on the
same threads.

Each executor runs in a process of its own (their thread pools would fight over the cores), and
the executors alternate round by round. Per call it records the wall time, the process's CPU
time and its involuntary context switches: on a shared machine a call during which another
process took a core is not the kernel's time, so only calls without one ("clean") count where
there are at least 3. Reported: the median wall GFLOP/s of the clean calls, and GFLOP per CPU
second (the rate while the threads ran; with spinning pools this undercounts).

    python -m bench.bench_gemm [--threads 2] [--rounds 3] [--calls 15] [--shapes 512x512x2752,...]
        [--only akgpy,ort,torch,numpy] [--json out.json]

A shape is MxKxN or BxMxKxN (batched); C[M, N] = A[M, K] @ B[K, N].
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHAPES = ["512x512x2752", "512x2752x512", "128x768x3072", "128x3072x768", "768x768x3072",
          "12x128x64x128", "12x128x128x64"]
EXECUTORS = ["akgpy", "ort", "torch", "numpy"]


def parse_shape(s: str) -> tuple[int, ...]:
    dims = tuple(int(x) for x in s.lower().split("x"))
    if len(dims) not in (3, 4):
        raise SystemExit(f"shape {s!r}: MxKxN or BxMxKxN")
    return dims if len(dims) == 4 else (0, *dims)


def _operands(shape):
    import numpy as np
    b, m, k, n = shape
    rng = np.random.default_rng(0)
    lead = (b,) if b else ()
    return (rng.standard_normal((*lead, m, k), dtype=np.float32),
            rng.standard_normal((*lead, k, n), dtype=np.float32))


def _akgpy(shape, a, b):
    import numpy as np
    import akgpy
    from akgpy.graph.builder import GraphBuilder
    from akgpy.runtime.program import aligned_empty
    g = GraphBuilder("gemm")
    x, y = g.input("A", a.shape), g.input("B", b.shape)
    g.output(g.matmul(x, y))
    prog = akgpy.fuse(g.build())
    out = aligned_empty((*a.shape[:-1], b.shape[-1]), "float32")
    kernel = prog.kernels[0]
    kernel.func(a, b, out)
    if not np.allclose(out, np.matmul(a.astype(np.float64), b), rtol=1e-4, atol=1e-4 * a.shape[-1] ** 0.5):
        raise SystemExit(f"akgpy result differs from numpy at {shape}")
    call = kernel.unchecked
    return lambda: call(a, b, out)


def _ort(shape, a, b, threads):
    import onnxruntime as ort
    from onnx import TensorProto, helper
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(v.shape)) for n, v in (("A", a), ("B", b))]
    out = helper.make_tensor_value_info("C", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("MatMul", ["A", "B"], ["C"])], "gemm", io, [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    feeds = {"A": a, "B": b}
    return lambda: sess.run(None, feeds)


def _torch(shape, a, b, threads):
    import torch
    torch.set_num_threads(threads)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    out = torch.matmul(ta, tb)
    return lambda: torch.matmul(ta, tb, out=out)


def _numpy(shape, a, b):
    import numpy as np
    out = np.matmul(a, b)
    return lambda: np.matmul(a, b, out=out)


def worker(name: str, shape, threads: int, calls: int) -> dict:
    """Time `calls` calls of one executor in this process; per call (wall s, cpu s, clean)."""
    a, b = _operands(shape)
    if name == "akgpy":
        fn = _akgpy(shape, a, b)
    elif name == "ort":
        fn = _ort(shape, a, b, threads)
    elif name == "torch":
        fn = _torch(shape, a, b, threads)
    else:
        fn = _numpy(shape, a, b)
    for _ in range(3):
        fn()
    rows = []
    for _ in range(calls):
        r0, c0, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw, time.process_time(), time.perf_counter()
        fn()
        t1, c1, r1 = time.perf_counter(), time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw
        rows.append((t1 - t0, c1 - c0, r1 == r0))
    return {"executor": name, "calls": rows}


def _env(name: str, threads: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # akgpy reads TVM_NUM_THREADS; numpy's BLAS and torch's OpenMP read the others. In akgpy's
    # process numpy only checks the result, on one thread: OpenBLAS's threads spin after a call,
    # and on 2 cores two spinning BLAS threads made a 0.2 ms kernel take 4 ms
    blas = 1 if name == "akgpy" else threads
    env.update(TVM_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(blas), OPENBLAS_NUM_THREADS=str(blas),
               MKL_NUM_THREADS=str(blas))
    return env


def fma_peak(threads: int) -> dict:
    """bench/fma_peak.c built with cc -O3 -march=native and run on `threads` threads."""
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "fma_peak"
        subprocess.run(["cc", "-O3", "-march=native", "-fopenmp", str(REPO / "bench" / "fma_peak.c"), "-o", str(exe)],
                       check=True)
        out = subprocess.run([str(exe), str(threads), "20000000", "7"], check=True, capture_output=True,
                             text=True).stdout
    words = out.split()
    wall = float(words[words.index("peak") + 1])
    cpu = float(words[words.index("wall,") + 1])
    return {"threads": threads, "wall_gflops": wall, "per_cpu_second_gflops": cpu, "line": out.strip()}


def summarise(shape, rows: list) -> dict:
    b, m, k, n = shape
    gflop = 2.0 * max(b, 1) * m * k * n / 1e9
    clean = [r for r in rows if r[2]]
    use = clean if len(clean) >= 3 else rows
    wall = statistics.median(r[0] for r in use)
    cpu = statistics.median(r[1] for r in use)
    return {"gflops": gflop / wall, "best_gflops": gflop / min(r[0] for r in use),
            "per_cpu_gflops": gflop / cpu if cpu > 0 else 0.0, "ms": wall * 1e3,
            "clean": len(clean), "calls": len(rows)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=15)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--only", default=",".join(EXECUTORS))
    ap.add_argument("--json")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        name, shape = args.worker.split(":")
        print(json.dumps(worker(name, parse_shape(shape), args.threads, args.calls)))
        return 0
    peak = fma_peak(args.threads)
    print(peak["line"])
    # per-core peak x threads: the ceiling the threads reach when no other process runs
    ceiling = peak["per_cpu_second_gflops"] * args.threads
    names = [x for x in args.only.split(",") if x]
    results = []
    for s in args.shapes.split(","):
        shape = parse_shape(s)
        rows: dict = {n: [] for n in names}
        for r in range(args.rounds):
            order = names[r % len(names):] + names[:r % len(names)]  # who goes first alternates
            for name in order:
                p = subprocess.run([sys.executable, "-m", "bench.bench_gemm", "--worker", f"{name}:{s}",
                                    "--threads", str(args.threads), "--calls", str(args.calls)],
                                   cwd=REPO, env=_env(name, args.threads), capture_output=True, text=True)
                if p.returncode:
                    print(f"{s} {name}: failed\n{p.stderr[-2000:]}", file=sys.stderr)
                    continue
                rows[name] += json.loads(p.stdout.strip().splitlines()[-1])["calls"]
        for name in names:
            if not rows[name]:
                continue
            res = {"shape": s, "executor": name, "threads": args.threads, **summarise(shape, rows[name])}
            res["pct_peak"] = 100.0 * res["gflops"] / ceiling
            res["pct_peak_per_cpu"] = 100.0 * res["per_cpu_gflops"] / peak["per_cpu_second_gflops"]
            results.append(res)
            print(f"{s:>15s} {name:6s} {res['ms']:8.2f} ms {res['gflops']:7.1f} GFLOP/s "
                  f"({res['pct_peak']:5.1f}% of {ceiling:.0f}) | {res['per_cpu_gflops']:6.1f} GFLOP/CPU-s "
                  f"({res['pct_peak_per_cpu']:5.1f}% of a core) | clean {res['clean']}/{res['calls']}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"peak": peak, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
