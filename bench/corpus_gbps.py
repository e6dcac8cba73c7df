"""Time every memory-bound corpus graph's kernels and list them by achieved GB/s, lowest first.

    python bench/corpus_gbps.py [--min-mb 4] [--plain] [--jsonl rows.jsonl] [--top 40]

A poly-vs-plain ratio flags only what the poly schedule made worse; sorted by GB/s, the list
also shows graphs both schedules run slowly (the NZ softmaxes at 1 GB/s, yolo's bias + transpose
at 5 GB/s), which is where the schedule defects fixed from this list were. Each graph: kernels
alone (arguments bound once, bench_cpu.prebound), the best of 3 medians of >= 10 calls. Graphs
with a MatMul or Conv2D (compute-bound) and graphs moving under --min-mb are skipped. On a
shared machine single readings vary by +-35%: confirm a lead with an interleaved A/B before
acting on it. With --jsonl, rows already in the file are kept and not re-timed (resume).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import akgpy
from akgpy.testing import random_inputs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_cpu import nbytes, prebound  # noqa: E402
from corpus_compile import CORPUS  # noqa: E402

COMPUTE_BOUND = {"MatMul", "BatchMatMul", "Conv2D"}


def best_ms(call) -> float:
    """The best of 3 medians of at least 10 calls (up to 200 within 50 ms), in ms."""
    medians = []
    for _ in range(3):
        call()
        xs, t1 = [], time.perf_counter()
        while len(xs) < 10 or (time.perf_counter() - t1 < 0.05 and len(xs) < 200):
            t0 = time.perf_counter()
            call()
            xs.append(time.perf_counter() - t0)
        medians.append(statistics.median(xs) * 1e3)
    return min(medians)


def measure(f: Path, min_bytes: int, plain: bool) -> dict | None:
    g = akgpy.load_composite(f)
    if any(op.name in COMPUTE_BOUND for op in g.ops):
        return None
    moved = nbytes(g, g.inputs) + nbytes(g, g.outputs)  # as bench_cpu counts them
    if moved < min_bytes:
        return None
    ins = random_inputs(g)
    row = {"graph": str(f.relative_to(CORPUS)), "mb": moved / 1e6}
    row["poly_ms"] = best_ms(prebound(akgpy.fuse(g), ins))
    row["gbps"] = moved / 1e6 / row["poly_ms"]
    if plain:
        row["plain_ms"] = best_ms(prebound(akgpy.fuse(g, schedule="plain"), ins))
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--min-mb", type=float, default=4.0)
    ap.add_argument("--plain", action="store_true", help="also time the plain schedule (poly/plain column)")
    ap.add_argument("--jsonl", type=Path, help="append each row here; rows already there are not re-timed")
    ap.add_argument("--top", type=int, default=40, help="rows to print (lowest GB/s first)")
    args = ap.parse_args(argv)
    files = sorted(p for p in args.corpus.rglob("*") if p.suffix in (".info", ".json") and p.name != "README.json")
    rows = []
    if args.jsonl and args.jsonl.exists():
        rows = [json.loads(line) for line in args.jsonl.read_text().splitlines() if line.strip()]
    done = {r["graph"] for r in rows}
    out = args.jsonl.open("a") if args.jsonl else None
    for f in files:
        if str(f.relative_to(args.corpus)) in done:
            continue
        try:
            row = measure(f, int(args.min_mb * 1e6), args.plain)
        except akgpy.AkgpyError as e:
            print(f"{f.name}: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        if row is not None:
            rows.append(row)
            if out:
                out.write(json.dumps(row) + "\n")
                out.flush()
    rows.sort(key=lambda r: r["gbps"])
    print(f"{len(rows)} graphs moving >= {args.min_mb:g} MB, lowest GB/s first (kernels alone)")
    for r in rows[:args.top]:
        ratio = f"  poly/plain {r['poly_ms'] / r['plain_ms']:.2f}" if "plain_ms" in r else ""
        print(f"{r['gbps']:7.1f} GB/s {r['mb']:8.1f} MB {r['poly_ms']:9.3f} ms{ratio}  {r['graph']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
