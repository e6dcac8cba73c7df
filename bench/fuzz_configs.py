"""Random legal schedule configs of `akgpy.tune.space`, each compiled and run with every kernel
argument between no-access pages (`akgpy.testing.run_fenced`) against the reference.

    python bench/fuzz_configs.py [--points N] [--seed S] [--corpus-graphs K] [--max-mb M]
                                 [--only SUBSTRING] [--graphs IDS] [--out FILE] [--resume]
    python bench/fuzz_configs.py --minimise CASE [--out FILE]

A legal config (one `Space.legal` accepts) must never give a kernel that faults or answers
wrong: each such case is a compiler defect, not a failed trial. Graphs: the real-tune graph of
tests/test_tuner.py, the bench set graphs moving at most `--max-mb` MB, `kernels/` at their
small sizes, and `--corpus-graphs` corpus graphs drawn with the seed (same size bound).

Per graph a child process builds the space, samples `--points` legal points (uniform over
`Space.dimensions`, by rejection with `Space.legal`, seeded by (seed, graph)), then compiles
and runs each. It prints a line before each phase, so a child that dies (a signal) or stops
answering (`--timeout` s) names the case; the next child resumes after it from the config
JSON. One JSON line per case goes to `--out` (status: ok | mismatch | fault | hang |
compile_error | exception, with the graph, point and `cfg.to_json()`); `--resume` skips the
cases already there. Prints the counts per status and the failing cases; exits 1 if any case
failed. `--minimise CASE` sets the failing case's dimensions back to their defaults one at a
time while it still fails the same way, and prints the smallest point found.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import selectors
import subprocess
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CORPUS = ROOT / "corpus"
sys.path.insert(0, str(ROOT))  # this checkout's akgpy and kernels/, whatever is installed
STATUSES = ("ok", "mismatch", "fault", "hang", "compile_error", "exception")


# --- graphs -----------------------------------------------------------------------------

def tuner_graph():
    """tests/test_tuner.py's real-tune graph (the two crashing candidates came from it)."""
    from akgpy import GraphBuilder
    b = GraphBuilder("tt_rowsum")
    x = b.input("x", (128, 512), "float32")
    b.output(b.op("Exp", [x * 2.0 + 1.0], (128, 512), "float32").sum(axis=1))
    return b.build()


def moved_mb(g) -> float:
    return sum(g.tensors[n].size * _itemsize(g.tensors[n].dtype) for n in (*g.inputs, *g.outputs)) / 1e6


def _itemsize(dtype: str) -> int:
    import numpy as np
    from akgpy.dtypes import to_numpy
    return np.dtype(to_numpy(dtype)).itemsize


def graph_ids(seed: int, corpus_graphs: int, max_mb: float) -> list[str]:
    """Graph ids: "tuner", "kernels:<name>", "corpus:<path under corpus/>" (bench set first)."""
    from akgpy.frontends.composite import load_composite
    ids = ["tuner"]
    from kernels import PATTERNS
    ids += [f"kernels:{n}" for n in sorted(PATTERNS)]
    bench = [ln.split("#")[0].strip() for ln in (HERE / "bench_set.txt").read_text().splitlines()]
    bench = [b for b in bench if b]
    corpus = sorted(str(p.relative_to(CORPUS)) for p in CORPUS.rglob("*") if p.suffix in (".info", ".json"))
    rng = random.Random(seed)
    drawn = [c for c in rng.sample(corpus, min(len(corpus), 4 * corpus_graphs)) if c not in bench]
    picked, n_drawn = [], 0
    for rel in bench + drawn:
        is_bench = rel in bench
        if not is_bench and n_drawn >= corpus_graphs:
            continue
        try:
            g = load_composite(CORPUS / rel)
        except Exception:  # noqa: BLE001 - a file the loader refuses is not this check's business
            continue
        if moved_mb(g) <= max_mb:
            picked.append(f"corpus:{rel}")
            n_drawn += not is_bench
    return ids + picked


def load_graph(gid: str):
    from akgpy.frontends.composite import load_composite
    if gid == "tuner":
        return tuner_graph()
    if gid.startswith("kernels:"):
        from kernels import PATTERNS
        build = PATTERNS[gid.split(":", 1)[1]]
        return build(**build.small)
    if gid.startswith("corpus:"):
        return load_composite(CORPUS / gid.split(":", 1)[1])
    raise SystemExit(f"unknown graph id {gid!r}")


# --- the child: plan and run one graph's cases ------------------------------------------

def _emit(**kw):
    print(json.dumps(kw), flush=True)


def sample_points(sp, n: int, rng: random.Random, max_tries: int) -> list[dict]:
    """Up to n distinct legal points, uniform over the dimensions, by rejection."""
    from akgpy.tune.search import _key
    out, seen = [], set()
    for _ in range(max_tries):
        if len(out) >= n or not sp.dimensions:
            break
        p = {d.name: rng.choice(d.values) for d in sp.dimensions}
        k = _key(p)
        if k in seen:
            continue
        seen.add(k)
        ok, _why = sp.legal(p)
        if ok:
            out.append(p)
    return out


