"""Compile every graph of corpus/ and report pass count and compile-time statistics.

    python bench/corpus_compile.py [--check] [--limit N] [--json out.json]

Compile time is the wall time of akgpy.fuse (load excluded; lowering, scheduling, LLVM codegen
and the JIT of the entry function included), measured sequentially in one warm process.
--check also runs each kernel on random inputs against the numpy reference (slow: minutes).
"""
from __future__ import annotations

import argparse
import json
import statistics
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--check", action="store_true", help="also run and compare against the reference")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    files = corpus_files(args.corpus)
    if args.limit:
        files = files[:args.limit]
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
