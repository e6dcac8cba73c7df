"""Fuzz the compiler with random graphs (tests/test_property_layout.py's strategy: fused
subgraphs, and whole models cut into several kernels with Concat/StridedSlice between them; at
larger sizes, under random schedule configs) and run every program with each kernel argument fenced
by no-access pages (akgpy.testing.run_fenced): a kernel that reads or writes outside an
argument faults, and a wrong value is a mismatch.

    python bench/fuzz_fenced.py [--examples N] [--max-elements N] [--seed S] [--out DIR]

Graphs run in child processes; before each one the child writes the graph's composite JSON
to DIR/current.json, so a child that dies leaves its culprit behind (kept as DIR/fault-K.json,
mismatches and compile errors as DIR/mismatch-K.json, DIR/error-K.json, each with the config
in a .cfg file beside it, with the schedule and whether the graph is a whole model). Exits 1
if any graph faulted, mismatched or failed to compile.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"


TARGET_KEYS = ("vector_bytes", "l2_bytes")  # facts of the target (akgpy.resolve_target's dict keys)


def configs():
    """Schedule configs and target facts that switch on the rules large real graphs reach:
    streaming stores from 1 KiB, both vector widths, prefetch on and off, an L2 small enough to
    block transposes (the keys TARGET_KEYS go to the target, the rest to the config)."""
    from hypothesis import strategies as st
    return st.fixed_dictionaries({
        "vector_bytes": st.sampled_from([32, 64]),
        "stream_min_bytes": st.sampled_from([0, 1 << 10]),
        "stream_share": st.sampled_from([0.0, 0.9]),
        "stream_write_heavy": st.booleans(),
        "prefetch_bytes": st.sampled_from([0, 2048]),
        "l2_bytes": st.sampled_from([16 << 10, 512 << 10]),
    })


def child(examples: int, seed: int, out: Path) -> None:
    sys.path.insert(0, str(TESTS))
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hseed
    from hypothesis import strategies as st
    from test_property_layout import layout_graphs

    import akgpy
    from akgpy.targets import default_config
    from akgpy.testing import check_program

    n = [0]

    @hseed(seed)
    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(g=st.booleans().flatmap(lambda model: layout_graphs(model=model)), kw=configs(),
           schedule=st.sampled_from(["poly", "poly", "plain"]))
    def one(g, kw, schedule):
        n[0] += 1
        (out / "current.json").write_text(g.to_composite())
        (out / "current.cfg").write_text(json.dumps({"schedule": schedule, "model": g.kind == "model", **kw}))
        print("start", flush=True)
        try:
            target = {"kind": "llvm", **{k: v for k, v in kw.items() if k in TARGET_KEYS}}
            cfg = default_config().replace(**{k: v for k, v in kw.items() if k not in TARGET_KEYS})
            prog = akgpy.fuse(g, schedule=schedule, config=cfg, target=target)
            bad = check_program(g, prog, seed=n[0], fenced=True)
            word = "mismatch" if bad else "ok"
            detail = "; ".join(map(str, bad))
        except Exception as e:  # any exception is a finding: record it, keep fuzzing
            word, detail = "error", f"{type(e).__name__}: {e}"[:500]
        if word != "ok":
            k = len(list(out.glob(f"{word}-*.json")))
            shutil.copy(out / "current.json", out / f"{word}-{k}.json")
            shutil.copy(out / "current.cfg", out / f"{word}-{k}.cfg")
            print(f"{word} {word}-{k}.json {detail}", flush=True)
        else:
            print("ok", flush=True)

    one()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=200)
    ap.add_argument("--max-elements", type=int, default=1 << 20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path("fuzz_fenced_out"))
    ap.add_argument("--child", nargs=2, type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.child:
        child(args.child[0], args.child[1], args.out)
        return 0
    env = dict(os.environ, AKGPY_FUZZ_MAX_ELEMENTS=str(args.max_elements))
    counts = {"ok": 0, "mismatch": 0, "error": 0, "fault": 0}
    seed = args.seed
    while sum(counts.values()) < args.examples:
        left = args.examples - sum(counts.values())
        run = subprocess.run([sys.executable, __file__, "--child", str(left), str(seed), "--out", str(args.out)],
                             capture_output=True, text=True, env=env)
        words = [ln.split(" ", 1)[0] for ln in run.stdout.splitlines()]
        for ln in run.stdout.splitlines():
            if ln.split(" ", 1)[0] in ("mismatch", "error"):
                print(ln, flush=True)
        for w in words:
            if w in counts:
                counts[w] += 1
        if run.returncode != 0:
            k = counts["fault"]
            counts["fault"] += 1
            if words and words[-1] == "start":
                shutil.copy(args.out / "current.json", args.out / f"fault-{k}.json")
                shutil.copy(args.out / "current.cfg", args.out / f"fault-{k}.cfg")
                print(f"fault (exit {run.returncode}) fault-{k}.json\n{run.stderr[-800:]}", flush=True)
            else:  # died outside a graph: a bug of this script, not a finding
                print(run.stderr[-3000:], file=sys.stderr)
                return 2
        elif sum(1 for w in words if w == "start") < left:
            break  # hypothesis ran out of distinct examples
        seed += 1
    print(f"{sum(counts.values())} graphs: {counts['ok']} ok, {counts['mismatch']} mismatched, "
          f"{counts['error']} errors, {counts['fault']} faulted")
    return 1 if counts["mismatch"] or counts["error"] or counts["fault"] else 0


if __name__ == "__main__":
    sys.exit(main())
