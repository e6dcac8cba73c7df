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
