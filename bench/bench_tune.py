"""Tuning bench (issue 49 s4): searchers compared on recorded pools, and live tuning runs.

    # 1. measure a candidate pool per graph once (the default + POOL points), append to JSONL
    python -m bench.bench_tune pool --pool 256 --graphs 3,10,16 --jsonl bench/results/tune_pools.jsonl \\
        [--export schedules/]
    # 2. replay every searcher x seed on the recorded pools (no machine needed), write the table
    python -m bench.bench_tune replay --jsonl bench/results/tune_pools.jsonl --trials 64 --seeds 5 \\
        --md bench/results/tune.md
    # 3. live: tune each graph (default searcher, 64 trials), default vs tuned, wall time
    python -m bench.bench_tune live --graphs all --jsonl bench/results/tune_live.jsonl [--export schedules/]

`--graphs` takes indices into bench/bench_set.txt (0-based, comma separated) or `all`; every
mode resumes: a graph whose structural hash is already in the JSONL is skipped. Tuning runs
from scratch (cache=False) on this machine.

A pool replay is exact: each searcher chooses from the same recorded points, so "best within
64 trials" and "trials to reach 95% of the pool's best" need no further measurement.
"""
from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SET = HERE / "bench_set.txt"


def load_set(path: Path = SET) -> list[tuple[Path, str]]:
    """(graph path, pattern) per line of the bench set."""
    corpus = path.parent.parent / "corpus"
    out = []
    for line in path.read_text().splitlines():
        rel, _, note = line.partition("#")
        if rel.strip():
            out.append((corpus / rel.strip(), note.strip().split(",")[0]))
    return out


def gmean(xs):
    xs = [x for x in xs if x]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def _done(jsonl: Path) -> set[str]:
    if not jsonl.exists():
        return set()
    return {json.loads(line)["hash"] for line in jsonl.read_text().splitlines() if line.strip()}


def _pick(graphs: str) -> list[tuple[Path, str]]:
    rows = load_set()
    if graphs == "all":
        return rows
    return [rows[int(i)] for i in graphs.split(",")]


def _status(t) -> str | float | None:
    if t.status == "illegal":
        return "illegal"
    return t.time_s if t.status == "ok" else None


def _tuned(args, **options):
    """(path, pattern, graph, TuneResult, wall s) per graph of `--graphs` not yet in `--jsonl`,
    each tuned with `options` on one LocalExecutor."""
    from akgpy import load_composite
    from akgpy.tune.executor import LocalExecutor
    from akgpy.tune.tuner import tune

    done = _done(args.jsonl)
    with LocalExecutor(args.workers) as ex:
        for path, pattern in _pick(args.graphs):
            g = load_composite(path)
            if g.hash() in done:
                continue
            t0 = time.monotonic()
            r = tune(g, seed=0, cache=False, executor=ex, workers=args.workers, **options)
            yield path, pattern, g, r, time.monotonic() - t0


def _append(args, g, r, row: dict) -> None:
    with args.jsonl.open("a") as f:
        f.write(json.dumps(row) + "\n")
    if args.export:
        export(args.export, g, r)


def cmd_pool(args) -> int:
    """Measure the default and `--pool` candidates of each graph (random search over exactly
    that pool: every point once), one JSONL row per graph."""
    for path, pattern, g, r, wall in _tuned(args, trials=args.pool + 1, search="random", pool_size=args.pool):
        dims = [[d.name, _jsonish(list(d.values))] for d in r.dimensions]
        idx = {d[0]: {repr(v): i for i, v in enumerate(d[1])} for d in dims}

        def enc(point):
            return [idx[n][repr(_jsonish(point[n]))] for n, _ in dims]
        row = {"graph": path.name[:70], "pattern": pattern, "hash": g.hash(), "pool": args.pool,
               "dims": dims, "wall_s": wall, "phases": r.phases,
               "default_retimed_s": r.default_time_s, "best_retimed_s": r.best_time_s,
               "best_trial": r.best_trial, "best_config": r.trials[r.best_trial].config,
               "points": [[enc(t.point), _status(t)] for t in r.trials]}
        _append(args, g, r, row)
        ok = [t.time_s for t in r.trials if t.status == "ok"]
        print(f"{pattern:12s} {len(r.trials)} points, default {r.trials[0].time_s * 1e3:.3f} ms, "
              f"best {min(ok) * 1e3:.3f} ms, {row['wall_s']:.0f} s", flush=True)
    return 0


