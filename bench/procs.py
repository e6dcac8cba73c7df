"""What bench_models.py and bench_torch.py share: each executor runs in its own process (two
thread pools in one process fight over the cores), and a child reports one JSON line.

A child times its executor alone: warm-up calls, then `rounds` x `repeat` timed calls, the
median. The parent runs the executors one after the other and the whole set `runs` times, so
the spread between runs shows the noise of this shared machine."""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]


def thread_env(threads: int, cache_dir: str) -> dict:
    """Equal thread counts for every runtime, and cold compile caches (akgpy's and inductor's)."""
    env = dict(os.environ)
    env.update(TVM_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads), AKGPY_CACHE=str(Path(cache_dir) / "akgpy"),
               TORCHINDUCTOR_CACHE_DIR=str(Path(cache_dir) / "inductor"), PYTHONPATH=str(ROOT))
    return env


def run_child(script: str, args: list[str], threads: int, timeout: float = 1800) -> dict:
    """Runs `python script --child args...` in a fresh process with cold caches; its last stdout
    line is the JSON result (or {"error": ...})."""
    with tempfile.TemporaryDirectory(prefix="akgpy-bench-") as d:
        cmd = [sys.executable, script, "--child", *args]
        try:
            p = subprocess.run(cmd, env=thread_env(threads, d), capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        return {"error": f"exit {p.returncode}: {p.stderr.strip().splitlines()[-1:] or p.stdout[-300:]}"}
    return json.loads(lines[-1])


def median_ms(fn: Callable[[], object], repeat: int, rounds: int, warm: int = 5) -> float:
    """Median of per-round medians (ms): a round's median drops single slow calls, the median over
    rounds a slow round."""
    for _ in range(warm):
        fn()
    per_round = []
    for _ in range(rounds):
        ts = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        per_round.append(statistics.median(ts))
    return statistics.median(per_round) * 1e3


def geomean(xs: list[float]) -> float:
    xs = [x for x in xs if x and x > 0]
    return float(statistics.geometric_mean(xs)) if xs else float("nan")


def fmt(v, spec: str = "{:.2f}") -> str:
    return "n/a" if v is None else spec.format(v)


def arguments(doc: str, child_meta: tuple[str, str], executors: tuple[str, ...]):
    """The options both benches take; `--child A B` is the internal one a child runs with."""
    import argparse
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--child", nargs=2, metavar=child_meta, help=argparse.SUPPRESS)
    ap.add_argument("--models", default=None, help="comma-separated; default: every zoo_torch.BENCH model")
    ap.add_argument("--executors", default=",".join(executors))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=2, help="times the whole set runs (noise check)")
    ap.add_argument("--json", default=None)
    ap.add_argument("--out", default=None, help="also write the table here")
    return ap


def drive(script: str, a, targets: dict[str, str], table: Callable[[list[dict], int], str]) -> int:
    """Every (model, executor) child, the whole set `a.runs` times, then the table; `targets`
    maps a model to what its child is given (the model's name, or its exported file)."""
    rows = []
    for run in range(a.runs):
        for model, target in targets.items():
            for ex in a.executors.split(","):
                r = run_child(script, [target, ex, "--threads", str(a.threads), "--repeat", str(a.repeat),
                                       "--rounds", str(a.rounds)], a.threads)
                r.update(model=model, executor=ex, run=run)
                rows.append(r)
                print(json.dumps(r), file=sys.stderr)
    text = table(rows, a.runs)
    print(text)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    if a.out:
        Path(a.out).write_text(text + "\n")
    return 0