def child_plan(gid: str, n: int, seed: int) -> list[dict]:
    """Sample the graph's legal points and print them (its cases)."""
    from akgpy.tune.space import space
    sp = space(load_graph(gid))
    rng = random.Random(f"{seed}:{gid}")
    pts = sample_points(sp, n, rng, max_tries=8 * n)
    cases = [{"case": f"{gid}#{seed}.{i}", "point": p, "config": sp.config(p).to_json()} for i, p in enumerate(pts)]
    for c in cases:
        _emit(kind="plan", **c)
    _emit(kind="planned", n=len(pts), dims=len(sp.dimensions))
    return cases


def child_configs(gid: str, points: list[dict]) -> None:
    """For each point: whether it is legal and its config JSON (the minimiser's candidates)."""
    from akgpy.tune.space import space
    sp = space(load_graph(gid))
    defaults = {d.name: d.values[0] for d in sp.dimensions}
    _emit(kind="defaults", point=defaults)
    for i, p in enumerate(points):
        p = {k: v for k, v in p.items() if k in defaults}
        ok, why = sp.legal(p)
        _emit(kind="config", i=i, legal=ok, why=why, point=p, config=sp.config(p).to_json() if ok else None)


def child_run(gid: str, spec: dict) -> None:
    """Run spec["cases"], or plan the graph (spec["plan"]: points, seed) and run its cases but
    those in spec["skip"]: one process, one tvm import, while nothing faults."""
    if "plan" in spec:
        skip = set(spec.get("skip", ()))
        cases = [c for c in child_plan(gid, *spec["plan"]) if c["case"] not in skip]
    else:
        cases = spec["cases"]
    import akgpy
    from akgpy.errors import AkgpyError
    from akgpy.schedule.config import ScheduleConfig
    from akgpy.testing import check_program
    g = load_graph(gid)
    for c in cases:
        _emit(kind="start", case=c["case"], phase="compile")
        try:
            prog = akgpy.fuse(g, config=ScheduleConfig.from_json(c["config"]), cache=False)
        except AkgpyError as e:
            _emit(kind="done", case=c["case"], status="compile_error", error=f"{type(e).__name__}: {e}"[:2000])
            continue
        except Exception as e:  # noqa: BLE001 - any other exception is a defect of its own
            _emit(kind="done", case=c["case"], status="exception", error=traceback.format_exc()[-2000:])
            continue
        _emit(kind="start", case=c["case"], phase="run")
        try:
            bad = check_program(g, prog, fenced=True)
        except Exception:  # noqa: BLE001
            _emit(kind="done", case=c["case"], status="exception", error=traceback.format_exc()[-2000:])
            continue
        _emit(kind="done", case=c["case"], status="mismatch" if bad else "ok",
              error="; ".join(str(m) for m in bad)[:2000] if bad else "")


# --- the parent ---------------------------------------------------------------------------

