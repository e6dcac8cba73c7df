"""Warm `akgpy.fuse` in fresh processes (docs/cache.md): for every bench graph, compile once into
a temporary cache, then start N fresh interpreters that each `import akgpy`, load the graph and
time `akgpy.fuse(graph)` alone (the import is reported apart). Prints per graph the median and
p95 of the warm fuse and whether tvm was imported; the target is a median of 20 ms or less.

    python bench/bench_warm.py [--set bench/bench_set.txt] [--repeat 5] [--only SUBSTRING] [--json FILE]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_CHILD = """
import json, sys, time
t0 = time.perf_counter()
import akgpy
t1 = time.perf_counter()
g = akgpy.load_composite(sys.argv[1])
t2 = time.perf_counter()
prog = akgpy.fuse(g)
t3 = time.perf_counter()
from akgpy.tune import cache
print(json.dumps({"import_ms": (t1 - t0) * 1e3, "load_ms": (t2 - t1) * 1e3, "fuse_ms": (t3 - t2) * 1e3,
                  "tvm": "tvm" in sys.modules, "stats": cache.stats()}))
"""


def bench_graphs(set_file: Path) -> list[Path]:
    out = []
    for line in set_file.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            out.append((REPO / "corpus" / line).resolve())
    return out


def run(path: Path, env: dict) -> dict:
    r = subprocess.run([sys.executable, "-c", _CHILD, str(path)], capture_output=True, text=True, env=env,
                       cwd=REPO, timeout=900)
    if r.returncode != 0:
        raise RuntimeError(f"{path.name}: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def p95(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(0.95 * (len(xs) - 1)))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", type=Path, default=REPO / "bench" / "bench_set.txt")
    ap.add_argument("--repeat", type=int, default=5, help="fresh warm processes per graph")
    ap.add_argument("--only", default="")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    graphs = [p for p in bench_graphs(args.set) if args.only in p.name]
    rows, every = [], []
    with tempfile.TemporaryDirectory(prefix="akgpy-warm-") as d:
        env = {**os.environ, "AKGPY_CACHE": f"{d}/cache", "AKGPY_CACHE_KEY": f"{d}/key",
               "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
        for path in graphs:
            cold = run(path, env)
            warm = [run(path, env) for _ in range(args.repeat)]
            fuse = [w["fuse_ms"] for w in warm]
            every += fuse
            row = {"graph": path.name[:60], "cold_ms": round(cold["fuse_ms"], 1),
                   "warm_median_ms": round(statistics.median(fuse), 2), "warm_p95_ms": round(p95(fuse), 2),
                   "import_ms": round(statistics.median(w["import_ms"] for w in warm), 1),
                   "tvm_imported": any(w["tvm"] for w in warm), "hits": sum(w["stats"]["hits"] for w in warm)}
            rows.append(row)
            print(f"{row['graph']:60} cold {row['cold_ms']:8.1f} ms  warm median {row['warm_median_ms']:6.2f} ms "
                  f"p95 {row['warm_p95_ms']:6.2f} ms  import {row['import_ms']:6.1f} ms  tvm {row['tvm_imported']}  "
                  f"hits {row['hits']}/{args.repeat}", flush=True)
    if every:
        print(f"all graphs: warm fuse median {statistics.median(every):.2f} ms, p95 {p95(every):.2f} ms "
              f"over {len(every)} fresh processes; tvm imported in "
              f"{sum(r['tvm_imported'] for r in rows)} of {len(rows)} graphs")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
