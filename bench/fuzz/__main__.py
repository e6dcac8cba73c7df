"""python -m bench.fuzz: see the package docstring."""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TVM_NUM_THREADS", "1")  # before akgpy starts TVM's runtime
os.environ.setdefault("AKGPY_FUZZ_MAX_ELEMENTS", str(1 << 12))  # random graphs: a case in seconds

from . import runner  # noqa: E402
from .cases import GENERATORS, generator_for  # noqa: E402
from . import onnx_cases  # noqa: E402,F401  (registers the ONNX generators)


def indices(start: int, count: int, only: set[str] | None):
    """The first `count` case indices from `start` whose generator is in `only`."""
    i = start
    while count > 0:
        if only is None or generator_for(i).name in only:
            yield i
            count -= 1
        i += 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.fuzz", description=__package__ and
                                 sys.modules[__package__].__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--start", type=int, default=0, help="first case index")
    ap.add_argument("--out", type=Path, default=Path("bench/results/fuzz/run"))
    ap.add_argument("--resume", action="store_true", help="keep DIR/results.jsonl and skip its cases")
    ap.add_argument("--only", default=None, help="comma-separated generator names")
    ap.add_argument("--indices", default=None, help="comma-separated case indices (rerun these only)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds before a case counts as a hang")
    ap.add_argument("--case", default=None, help="SEED:INDEX: run one case here, no fork, and print it")
    ap.add_argument("--list", action="store_true", help="list the generators")
    a = ap.parse_args(argv)
    if a.list:
        print("\n".join(f"{i:2} {g.name}" for i, g in enumerate(GENERATORS)))
        return 0
    if a.case:
        seed, index = map(int, a.case.split(":"))
        with tempfile.TemporaryDirectory() as tmp:
            res = runner.run_in_process(seed, index, Path(tmp))
            repro = Path(tmp) / "repros" / f"{seed}-{index}.json"
            if repro.exists():
                print(repro.read_text()[:4000])
        print(json.dumps({"id": a.case, "generator": generator_for(index).name, **res}, indent=1))
        return 0
    only = set(a.only.split(",")) if a.only else None
    unknown = (only or set()) - {g.name for g in GENERATORS}
    if unknown:
        ap.error(f"unknown generators {sorted(unknown)}; --list shows them")
    todo = [int(i) for i in a.indices.split(",")] if a.indices else list(indices(a.start, a.cases, only))
    rows = runner.campaign(todo, a.seed, a.out, resume=a.resume, timeout=a.timeout)
    print(runner.summary(rows.values()))
    return 1 if any(r["class"] in runner.DEFECTS for r in rows.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
