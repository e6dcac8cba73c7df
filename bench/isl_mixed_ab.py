"""What the mixed-dim rule costs: kernels of graphs whose model has a dependence mixing dims,
scheduled with the full search first (the rule off) and without it (poly/scheduler's rule).

    python bench/isl_mixed_ab.py [--out bench/results/isl_mixed_ab.jsonl] graph...

Per graph (paths relative to corpus/): the TIR hash under each rule, the isl variant each took
and its wall time; where the TIR differs, the kernels alone (arguments bound once), timed A/B
interleaved: 5 rounds, each the best of 3 medians of >= 10 calls per side; ratio = new / old.
A full search that runs past --cap s of wall time (the slow mixed models) counts as "over".
"""
from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_cpu import prebound  # noqa: E402
from corpus_compile import CORPUS  # noqa: E402
from corpus_gbps import best_ms  # noqa: E402

import akgpy  # noqa: E402
from akgpy.poly import scheduler  # noqa: E402
from akgpy.testing import random_inputs  # noqa: E402


def compiled(g, rule_on: bool, cap: float):
    """(program, isl search lines, seconds) under the rule on or off (full search first)."""
    scheduler.MAX_SHIFTED_COEFFICIENT = 1 if rule_on else 1 << 62  # off: the full search first
    scheduler.WALL_CLOCK_GUARD_S = 30.0 if rule_on else cap
    scheduler.ANSWERS.clear()
    t0 = time.perf_counter()
    prog = akgpy.fuse(g)
    dt = time.perf_counter() - t0
    lines = [ln for ln in prog.explain().splitlines() if ln.startswith(("isl search", "schedule path"))]
    return prog, lines, dt


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("graphs", nargs="+")
    ap.add_argument("--out", type=Path, default=Path("bench/results/isl_mixed_ab.jsonl"))
    ap.add_argument("--cap", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    with args.out.open("a") as out:
        for rel in args.graphs:
            g = akgpy.load_composite(CORPUS / rel)
            row = {"graph": rel}
            old, old_lines, row["old_s"] = compiled(g, False, args.cap)
            new, new_lines, row["new_s"] = compiled(g, True, args.cap)
            h = [hashlib.sha256("".join(k.tir for k in p.kernels).encode()).hexdigest()[:12] for p in (old, new)]
            row.update(old_tir=h[0], new_tir=h[1], old_isl=old_lines, new_isl=new_lines, same=h[0] == h[1])
            if not row["same"]:
                ins = random_inputs(g)
                calls = {"old": prebound(old, ins), "new": prebound(new, ins)}
                ms = {"old": [], "new": []}
                for r in range(args.rounds):
                    for side in (("old", "new") if r % 2 == 0 else ("new", "old")):
                        ms[side].append(best_ms(calls[side]))
                row.update(old_ms=ms["old"], new_ms=ms["new"],
                           ratio=statistics.median(ms["new"]) / statistics.median(ms["old"]))
            out.write(json.dumps(row) + "\n")
            out.flush()
            print(f"{Path(rel).name[-32:]}: same={row['same']} ratio={row.get('ratio', 1.0):.3f} "
                  f"compile {row['old_s']:.2f} -> {row['new_s']:.2f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
