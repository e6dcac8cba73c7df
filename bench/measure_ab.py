"""The tuner's measurer A/B: `akgpy/tune/measure.py` at a git revision against the working
tree's, on bench graphs, interleaved (graph by graph, the two variants alternating first).

Each variant gets a fresh measurer process per graph (tune/executor.LocalExecutor) and measures
the graph's default artifact `--jobs` times in a row, as the tuner measures trials (the first
job checked against the reference, then timed). Printed per run: the first job's median over
the steady median (jobs 5 on), the max/min spread of the job medians, and every job's median.

    python -m bench.measure_ab --old-rev b2f771e --graphs 13,16 --rounds 2
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def old_measurer(rev: str, into: Path) -> str:
    """measure.py at `rev` as a top-level module `old_measure` (its relative imports made absolute)."""
    src = subprocess.run(["git", "show", f"{rev}:akgpy/tune/measure.py"], cwd=REPO, check=True,
                         capture_output=True, text=True).stdout
    src = re.sub(r"from \.executor", "from akgpy.tune.executor", src)
    src = re.sub(r"from \.\.(\w)", r"from akgpy.\1", src)
    (into / "old_measure.py").write_text(src)
    return "old_measure:run_measure"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old-rev", required=True, help="git revision of the A measurer")
    ap.add_argument("--graphs", default="13,16", help="indices into bench/bench_set.txt")
    ap.add_argument("--jobs", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    import akgpy
    from akgpy.target import resolve_target
    from akgpy.targets import default_config
    from akgpy.tune.executor import BuildJob, LocalExecutor, MeasureJob, config_to_json, median
    from akgpy.tune.tuner import _flush_bytes
    from bench.bench_cpu import load_set
    entries = load_set(REPO / "bench" / "bench_set.txt")
    tgt = resolve_target(None)
    tmp = Path(tempfile.mkdtemp(prefix="akgpy-measure-ab-"))
    fns = {"old": old_measurer(args.old_rev, tmp), "new": LocalExecutor.MEASURE_FN}
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp), str(REPO), os.environ.get("PYTHONPATH")]))
    sys.path.insert(0, str(tmp))
    built = []
    with LocalExecutor(1) as ex:
        for i in map(int, args.graphs.split(",")):
            g = akgpy.load_composite(REPO / "corpus" / entries[i]["path"])
            r, = ex.build([BuildJob(0, g.to_composite(), config_to_json(default_config(tgt)))])
            if not r.ok:
                print(f"graph {i}: build failed: {r.error}")
                continue
            built.append((entries[i].get("pattern", str(i)), g.to_composite(), r, _flush_bytes(g, tgt)))
    for rnd in range(args.rounds):
        for name, text, r, flush in built:
            for variant in (("old", "new") if rnd % 2 == 0 else ("new", "old")):
                with LocalExecutor(1, measure_fn=fns[variant]) as ex:
                    jobs = [MeasureJob(j, text, r.artifact, r.manifest, check=j == 0, flush_bytes=flush)
                            for j in range(args.jobs)]
                    t = time.monotonic()
                    ms = ex.measure(jobs)
                    took = time.monotonic() - t
                bad = [m for m in ms if not m.ok]
                if bad:
                    print(f"round {rnd} {name} {variant}: {len(bad)} failed jobs: {bad[0].error}")
                    continue
                meds = [m.median_s * 1e3 for m in ms]
                steady = median(meds[5:] or meds)
                print(f"round {rnd} {name} {variant}: first/steady {meds[0] / steady:.2f}, max/min "
                      f"{max(meds) / min(meds):.2f}, steady {steady:.3f} ms, wall {took:.1f} s, "
                      f"load {os.getloadavg()[0]:.1f}")
                print("   ", " ".join(f"{x:.2f}" for x in meds), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
