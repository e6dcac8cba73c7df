"""CPU benchmark: akgpy kernels against numpy, torch eager and torch.compile (inductor) on the
subgraphs of bench/bench_set.txt, with a STREAM triad (compiled by akgpy) as the ceiling.

    python bench/bench_cpu.py [--only SUBSTR] [--repeat N] [--json PATH] [--no-torch] [--schedules plain,poly]

Per subgraph: every implementation is checked against akgpy.reference first (the `check` column),
then timed on one set of 64-byte aligned inputs: warm-up, then `--repeat` rounds, each calling every
implementation once (in an order shuffled anew each round, seeded, and a 5 ms pause before each
call so that one runtime's spinning worker threads do not steal cores from the next); the
median is reported. The pause busy-waits (`--gap-sleep` sleeps instead): a core that sleeps 5 ms
here (a KVM guest) comes back slow, and the next call pays for it, while STREAM's samples and a
framework's kernels run back to back. yolo ~6853 kernel alone, one thread: 1.44 ms with no
pause, 1.45 after 5 ms of busy-waiting, 1.58 after 5 ms of sleep (1 ms of sleep: 1.45); in the
whole bench run, akgpy's %STREAM geomean went 40% -> 43% and inductor's times dropped as much
(yolo ~3153 13.2 -> 6.1 ms), so akgpy's ratio to it fell 4.14x -> 3.89x.
Shuffled, not rotated: a rotation keeps each one's predecessor fixed, and `kern-poly` always ran
right after `akgpy-poly` on the same arrays, whose pages and cache lines that call had just
touched, while `akgpy-poly` always followed inductor. The single cast
`~3234` read 3.44 ms kernel-only against 3.69 ms through prog(), and back to back, warm, the
two are equal (3.99 vs 4.00 ms).
Every call allocates its outputs, as a framework would; the `kern ms` column times the akgpy kernel
alone on preallocated outputs (no allocation, no page faults of fresh output pages).
Arrays are as users make them: numpy's own allocation (16 bytes past a page for a large array),
which every implementation is timed on. Beside them, akgpy is timed on the same values at other
placements (`--placements`): `a64`, akgpy's own 64-byte aligned and page-staggered buffers (what
earlier runs fed every implementation), and `pN`, every input N bytes past a page boundary (16,
32, 48: off a cache line; 0: page-aligned). The placement table gives each as a ratio to `a64`.
Bytes moved = all input + output descs. torch.compile's first call (compile) is timed separately.
torch runs 2 intra-op threads with OMP_WAIT_POLICY=PASSIVE unless the environment sets it: with
libgomp's default spin-waiting, each of eager torch's ~20-40 parallel regions per graph stalls for
a scheduler time slice whenever another process holds one of the 2 cores (4-6x slower here).
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import peers  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
NET = {"bert_base": "bert", "yolov3_darknet53": "yolo", "wide_deep": "wd", "vgg16": "vgg", "alexnet": "alex",
       "deep_fm": "dfm", "resnet101": "r101"}


def llc_bytes() -> tuple[int, str]:
    from akgpy.target import resolve_target
    host = resolve_target(None)
    return host.llc_bytes, "sysfs" if host.llc_bytes != resolve_target({"kind": "llvm", "mcpu": "x86-64"}).llc_bytes \
        else "fallback"


def load_set(path: Path) -> list[dict]:
    rows = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        rel, _, comment = line.partition("#")
        rel = rel.strip()
        net, fname = rel.split("/")[-2:]
        body = fname.split(".")[0].removeprefix("Fused_")
        short = f"{NET.get(net, net[:4])}/{body[:17]}~{body.rsplit('_', 1)[-1][-4:]}"
        rows.append({"path": rel, "name": short, "pattern": comment.split(",")[0].strip(), "comment": comment.strip()})
    return rows


def nbytes(g, names) -> int:
    from akgpy import dtypes
    return sum(g.tensors[n].size * dtypes.to_numpy(g.tensors[n].dtype).itemsize for n in names)


def aligned_copy(a: np.ndarray) -> np.ndarray:
    from akgpy.runtime.program import aligned_empty
    out = aligned_empty(a.shape, a.dtype)
    np.copyto(out, a)
    return out


def placed(a: np.ndarray, page_offset: int) -> np.ndarray:
    """A copy of `a` starting `page_offset` bytes past a page boundary."""
    raw = np.empty(a.nbytes + 2 * 4096, np.uint8)
    start = (-raw.ctypes.data) % 4096 + page_offset
    out = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    np.copyto(out, a)
    return out


def placement_arrays(base: list[np.ndarray], placement: str) -> list[np.ndarray]:
    if placement == "a64":
        return [aligned_copy(a) for a in base]
    return [placed(a, int(placement[1:])) for a in base]


def _gap(seconds: float, sleep: bool) -> None:
    """The pause before a timed call, busy-waiting unless `sleep`: see the module docstring."""
    if sleep:
        time.sleep(seconds)
        return
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def prebound(prog, arrays):
    """The program's kernels with arguments bound once (outputs preallocated): times the kernel alone."""
    from akgpy.runtime.program import aligned_empty, as_aligned, as_storage
    g, calls = prog.graph, []
    for k in prog.kernels:
        args = []
        for p in k.params:
            if p.kind == "output":
                args.append(aligned_empty(p.shape, p.dtype))
                continue
            a = as_storage(as_aligned(arrays[g.inputs.index(p.tensor)]), p)
            shared = p.kind == "inplace" and p.tensor in k.reads
            args.append(aligned_empty(p.shape, p.dtype) if shared else a)
        calls.append((k.unchecked, args))
    return lambda: [f(*a) for f, a in calls]


