"""Stock MindSpore 2.10 on CPU with akgpy as its AKG, against its bundled AKG and against no
graph-kernel fusion: the zoo networks' step time (median of >= 50 steps) and first-step
(compile) time, each configuration in its own process with a fresh MS_COMPILER_CACHE_PATH.

    python bench/bench_mindspore.py [--steps 201] [--rounds 3] [--networks a,b] [--out bench/results/mindspore]

Writes `<out>.md` (the table) and `<out>.json` (the rows). Configurations run interleaved per
network (akgpy, bundled, nofusion, in that order) so a change in the machine's load hits all
three, and each of --rounds rounds runs every configuration once more (the table holds the medians
over rounds); akgpy compiles into a fresh compile cache of its own, so its compile time is cold like the
bundled AKG's. Needs `mindspore==2.10.0` and `decorator`.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from akgpy.errors import AkgpyError  # noqa: E402
from akgpy.mindspore.runner import FLAGS, MODES, run_network  # noqa: E402
from akgpy.mindspore.zoo import NETWORKS  # noqa: E402
from akgpy.tune.machine import cpu_model  # noqa: E402

DEFAULT_OUT = REPO / "bench" / "results" / "mindspore"


def _commit() -> str:
    r = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip() or "?"


def bench(names: list[str], steps: int, timeout: float, rounds: int = 1) -> list[dict]:
    """One row per network. Each round runs every network in every mode (cold caches each time);
    a row's step and compile times are the medians over the rounds, `runs` keeps every round."""
    rows = {name: {"network": name, "loads": [], **{m: {"runs": []} for m in MODES}} for name in names}
    with tempfile.TemporaryDirectory(prefix="akgpy_bench_ms_") as tmp:
        for k in range(rounds):
            for name in names:
                row = rows[name]
                row["loads"].append(os.getloadavg()[0])
                for mode in MODES:
                    cache = Path(tmp) / f"{k}_{name}" / mode
                    env = {"AKGPY_CACHE": str(cache / "akgpy_cache")}
                    try:
                        r = run_network(name, mode, steps, cache, timeout, env=env)
                    except AkgpyError as e:
                        row[mode]["error"] = str(e).splitlines()[0][:300]
                        print(f"{name} {mode}: FAILED {row[mode]['error']}", flush=True)
                        continue
                    row[mode]["runs"].append({k: r[k] for k in ("compile_s", "step_s", "steps", "threads_last", "meta")})
                    print(f"round {k} {name} {mode}: step {r['step_s'] * 1e3:.3f} ms, compile {r['compile_s']:.2f} s, "
                          f"meta {r['meta']}", flush=True)
                row["loads"].append(os.getloadavg()[0])
    for row in rows.values():
        for mode in MODES:
            c = row[mode]
            if c["runs"] and "error" not in c:
                c["step_s"] = statistics.median(r["step_s"] for r in c["runs"])
                c["compile_s"] = statistics.median(r["compile_s"] for r in c["runs"])
                c["meta"] = c["runs"][-1]["meta"]
    return list(rows.values())


def _ms(c: dict) -> str:
    return f"{c['step_s'] * 1e3:.3f}" if "step_s" in c else "failed"


def _ratio(a: dict, b: dict) -> str:
    return f"{b['step_s'] / a['step_s']:.2f}x" if "step_s" in a and "step_s" in b else "-"


def _compile(c: dict) -> str:
    return f"{c['compile_s']:.2f}" if "compile_s" in c else "-"


def _kernels(c: dict) -> str:
    if "meta" not in c:
        return "-"
    m = c["meta"]
    return f"{m['json_akgpy']} / {m['info']} ({m['log'].get('handed back', 0)} handed back)"


def table(rows: list[dict], header: dict) -> str:
    lines = [
        "# MindSpore with akgpy as its AKG",
        "",
        f"`python bench/bench_mindspore.py --steps {header['steps']}` at {header['commit']}, {header['date']}; "
        f"MindSpore {header['mindspore']}, CPU: {header['cpu']} ({header['cores']} cores), Python {header['python']}.",
        f"Graph-kernel flags (akgpy and bundled alike): `{FLAGS}`. Each configuration in its own process, fresh "
        "MS_COMPILER_CACHE_PATH (and a fresh akgpy compile cache): compile is the first step's wall time, "
        f"step the median of the {header['steps'] - 1} steps after it (ms); both the median over "
        f"{header['rounds']} rounds, every configuration of every network run once per round. Speed-ups > 1 mean akgpy is faster. "
        f"akgpy's compile includes checking each kernel against numpy (AKGPY_VERIFY_KERNELS={header['verify']}).",
        "",
        "| network | akgpy ms | bundled AKG ms | no fusion ms | akgpy vs bundled | akgpy vs no fusion "
        "| compile s: akgpy | bundled | no fusion | kernels akgpy compiled / asked | load avg (1 min) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for r in rows:
        a, b, n = r.get("akgpy", {}), r.get("bundled", {}), r.get("nofusion", {})
        lines.append(f"| {r['network']} | {_ms(a)} | {_ms(b)} | {_ms(n)} | {_ratio(a, b)} | {_ratio(a, n)} "
                     f"| {_compile(a)} | {_compile(b)} | {_compile(n)} | {_kernels(a)} "
                     f"| {min(r['loads']):.2f} - {max(r['loads']):.2f} |")
    errors = [(r["network"], m, r[m]["error"]) for r in rows for m in MODES if "error" in r.get(m, {})]
    if errors:
        lines += ["", "Failed runs:", ""] + [f"- {n} ({m}): {e}" for n, m, e in errors]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=201, help="steps per run, the first compiles (default: %(default)s)")
    ap.add_argument("--rounds", type=int, default=3, help="cold runs of each configuration (default: %(default)s)")
    ap.add_argument("--networks", default=None, help="comma-separated zoo names (default: all)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds per run (default: %(default)s)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="writes <out>.md and <out>.json")
    ns = ap.parse_args(argv)
    if ns.steps < 51:
        raise SystemExit("--steps must be at least 51 (a median of >= 50 steps after the compiling one)")
    names = list(dict.fromkeys(ns.networks.split(","))) if ns.networks else list(NETWORKS)
    if ns.rounds < 1:
        raise SystemExit("--rounds must be at least 1")
    unknown = [n for n in names if n not in NETWORKS]
    if unknown:
        raise SystemExit(f"unknown networks {unknown}; the zoo has {', '.join(NETWORKS)}")
    import importlib.metadata
    header = {"steps": ns.steps, "rounds": ns.rounds, "commit": _commit(), "date": time.strftime("%Y-%m-%d %H:%M"),
              "mindspore": importlib.metadata.version("mindspore"), "cpu": cpu_model(), "cores": os.cpu_count(),
              "python": platform.python_version(), "verify": os.environ.get("AKGPY_VERIFY_KERNELS", "1")}
    rows = bench(names, ns.steps, ns.timeout, ns.rounds)
    ns.out.parent.mkdir(parents=True, exist_ok=True)
    ns.out.with_suffix(".json").write_text(json.dumps({"header": header, "rows": rows}, indent=1) + "\n")
    ns.out.with_suffix(".md").write_text(table(rows, header))
    print(table(rows, header))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
