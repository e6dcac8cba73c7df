"""Compile every graph of corpus/ and report pass count and compile-time statistics.

    python bench/corpus_compile.py [--check] [--limit N] [--json out.json]
    python bench/corpus_compile.py --ab BASE_CHECKOUT [--every K] [--jsonl rows.jsonl]

Compile time is the wall time of akgpy.fuse (load excluded; lowering, scheduling, LLVM codegen
and the JIT of the entry function included), measured sequentially in one warm process.
--check also runs each kernel on random inputs against the numpy reference (slow: minutes).
--ab compares with another checkout: one warm process per side (PYTHONPATH = that checkout, or
this one), the compile cache off, each graph compiled by both in turn, the side that goes first
alternating per graph, so that other jobs on the machine load both sides alike.
"""
from __future__ import annotations

import argparse
import json
import os
import select
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import akgpy
from akgpy.testing import check_program

CORPUS = Path(__file__).resolve().parents[1] / "corpus"


def corpus_files(root: Path) -> list[Path]:
    """The graphs under `root` (composite JSON, as .info or .json), in a stable order."""
    return sorted(p for p in root.rglob("*") if p.suffix in (".info", ".json"))


def schedule_path(prog) -> str:
    """'poly/isl-ast', 'poly/template' or 'plain (poly fell back: <reason>)' (explain()'s line)."""
    line = prog.explain().splitlines()[1]
    return line.removeprefix("schedule path: ").split(":")[0] if "fell back" not in line else \
        line.removeprefix("schedule path: ")


# one side of --ab: compiles each graph path read from stdin, answers one JSON line per graph
SERVE = """
import json, sys, time
import akgpy
first = True
for line in sys.stdin:
    path = line.strip()
    g = akgpy.load_composite(path)
    if first:  # imports and LLVM warm, as in the sequential run
        akgpy.fuse(g)
        first = False
    t0 = time.perf_counter()
    try:
        akgpy.fuse(g)
        status = "ok"
    except akgpy.AkgpyError as e:
        status = f"error: {type(e).__name__}: {e}"[:200]
    print(json.dumps({"s": time.perf_counter() - t0, "status": status}), flush=True)
"""


def _side(root: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(root), "AKGPY_CACHE": "off", "TVM_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-c", SERVE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env, cwd=str(root))


def _ask(proc: subprocess.Popen, path: Path, timeout_s: float) -> dict:
    proc.stdin.write(f"{path}\n")
    proc.stdin.flush()
    if not select.select([proc.stdout], [], [], timeout_s)[0]:
        raise TimeoutError(f"{path.name}: no answer within {timeout_s} s")
    return json.loads(proc.stdout.readline())


def ab(base: Path, files: list[Path], out: Path | None, timeout_s: float = 600) -> int:
    """Compile times of `base` and this checkout, interleaved per graph (see the module doc)."""
    sides = {"base": _side(base.resolve()), "new": _side(Path(__file__).resolve().parents[1])}
    rows = []
    try:
        for i, f in enumerate(files):
            row = {"graph": str(f.relative_to(CORPUS)), "load1": os.getloadavg()[0]}
            for name in (("base", "new") if i % 2 == 0 else ("new", "base")):
                got = _ask(sides[name], f, timeout_s)
                row[f"{name}_s"], row[f"{name}_status"] = got["s"], got["status"]
            rows.append(row)
            if out:
                with out.open("a") as w:
                    w.write(json.dumps(row) + "\n")
            print(f"[{i + 1}/{len(files)}] base {row['base_s']:.3f} s, new {row['new_s']:.3f} s  {f.name[:60]}",
                  file=sys.stderr, flush=True)
    finally:
        for p in sides.values():
            p.kill()
            p.wait()
    both = [r for r in rows if r["base_status"] == "ok" and r["new_status"] == "ok"]
    for name in ("base", "new"):
        t = sorted(r[f"{name}_s"] for r in both)
        print(f"{name}: median {statistics.median(t):.3f} s, p95 {t[min(len(t) - 1, int(0.95 * len(t)))]:.3f} s, "
              f"total {sum(t):.1f} s over {len(t)} graphs compiled by both")
    loads = [r["load1"] for r in rows]
    print(f"load average (1 min) during the run: median {statistics.median(loads):.1f}, max {max(loads):.1f}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--check", action="store_true", help="also run and compare against the reference")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--ab", type=Path, help="another checkout to compare compile times with")
    ap.add_argument("--every", type=int, default=1, help="with --ab: every K-th graph only")
    ap.add_argument("--jsonl", type=Path, help="with --ab: append one row per graph")
    args = ap.parse_args(argv)
    files = corpus_files(args.corpus)
    if args.limit:
        files = files[:args.limit]
    if args.ab:
        return ab(args.ab, files[::args.every], args.jsonl)
    if not files:
        print(f"no graphs under {args.corpus}", file=sys.stderr)
        return 2
    akgpy.fuse(akgpy.load_composite(files[0]))  # warm up imports and LLVM once
    rows = []
    for i, f in enumerate(files):
        rel = str(f.relative_to(args.corpus))
        g = akgpy.load_composite(f)
        t0 = time.perf_counter()
        path = "-"
        try:
            prog = akgpy.fuse(g)
            status = "ok"
        except akgpy.AkgpyError as e:
            status = f"error: {type(e).__name__}: {e}"
        dt = time.perf_counter() - t0
        if status == "ok":
            path = schedule_path(prog)
        if status == "ok" and args.check:
            bad = check_program(g, prog)
            status = "ok" if not bad else "mismatch: " + "; ".join(f"{m.tensor} max {m.max_abs:.3g}" for m in bad)
        rows.append({"graph": rel, "ops": len(g.ops), "compile_s": dt, "status": status, "path": path})
        if status != "ok":
            print(f"[{i + 1}/{len(files)}] {rel}: {status[:200]}", file=sys.stderr)
    times = sorted(r["compile_s"] for r in rows if r["status"] == "ok" or not args.check)
    ok = sum(r["status"] == "ok" for r in rows)
    p95 = times[min(len(times) - 1, int(0.95 * len(times)))]
    print(f"graphs: {len(rows)}  passed{' (compile + reference check)' if args.check else ' (compile)'}: {ok}")
    print(f"compile time per graph: median {statistics.median(times):.3f} s, p95 {p95:.3f} s, "
          f"max {times[-1]:.3f} s, total {sum(times):.1f} s")
    paths = Counter(r["path"].split(" (")[0] for r in rows if r["status"] == "ok")
    print("schedule paths: " + ", ".join(f"{k}: {v}" for k, v in paths.most_common()))
    for r in rows:
        if "fell back" in r["path"]:
            print(f"  fallback: {r['graph']}: {r['path'][:160]}")
    slow = sorted(rows, key=lambda r: -r["compile_s"])[:5]
    print("slowest: " + ", ".join(f"{Path(r['graph']).name[:40]} ({r['ops']} ops) {r['compile_s']:.2f} s" for r in slow))
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "median_s": statistics.median(times), "p95_s": p95,
                                         "total_s": sum(times), "passed": ok}, indent=1))
    return 0 if ok == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