class Stream:
    """STREAM triad a = b + s*c in fp32, compiled by akgpy, each array 4x the LLC. Other jobs come and
    go on a shared machine, so it is sampled before, between and after the subgraphs. akgpy writes
    the triad's output with streaming (non-temporal) stores; the same kernel with plain stores
    (write-allocate: 4 more bytes read per element) is sampled too, and the best sample of
    either is the ceiling that %STREAM divides by."""

    def __init__(self, llc: int):
        import akgpy
        self.n = n = 4 * llc // 4
        b = akgpy.GraphBuilder("stream_triad")
        x, y = b.input("b", (n,), "float32"), b.input("c", (n,), "float32")
        b.output(x + y * 3.0)
        g = b.build()
        self.prog = akgpy.fuse(g)
        from akgpy.targets import default_config
        plain_stores = akgpy.fuse(g, config=default_config().replace(stream_min_bytes=0))
        self.streams = "!nontemporal" in self.prog.kernels[0].source
        self.args = [aligned_copy(np.full(n, 1.0, np.float32)), aligned_copy(np.full(n, 2.0, np.float32))]
        self.kern, self.kern_plain = prebound(self.prog, self.args), prebound(plain_stores, self.args)
        for p in (self.prog, plain_stores):
            assert np.all(p(*self.args)[0][:: n // 7] == 7.0), "triad kernel is wrong"
        self.bytes, self.samples, self.alloc_samples, self.plain_samples = 3 * n * 4, [], [], []

    def sample(self, reps: int = 3) -> float:
        best_k = best_p = best_plain = math.inf
        for _ in range(reps):
            t = time.perf_counter()
            self.kern()
            best_k = min(best_k, time.perf_counter() - t)
            t = time.perf_counter()
            self.kern_plain()
            best_plain = min(best_plain, time.perf_counter() - t)
            t = time.perf_counter()
            self.prog(*self.args)
            best_p = min(best_p, time.perf_counter() - t)
        self.samples.append(self.bytes / best_k / 1e9)
        self.plain_samples.append(self.bytes / best_plain / 1e9)
        self.alloc_samples.append(self.bytes / best_p / 1e9)
        return max(self.samples[-1], self.plain_samples[-1])

    def summary(self) -> dict:
        both = [max(a, b) for a, b in zip(self.samples, self.plain_samples)]
        return {"n": self.n, "bytes": self.bytes, "gbps": max(both), "samples_gbps": both,
                "median_gbps": statistics.median(both), "gbps_alloc_best": max(self.alloc_samples),
                "streaming_best_gbps": max(self.samples), "plain_stores_best_gbps": max(self.plain_samples),
                "streams": self.streams, "threads": os.environ.get("TVM_NUM_THREADS")}


def run_one(e: dict, args, torch) -> dict:
    import akgpy
    from akgpy import reference
    from akgpy.testing import compare, random_inputs
    g = akgpy.load_composite(REPO / "corpus" / e["path"])
    row = {**e, "bytes": nbytes(g, g.inputs) + nbytes(g, g.outputs), "ops": len(g.ops),
           "memory_bound": not any(op.name in ("MatMul", "Conv2D") for op in g.ops),
           "ms": {}, "times_ms": {}, "cells": {}, "check": {}, "compile_s": {}, "errors": {}}
    base = random_inputs(g, seed=0)
    ref_in = [a.copy() for a in base]
    want = reference.run(g, ref_in)

    def check(name, fn, to_np=lambda o: o, wrap=lambda a: a):
        kin = [a.copy() for a in base]
        got = [to_np(o) for o in fn(*[wrap(a) for a in kin])]
        bad = compare(g, got, kin, want, ref_in)
        row["check"][name] = "ok" if not bad else "; ".join(f"{m.tensor}: {m.bad}/{m.total} bad, max {m.max_abs:.3g}"
                                                            for m in bad)

    makers = {}  # name -> function of the timing arrays (numpy list, torch list) giving a zero-arg callable
    for s in args.schedules:
        name = f"akgpy-{s}"
        try:
            t0 = time.perf_counter()
            prog = akgpy.fuse(g, schedule=s)
            row["compile_s"][name] = time.perf_counter() - t0
            path = prog.kernels[0].explain().splitlines()[1] if s != "plain" else ""
            row.setdefault("sched_path", {})[name] = path
            check(name, prog)
        except Exception as ex:  # an unknown schedule or a compiler failure: an error cell, not a crash
            row["cells"][name] = row["cells"][f"kern-{s}"] = "err"
            row["errors"][name] = f"{type(ex).__name__}: {ex}"[:300]
            continue
        makers[name] = lambda a, t, prog=prog: (lambda: prog(*a))
        makers[f"kern-{s}"] = lambda a, t, prog=prog: prebound(prog, a)
        for pl in args.placements:
            makers[f"{name}@{pl}"] = lambda a, t, prog=prog, pl=pl: (lambda xs=placement_arrays(a, pl): prog(*xs))
    try:
        npex = peers.numpy_executor(g)
        check("numpy", npex)
        makers["numpy"] = lambda a, t: (lambda: npex(*a))
    except Exception as ex:
        row["cells"]["numpy"], row["errors"]["numpy"] = "n/a", f"{type(ex).__name__}: {ex}"[:300]
    if torch is not None:
        to_np, wrap = (lambda o: o.numpy()), torch.from_numpy
        try:
            thex = peers.torch_executor(g)
            with torch.no_grad():
                check("torch", thex, to_np, wrap)
            makers["torch"] = lambda a, t: (lambda: thex(*t))
        except Exception as ex:
            thex = None
            row["cells"]["torch"], row["errors"]["torch"] = "n/a", f"{type(ex).__name__}: {ex}"[:300]
        if thex is not None:
            torch._dynamo.reset()
            comp = torch.compile(lambda *ts: thex(*ts), backend="inductor", dynamic=False)
            t0 = time.perf_counter()
            try:
                with torch.no_grad():
                    check("inductor", comp, to_np, wrap)  # first call: compile + one run
                row["compile_s"]["inductor"] = time.perf_counter() - t0
                makers["inductor"] = lambda a, t: (lambda: comp(*t))
            except Exception as ex:
                row["cells"]["inductor"], row["errors"]["inductor"] = "fail", f"{type(ex).__name__}: {ex}"[:300]
    del want, ref_in
    gc.collect()

    arrays = [a.copy() for a in base]  # numpy's own allocation: what a user passes
    del base
    tens = [torch.from_numpy(a) for a in arrays] if torch is not None else None
    fns = {}
    for name, mk in makers.items():
        try:
            fns[name] = mk(arrays, tens)
        except Exception as ex:
            row["cells"][name], row["errors"][name] = "err", f"{type(ex).__name__}: {ex}"[:300]
    times = {n: [] for n in fns}
    order = list(fns)
    with torch.no_grad() if torch is not None else contextlib.nullcontext():
        for r in range(2 + args.repeat):  # two warm-up rounds, then the timed ones
            random.Random(r).shuffle(order)
            for name in order:
                if name not in fns:
                    continue
                _gap(args.gap_ms / 1e3, args.gap_sleep)
                try:
                    t0 = time.perf_counter()
                    out = fns[name]()
                    dt = time.perf_counter() - t0
                    del out
                except Exception as ex:
                    row["cells"][name], row["errors"][name] = "fail", f"{type(ex).__name__}: {ex}"[:300]
                    del fns[name]
                    continue
                if r >= 2:
                    times[name].append(dt * 1e3)
    for name, ts in times.items():
        if ts and name in fns:
            row["times_ms"][name] = ts
            row["ms"][name] = statistics.median(ts)
    if torch is not None:
        row["dynamo_counters"] = {k: dict(v) for k, v in torch._dynamo.utils.counters.items() if k in ("stats", "graph_break")}
        torch._dynamo.utils.counters.clear()
        torch._dynamo.reset()
    del fns, makers, arrays, tens
    gc.collect()
    row["loadavg_after"] = os.getloadavg()
    return row


def _gmean(xs):
    xs = [x for x in xs if x is not None and x > 0 and math.isfinite(x)]
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def placement_table(rows, args) -> list[str]:
    """akgpy through prog() on numpy's arrays and at each placement, as time ratios to `a64`."""
    if "a64" not in args.placements:
        return []
    out = []
    for s in args.schedules:
        k = f"akgpy-{s}"
        cols = ["numpy"] + [p for p in args.placements if p != "a64"]
        head = ["name", f"{k}@a64 ms"] + [f"{c}/a64" for c in cols]
        table, ratios = [], {c: [] for c in cols}
        for r in rows:
            base = r["ms"].get(f"{k}@a64")
            if not base:
                continue
            cells = [r["name"], f"{base:.2f}"]
            for c in cols:
                t = r["ms"].get(k if c == "numpy" else f"{k}@{c}")
                ratios[c].append(t / base if t else None)
                cells.append(f"{t / base:.3f}" if t else "-")
            table.append(cells)
        if not table:
            continue
        table.append(["geomean", ""] + [f"{_gmean(ratios[c]):.3f}" for c in cols])
        table.append(["max", ""] + [f"{max(x for x in ratios[c] if x):.3f}" for c in cols])
        w = [max(len(c[i]) for c in [head, *table]) for i in range(len(head))]
        out += ["", f"{k}: input placement (prog() time / time on akgpy's 64-byte aligned buffers, same run, interleaved)"]
        out += ["  ".join(c.ljust(w[i]) if i == 0 else c.rjust(w[i]) for i, c in enumerate(cs)) for cs in [head, *table]]
        over = [r[0] for r in table[:-2] if float(r[2]) > 1.05]
        out.append(f"numpy's own arrays within 5% of aligned: {len(table) - 2 - len(over)} of {len(table) - 2} subgraphs"
                   + (f" (over: {', '.join(over)})" if over else ""))
    return out


def render(rows, args, stream, llc, llc_src, load0, load1, total_s, torch) -> str:
    S, sg = args.schedules, lambda s: "" if len(args.schedules) == 1 else f" {s}"
    peers_ = ["numpy", "torch", "inductor"] if torch is not None else ["numpy"]
    head = ["name", "pattern", "MB"] + [h for s in S for h in (f"akgpy-{s} ms", "kern ms")] + \
        [f"{p} ms" for p in peers_] + [h for s in S for h in (f"GB/s{sg(s)}", f"%STREAM{sg(s)}", f"vs ind{sg(s)}")[:3 if torch else 2]] + ["check"]
    gb = lambda r, k: r["bytes"] / r["ms"][k] * 1e-6 if k in r["ms"] else None  # noqa: E731
    ms = lambda r, k: (f"{r['ms'][k]:.2f}" if r["ms"][k] < 100 else f"{r['ms'][k]:.1f}") if k in r["ms"] \
        else r["cells"].get(k, "n/a")  # noqa: E731
    table = []
    for r in rows:
        cells = [r["name"], r["pattern"], f"{r['bytes'] / 1e6:.1f}{'*' if r['bytes'] < llc else ''}"]
        cells += [ms(r, k) for s in S for k in (f"akgpy-{s}", f"kern-{s}")] + [ms(r, p) for p in peers_]
        for s in S:
            g, k = gb(r, f"akgpy-{s}"), f"akgpy-{s}"
            pct = f"{100 * g / stream['gbps']:.0f}%" if g else "-"
            ratio = r["ms"]["inductor"] / r["ms"][k] if g and "inductor" in r["ms"] else None
            cells += [f"{g:.1f}" if g else "-", pct if r["memory_bound"] else f"({pct})", f"{ratio:.2f}" if ratio else "-"][:3 if torch else 2]
        bad = [k.replace("akgpy-", "") for k, v in r["check"].items() if v != "ok"]
        cells.append("ok" if r["check"] and not bad else f"MISMATCH:{','.join(bad)}" if bad else "n/a")
        table.append(cells)
    gm = ["geomean", "", f"{_gmean([r['bytes'] / 1e6 for r in rows]):.1f}"] + ["-"] * (2 * len(S) + len(peers_))
    for s in S:
        k = f"akgpy-{s}"
        g = _gmean([gb(r, k) for r in rows])
        p = _gmean([100 * gb(r, k) / stream["gbps"] for r in rows if r["memory_bound"] and k in r["ms"]])
        ra = _gmean([r["ms"]["inductor"] / r["ms"][k] for r in rows if k in r["ms"] and "inductor" in r["ms"]])
        gm += [f"{g:.1f}" if g else "-", f"{p:.0f}%" if p else "-", f"{ra:.2f}" if ra else "-"][:3 if torch else 2]
    table.append(gm + [""])
    w = [max(len(str(c[i])) for c in [head, *table]) for i in range(len(head))]
    line = lambda cs: "  ".join(str(c).ljust(w[i]) if i in (0, 1, len(head) - 1) else str(c).rjust(w[i])  # noqa: E731
                                for i, c in enumerate(cs)).rstrip()
    out = [f"akgpy CPU bench: {len(rows)} subgraphs, median of {args.repeat} interleaved repeats after 2 warm-up rounds; "
           f"{os.cpu_count()} CPUs; load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} at start, "
           f"{load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} at end; total runtime {total_s / 60:.1f} min; "
           f"TVM_NUM_THREADS={os.environ.get('TVM_NUM_THREADS')}"
           + (f", torch threads {torch.get_num_threads()}, OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}"
              if torch is not None else ""),
           f"STREAM triad (akgpy-compiled fp32 a = b + s*c, 3 x {stream['n'] * 4 / 2**20:.0f} MiB, LLC {llc >> 20} MiB "
           f"({llc_src}), {stream['threads']} threads; sampled {len(stream['samples_gbps'])}x: before, between and after "
           f"the subgraphs): best {stream['gbps']:.2f} GB/s (used for %STREAM), median {stream['median_gbps']:.2f}, "
           f"worst {min(stream['samples_gbps']):.2f}. Best by store kind: streaming stores "
           f"{stream['streaming_best_gbps']:.2f}{'' if stream['streams'] else ' (kernel did not stream)'}, plain "
           f"stores {stream['plain_stores_best_gbps']:.2f}. Through prog(), which allocates the output each call: "
           f"best {stream['gbps_alloc_best']:.2f} GB/s.",
           "", line(head), line(["-" * x for x in w]), *map(line, table), ""]
    for s in S:
        k = f"akgpy-{s}"
        for p in peers_:
            ra = [r["ms"][p] / r["ms"][k] for r in rows if k in r["ms"] and p in r["ms"]]
            if ra:
                out.append(f"{k} speedup over {p} (time ratio {p}/{k}, >1 = akgpy faster): geomean {_gmean(ra):.2f} "
                           f"over {len(ra)} subgraphs, min {min(ra):.2f}, max {max(ra):.2f}")
        mb = [r for r in rows if r["memory_bound"] and k in r["ms"]]
        for lab, kk in (("", k), (" (kernel only, preallocated outputs)", f"kern-{s}")):
            p = _gmean([100 * r["bytes"] / r["ms"][kk] * 1e-6 / stream["gbps"] for r in mb if kk in r["ms"]])
            if p:
                out.append(f"{k} %STREAM geomean over {len(mb)} memory-bound subgraphs{lab}: {p:.0f}%")
        c = sorted(r["compile_s"][k] for r in rows if k in r["compile_s"])
        if c:
            out.append(f"{k} compile time: median {statistics.median(c):.2f} s, max {c[-1]:.2f} s, total {sum(c):.1f} s")
        if s == "plain":
            out.append(f"{k} isl fallbacks: n/a (plain schedule)")
        else:
            paths = [r["sched_path"][k] for r in rows if k in r.get("sched_path", {})]
            fell = [x for x in paths if "fell back" in x]
            out.append(f"{k} fallbacks to plain: {len(fell)} of {len(paths)} subgraphs"
                       + (" (" + "; ".join(sorted({x.split('fell back: ')[1][:70] for x in fell})[:4]) + ")"
                          if fell else ""))
    c = sorted(r["compile_s"]["inductor"] for r in rows if "inductor" in r["compile_s"])
    if c:
        out.append(f"inductor compile (first call, cold cache): median {statistics.median(c):.1f} s, max {c[-1]:.1f} s, "
                   f"total {sum(c):.0f} s")
    out.append(f"* moves less than the LLC ({llc >> 20} MiB): inputs stay cache-resident across repeats. "
               "(%) = compute-bound (MatMul/Conv2D), left out of the %STREAM geomean. kern = akgpy kernel alone.")
    out += placement_table(rows, args)
    errs = {}
    for r in rows:
        for k, v in r["errors"].items():
            errs.setdefault((k, v), []).append(r["name"])
        for k, v in r["check"].items():
            if v != "ok":
                errs.setdefault((f"check {k}", v), []).append(r["name"])
    for (k, v), names in errs.items():
        out.append(f"{k}: {v} [{len(names)} subgraph(s): {', '.join(names[:3])}{' ...' if len(names) > 3 else ''}]")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", type=Path, default=REPO / "bench" / "bench_set.txt")
    ap.add_argument("--only", default="", help="substring of the path or pattern")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--schedules", default="plain,poly", help="comma list passed as schedule= to akgpy.fuse")
    ap.add_argument("--placements", default="a64,p0,p16,p32,p48,p2064",
                    help="comma list of extra input placements for akgpy: a64 (akgpy's aligned buffers), pN (N bytes past a page)")
    ap.add_argument("--gap-ms", type=float, default=5.0, help="pause before each timed call")
    ap.add_argument("--gap-sleep", action="store_true",
                    help="sleep through the pause instead of busy-waiting (lets the core idle; see the docstring)")
    ap.add_argument("--inductor-cache", help="TORCHINDUCTOR_CACHE_DIR (default: a fresh one, so compiles are cold)")
    args = ap.parse_args(argv)
    args.schedules = [s.strip() for s in args.schedules.split(",") if s.strip()]
    args.placements = [p.strip() for p in args.placements.split(",") if p.strip()]
    t_start, load_start = time.time(), os.getloadavg()
    torch = None
    if not args.no_torch:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads libgomp; see the docstring
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", args.inductor_cache or tempfile.mkdtemp(prefix="inductor_"))
        import torch
        torch.set_num_threads(2)
    import akgpy  # noqa: F401  (sets TVM_NUM_THREADS to all cores unless set)
    entries = [e for e in load_set(args.set) if args.only in e["path"] or args.only in e["pattern"]]
    if not entries:
        print(f"no subgraph matches {args.only!r}", file=sys.stderr)
        return 2
    llc, llc_src = llc_bytes()
    probe = Stream(llc)
    print(f"STREAM triad at start: {probe.sample(10):.2f} GB/s", file=sys.stderr)
    rows = []
    for i, e in enumerate(entries):
        t0 = time.time()
        rows.append(run_one(e, args, torch))
        r = rows[-1]
        r["stream_after_gbps"] = probe.sample()
        print(f"[{i + 1}/{len(entries)}] {e['name']} {time.time() - t0:.1f}s "
              + " ".join(f"{k}={v:.2f}" for k, v in r["ms"].items()), file=sys.stderr)
    probe.sample(10)
    stream = probe.summary()
    del probe
    text = render(rows, args, stream, llc, llc_src, load_start, os.getloadavg(), time.time() - t_start, torch)
    print(text)
    if args.json:
        args.json.write_text(json.dumps({
            "rows": rows, "stream": stream, "llc_bytes": llc, "schedules": args.schedules, "repeat": args.repeat,
            "loadavg_start": load_start, "loadavg_end": os.getloadavg(), "total_s": time.time() - t_start,
            "versions": {"python": platform.python_version(), "numpy": np.__version__,
                         "torch": getattr(torch, "__version__", None)},
            "table": text}, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