def _phases(p: dict) -> str:
    return ", ".join(f"{k} {v:.0f} s" for k, v in p.items())


def _jsonish(v):
    """A dimension value as JSON gives it back (tuples become lists)."""
    return json.loads(json.dumps(v))


def replay_graph(row: dict, searchers, trials: int, seeds: int) -> dict:
    """Every searcher x seed replayed on one recorded pool."""
    from akgpy.tune.search import candidate_pool, point_key, replay
    dims = [(n, vals) for n, vals in row["dims"]]
    names = [n for n, _ in row["dims"]]

    def dec(ix):
        return {n: row["dims"][k][1][i] for k, (n, i) in enumerate(zip(names, ix))}
    table = {point_key(dec(ix)): r for ix, r in row["points"]}
    pool = [p for p in candidate_pool(dims, row["pool"], 0)]
    missing = [p for p in pool if point_key(p) not in table]
    if missing:
        raise SystemExit(f"{row['graph']}: {len(missing)} pool points were not recorded (space changed?)")
    ok = [r for r in table.values() if isinstance(r, float)]
    best, default = min(ok), table[point_key(dec(row["points"][0][0]))]
    out = {"graph": row["graph"], "pattern": row["pattern"], "hash": row["hash"], "pool_best_s": best,
           "default_s": default, "points": len(table), "failed": sum(r is None for r in table.values()),
           "illegal": sum(r == "illegal" for r in table.values()), "pool_wall_s": row["wall_s"],
           "phases": row.get("phases"), "default_retimed_s": row.get("default_retimed_s"),
           "best_retimed_s": row.get("best_retimed_s"), "runs": {}}
    for name in searchers:
        runs = []
        for seed in range(seeds):
            got = replay(name, dims, table, trials, seed, pool=pool)
            times = [t for _, t in got if isinstance(t, float)]
            run, to95 = math.inf, None
            for n, (_, t) in enumerate(got, 1):
                run = min(run, t) if isinstance(t, float) else run
                if to95 is None and run <= best / 0.95:
                    to95 = n
            runs.append({"seed": seed, "best_s": min(times), "to95": to95, "trials": len(got)})
        out["runs"][name] = runs
    return out


def cmd_replay(args) -> int:
    rows = [json.loads(line) for line in args.jsonl.read_text().splitlines() if line.strip()]
    searchers = args.search.split(",")
    res = [replay_graph(r, searchers, args.trials, args.seeds) for r in rows]
    text = render(res, searchers, args.trials, args.seeds)
    print(text)
    if args.md:
        args.md.write_text(text)
    if args.out:
        args.out.write_text("".join(json.dumps(r) + "\n" for r in res))
    return 0