def _child(args: list[str], timeout):
    """Run a child, yielding its JSON lines; ends with ("exit", (rc, stderr tail)) or ("hang",
    None) when no line came within timeout() seconds."""
    env = {**os.environ, "TVM_NUM_THREADS": os.environ.get("TVM_NUM_THREADS", "1"), "AKGPY_CACHE": "off"}
    proc = subprocess.Popen([sys.executable, __file__, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=ROOT)
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        while True:
            if not sel.select(timeout()):
                proc.kill()
                proc.wait()
                yield "hang", None
                return
            line = proc.stdout.readline()
            if not line:
                break
            try:
                yield "line", json.loads(line)
            except json.JSONDecodeError:
                pass
        proc.wait()
        yield "exit", (proc.returncode, proc.stderr.read()[-1500:])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def run_graph(gid: str, args, done: set, out) -> list[dict]:
    """Plan and run one graph's cases (skipping `done`), a fresh child after each fault."""
    return _run_cases(gid, {"plan": [args.points, args.seed], "skip": sorted(done)}, args, out)


def _run_cases(gid: str, spec: dict, args, out) -> list[dict]:
    plan = list(spec.get("cases", ()))
    skip = set(spec.get("skip", ()))
    records, finished = [], set()
    path = Path(args.out).with_suffix(f".{os.getpid()}.todo.json")
    while True:
        path.write_text(json.dumps(spec))
        current, phase = None, None
        for what, val in _child(["--child-run", gid, str(path)],
                                lambda: args.timeout if current else args.plan_timeout):
            if what == "line" and val.get("kind") == "plan":
                plan.append({k: val[k] for k in ("case", "point", "config")})
            elif what == "line" and val.get("kind") == "start":
                current, phase = val["case"], val["phase"]
            elif what == "line" and val.get("kind") == "done":
                finished.add(val["case"])
                records.append(_record(gid, plan, val["case"], val["status"], val.get("error", ""), out))
            elif what == "hang" or (what == "exit" and val[0] != 0):
                if current is None or current in finished:
                    print(f"child {'hang' if what == 'hang' else f'exit {val[0]}'} outside a case: {gid}"
                          + (f"\n{val[1]}" if val else ""), flush=True)
                    current = None
                    break
                status = "hang" if what == "hang" else "fault"
                why = f"{phase}: " + (f"no answer in {args.timeout} s" if what == "hang"
                                      else f"child exit {val[0]}: {val[1]}")
                finished.add(current)
                records.append(_record(gid, plan, current, status, why, out))
        todo = [c for c in plan if c["case"] not in finished and c["case"] not in skip]
        if not todo or current is None:
            break
        spec = {"cases": todo}
    path.unlink(missing_ok=True)
    return records


def _record(gid, plan, case, status, error, out) -> dict:
    c = next(c for c in plan if c["case"] == case)
    rec = {"case": case, "graph": gid, "status": status, "point": c["point"], "config": c["config"], "error": error}
    out.write(json.dumps(rec) + "\n")
    out.flush()
    if status != "ok":
        print(f"{status}: {case} {error[:300]}", flush=True)
    return rec


def _outcomes(gid: str, cases: list[dict], args) -> dict[str, str]:
    """case id -> status of running `cases` (each with "case", "point", "config")."""
    import io
    sink = io.StringIO()
    quiet = argparse.Namespace(**{**vars(args), "points": len(cases)})
    return {r["case"]: r["status"] for r in _run_cases(gid, {"cases": cases}, quiet, sink)}


def minimise(case: str, args) -> dict:
    """The failing `case` of --out with dimensions set back to their default one at a time
    while it still fails the same way (and stays legal): the smallest point found."""
    rec = next(json.loads(ln) for ln in Path(args.out).read_text().splitlines()
               if ln.strip() and json.loads(ln)["case"] == case)
    gid, point, status = rec["graph"], dict(rec["point"]), rec["status"]
    defaults = None
    while True:
        path = Path(args.out).with_suffix(f".{os.getpid()}.min.json")
        names = list(point)
        if defaults is None:
            path.write_text(json.dumps([point]))
            for what, val in _child(["--child-configs", gid, str(path)], lambda: args.plan_timeout):
                if what == "line" and val.get("kind") == "defaults":
                    defaults = val["point"]
        cands = [{**point, k: defaults[k]} for k in names if point[k] != defaults[k]]
        path.write_text(json.dumps(cands))
        legal = []
        for what, val in _child(["--child-configs", gid, str(path)], lambda: args.plan_timeout):
            if what == "line" and val.get("kind") == "config" and val["legal"]:
                legal.append({"case": f"min{val['i']}", "point": val["point"], "config": val["config"]})
        got = _outcomes(gid, legal, args) if legal else {}
        still = [c for c in legal if got.get(c["case"]) == status]
        print(f"{len(point) - sum(point[k] == defaults[k] for k in point)} non-default, "
              f"{len(legal)} legal candidate(s), {len(still)} still {status}", flush=True)
        if not still:
            break
        point = still[0]["point"]
    changed = {k: v for k, v in point.items() if v != defaults[k]}
    print(json.dumps({"graph": gid, "status": status, "point": changed}), flush=True)
    return changed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=8, help="legal points per graph")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--corpus-graphs", type=int, default=30)
    ap.add_argument("--max-mb", type=float, default=16.0, help="bound on the MB a graph moves")
    ap.add_argument("--only", default="", help="graph ids containing this substring")
    ap.add_argument("--graphs", default="", help="comma-separated graph ids (see --list) instead of the list")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds one case may take")
    ap.add_argument("--plan-timeout", type=float, default=1200.0)
    ap.add_argument("--out", default=str(HERE / "results" / "fuzz_configs.jsonl"))
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--list", action="store_true", help="print the graph ids and exit")
    ap.add_argument("--minimise", metavar="CASE", help="minimise a failing case of --out and exit")
    ap.add_argument("--child-configs", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--child-run", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child_configs:
        gid, path = args.child_configs
        child_configs(gid, json.loads(Path(path).read_text()))
        return 0
    if args.minimise:
        minimise(args.minimise, args)
        return 0
    if args.child_run:
        gid, path = args.child_run
        child_run(gid, json.loads(Path(path).read_text()))
        return 0
    ids = args.graphs.split(",") if args.graphs else graph_ids(args.seed, args.corpus_graphs, args.max_mb)
    ids = [i for i in ids if args.only in i]
    if args.list:
        print("\n".join(ids))
        return 0
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    done = set()
    if args.resume and Path(args.out).exists():
        done = {json.loads(ln)["case"] for ln in Path(args.out).read_text().splitlines() if ln.strip()}
    counts = dict.fromkeys(STATUSES, 0)
    t0 = time.time()
    with open(args.out, "a" if args.resume else "w") as out:
        for k, gid in enumerate(ids):
            if sum(d.startswith(f"{gid}#{args.seed}.") for d in done) >= args.points:
                continue
            print(f"[{k + 1}/{len(ids)}] {gid} ({time.time() - t0:.0f} s)", flush=True)
            for r in run_graph(gid, args, done, out):
                counts[r["status"]] += 1
    print(f"{len(ids)} graphs, {sum(counts.values())} cases: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    return 1 if any(v for k, v in counts.items() if k != "ok") else 0


if __name__ == "__main__":
    sys.exit(main())
