"""Tuning bench (issue 49 s4): per graph of the bench set, the default's time against the tuned
one, tuning wall time, and each searcher's best time within `--trials` over `--seeds` seeds
(geomean over seeds), with the trials each needed to reach 95% of the best it found.

    python -m bench.bench_tune [--set ../shared/bench/bench_set.txt] [--only SUBSTR] [--limit N]
        [--trials 64] [--seeds 3] [--search tpe,random] [--workers 2] [--json out.jsonl]

Every run tunes from scratch (cache=False) on this machine; run it on a quiet host.
"""
from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SET = HERE.parent.parent / "shared" / "bench" / "bench_set.txt"


def load_set(path: Path) -> list[Path]:
    corpus = path.parent.parent / "corpus"
    out = []
    for line in path.read_text().splitlines():
        rel = line.partition("#")[0].strip()
        if rel:
            out.append(corpus / rel)
    return out


def trials_to(history, fraction: float = 0.95) -> int | None:
    """Trials until the running best is within `fraction` of the final best (time <= best / fraction)."""
    ok = [t for t in history if t.status == "ok"]
    if not ok:
        return None
    best = min(t.time_s for t in ok)
    run = math.inf
    for n, t in enumerate((t for t in history if t.status != "illegal"), 1):
        if t.status == "ok":
            run = min(run, t.time_s)
        if run <= best / fraction:
            return n
    return None


def gmean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", type=Path, default=SET)
    ap.add_argument("--only", default="")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--trials", type=int, default=64)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--search", default="tpe,random")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)

    from akgpy import load_composite
    from akgpy.tune.executor import LocalExecutor
    from akgpy.tune.tuner import tune

    paths = [p for p in load_set(args.set) if args.only in p.name]
    if args.limit:
        paths = paths[:args.limit]
    searches = args.search.split(",")
    rows = []
    with LocalExecutor(args.workers) as ex:
        for path in paths:
            g = load_composite(path)
            row = {"graph": path.name[:60], "hash": g.hash()[:12], "runs": {}}
            for search in searches:
                for seed in range(args.seeds):
                    t = time.monotonic()
                    r = tune(g, trials=args.trials, search=search, seed=seed, cache=False, executor=ex,
                             workers=args.workers)
                    row["runs"].setdefault(search, []).append({
                        "seed": seed, "best_s": r.best_time_s, "default_s": r.default_time_s,
                        "best_searched_s": min(x.time_s for x in r.trials if x.status == "ok"),
                        "wall_s": time.monotonic() - t, "to95": trials_to(r.trials),
                        "failed": sum(x.status not in ("ok", "illegal") for x in r.trials),
                        "illegal": sum(x.status == "illegal" for x in r.trials)})
            rows.append(row)
            print(render_row(row), flush=True)
            if args.json:
                with args.json.open("a") as f:
                    f.write(json.dumps(row) + "\n")
    print(summary(rows, searches))
    return 0


def render_row(row) -> str:
    parts = [row["graph"][:40]]
    for search, runs in row["runs"].items():
        speed = gmean([r["default_s"] / r["best_s"] for r in runs if r["best_s"] and r["default_s"]])
        parts.append(f"{search}: best {gmean([r['best_searched_s'] for r in runs]) * 1e3:.3f} ms, "
                     f"x{speed:.3f} vs default, {gmean([r['wall_s'] for r in runs]):.0f} s, "
                     f"to95 {[r['to95'] for r in runs]}, failed {[r['failed'] for r in runs]}")
    return " | ".join(parts)


def summary(rows, searches) -> str:
    out = []
    for s in searches:
        speed = gmean([r["default_s"] / r["best_s"] for row in rows for r in row["runs"][s]
                       if r["best_s"] and r["default_s"]])
        out.append(f"{s}: tuned/default geomean x{speed:.3f}" if speed else f"{s}: no result")
    if len(searches) == 2:
        a, b = searches
        ratio = gmean([gmean([r["best_searched_s"] for r in row["runs"][b]]) /
                       gmean([r["best_searched_s"] for r in row["runs"][a]]) for row in rows])
        out.append(f"{a} vs {b}: best-found geomean ratio {b}/{a} = {ratio:.3f} (>1: {a} found faster kernels)")
    return "\n".join(out)


if __name__ == "__main__":
    raise SystemExit(main())