def render(res, searchers, trials, seeds) -> str:
    lines = [f"Replay on recorded pools: best time within {trials} trials (default = trial 0) over "
             f"{seeds} seeds, as a ratio to the pool's best (1.000 = found it); to95 = trials until within "
             "95% of the pool's best (- = not within the budget).", "",
             "| graph | pattern | points (failed, illegal) | default / pool best | " +
             " | ".join(f"{s}: best/pool-best (geomean) | {s}: to95 per seed" for s in searchers) + " |",
             "|---|---|---|---|" + "---|---|" * len(searchers)]
    for r in res:
        cells = [r["graph"][:40], r["pattern"], f"{r['points']} ({r['failed']}, {r['illegal']})",
                 f"{r['default_s'] / r['pool_best_s']:.3f}" if isinstance(r["default_s"], float) else "failed"]
        for s in searchers:
            runs = r["runs"][s]
            cells.append(f"{gmean([x['best_s'] / r['pool_best_s'] for x in runs]):.3f}")
            cells.append(" ".join(str(x["to95"] or "-") for x in runs))
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for s in searchers:
        g = gmean([gmean([x["best_s"] / r["pool_best_s"] for x in r["runs"][s]]) for r in res])
        reach = sum(all(x["to95"] for x in r["runs"][s]) for r in res)
        speed = gmean([r["default_s"] / gmean([x["best_s"] for x in r["runs"][s]]) for r in res
                       if isinstance(r["default_s"], float)])
        lines.append(f"- {s}: best-within-{trials} / pool best geomean {g:.4f}; default / best-within-{trials} "
                     f"geomean x{speed:.3f}; within 95% of the pool's best in every seed on {reach}/{len(res)} graphs")
    lines += ["", "Pool runs (the default and every pool point measured once, then the 5 fastest and the default "
              "re-timed interleaved, 5 rounds): the re-timed default against the re-timed winner, and where the "
              "run's wall time went.", "",
              "| graph | pattern | default (re-timed) ms | winner (re-timed) ms | speedup | wall s | "
              "space s | legality s | builds s | measure s | re-time s |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res:
        d, b, ph = r.get("default_retimed_s"), r.get("best_retimed_s"), r.get("phases") or {}
        lines.append("| " + " | ".join([
            r["graph"][:40], r["pattern"], f"{d * 1e3:.3f}" if d else "-", f"{b * 1e3:.3f}" if b else "-",
            f"{d / b:.3f}" if d and b else "-", f"{r['pool_wall_s']:.0f}",
            *[f"{ph[k]:.0f}" if k in ph else "-" for k in ("space", "legal", "build", "measure", "retime")]]) + " |")
    lines.append("")
    if "random" in searchers:
        for s in searchers:
            if s != "random":
                ratio = gmean([gmean([x["best_s"] for x in r["runs"]["random"]]) /
                               gmean([x["best_s"] for x in r["runs"][s]]) for r in res])
                lines.append(f"- {s} vs random: geomean of random's best / {s}'s best = {ratio:.4f} "
                             f"(> 1: {s} finds faster kernels at equal trials)")
    return "\n".join(lines) + "\n"


def cmd_live(args) -> int:
    """tune() each graph with the default searcher; default vs tuned, wall time; optionally the
    winners exported as shipped schedule records."""
    for path, pattern, g, r, wall in _tuned(args, trials=args.trials, search=args.search):
        row = {"graph": path.name[:70], "pattern": pattern, "hash": g.hash(), "search": args.search,
               "trials": len(r.trials), "default_s": r.default_time_s, "best_s": r.best_time_s,
               "speedup": r.speedup, "wall_s": wall,
               "failed": sum(t.status not in ("ok", "illegal") for t in r.trials),
               "illegal": sum(t.status == "illegal" for t in r.trials),
               "config": r.trials[r.best_trial].config, "best_trial": r.best_trial, "phases": r.phases}
        _append(args, g, r, row)
        print(f"{pattern:12s} default {r.default_time_s * 1e3:.3f} ms, tuned {r.best_time_s * 1e3:.3f} ms, "
              f"x{r.speedup:.3f}, {row['wall_s']:.0f} s ({_phases(r.phases)})", flush=True)
    return 0


# a winner re-timed less than this much faster than the default is within this machine's noise
EXPORT_MIN_SPEEDUP = 1.03


def export(directory: Path, g, r) -> Path | None:
    """The winner as a shipped schedule record, only where its re-timing beats the default's
    by EXPORT_MIN_SPEEDUP."""
    from akgpy.tune import schedules
    if r.best_trial == 0 or not r.speedup or r.speedup < EXPORT_MIN_SPEEDUP:
        return None
    return schedules.write(directory, schedules.from_result(g, r))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pool")
    p.add_argument("--pool", type=int, default=256)
    p.add_argument("--graphs", default="all")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--jsonl", type=Path, required=True)
    p.add_argument("--export", type=Path, help="the re-timed winner as a shipped record (where it beat the default)")
    p = sub.add_parser("replay")
    p.add_argument("--jsonl", type=Path, required=True)
    p.add_argument("--trials", type=int, default=64)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--search", default="model,tpe,random")
    p.add_argument("--md", type=Path)
    p.add_argument("--out", type=Path)
    p = sub.add_parser("live")
    p.add_argument("--graphs", default="all")
    p.add_argument("--trials", type=int, default=64)
    p.add_argument("--search", default=None)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--jsonl", type=Path, required=True)
    p.add_argument("--export", type=Path)
    args = ap.parse_args(argv)
    return {"pool": cmd_pool, "replay": cmd_replay, "live": cmd_live}[args.cmd](args)


if __name__ == "__main__":
    raise SystemExit(main())
