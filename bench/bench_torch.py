"""torch.compile end to end: the akgpy backend against eager and inductor, each in its own process.

    python3 bench/bench_torch.py [--models bert_base_layer,...] [--threads 2] [--repeat 10]
                                 [--rounds 5] [--runs 2] [--json out.json] [--out table.md]

Models (akgpy/zoo_torch.py BENCH, fixed sizes): a BERT-base and a GPT-2-small layer at batch 1,
sequence 128, ResNet-50- and MobileNetV2-style nets at 224x224. Per model and executor, in a
fresh process with cold compile caches and equal thread counts (torch.set_num_threads, TVM and
OpenMP): the first call's time (cold compile included), the steady median, launches per call
(inductor: generated kernels + extern calls; akgpy: its kernels + the ATen calls left to torch),
and the max error against eager."""
from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.procs import arguments, drive, fmt, geomean, median_ms  # noqa: E402

EXECUTORS = ("eager", "inductor", "akgpy")


def _akgpy_launches() -> tuple[int, float]:
    """(kernels + library/fallback calls of every compiled partition + ATen calls left in torch,
    fraction of ATen nodes akgpy runs) of the latest compiled graph."""
    from akgpy.torch import last_report
    rep = last_report()
    kernels = torch_calls = nodes = fused = 0
    for g in rep.graphs:
        nodes += g.nodes
        fused += g.fused_nodes
        torch_calls += len(g.in_torch)
        for p in g.partitions:
            for entry in getattr(p.module, "compiled", {}).values():
                kernels += entry.program.launches if entry.program is not None else 0
    return kernels + torch_calls, fused / max(nodes, 1)


def child(model: str, executor: str, threads: int, repeat: int, rounds: int) -> dict:
    import numpy as np
    import torch

    from akgpy import zoo_torch
    torch.set_num_threads(threads)
    m, example = zoo_torch.bench_model(model)
    args = {k: torch.from_numpy(v) for k, v in example.items()}

    def first(out):
        return out if isinstance(out, torch.Tensor) else out[0]
    with torch.no_grad():
        ref = first(m(**args)).numpy().copy()
        row = {"model": model, "executor": executor}
        if executor == "eager":
            fn = m
            t0 = time.perf_counter()
            out = fn(**args)
        else:
            fn = torch.compile(m, backend=executor)
            t0 = time.perf_counter()
            if executor == "inductor":
                from torch._inductor.utils import run_and_get_code
                out, codes = run_and_get_code(fn, **args)
                calls = "".join(c[c.index("def call("):] for c in codes if "def call(" in c)
                row["launches"] = len(re.findall(r"cpp_fused_\w+\(", calls)) + len(re.findall(r"extern_kernels\.\w+\(", calls))
            else:
                out = fn(**args)
        row["first_call_s"] = time.perf_counter() - t0
        if executor == "akgpy":
            row["launches"], row["akgpy_fraction"] = _akgpy_launches()
        row["max_err"] = float(np.abs(first(out).numpy() - ref).max())
        row["ms"] = median_ms(lambda: fn(**args), repeat, rounds)
    return row


def table(rows: list[dict], runs: int) -> str:
    by = {}
    for r in rows:
        by.setdefault(r["model"], {}).setdefault(r["executor"], []).append(r)

    def ms(rs):
        ok = [r["ms"] for r in rs if "ms" in r]
        return min(ok) if ok else None
    lines = ["| model | eager ms | inductor ms | akgpy ms | akgpy/inductor (per run) | akgpy/eager | launches inductor / akgpy "
             "| akgpy share of ATen nodes | cold first call s inductor / akgpy | max err akgpy |",
             "|---|---:|---:|---:|---|---:|---|---:|---|---:|"]
    ratios = []
    for model, ex in by.items():
        e, i, a = (ms(ex.get(k, [])) for k in EXECUTORS)
        per_run = [f"{ra['ms'] / ri['ms']:.2f}" for ri, ra in zip(ex.get("inductor", []), ex.get("akgpy", []))
                   if "ms" in ri and "ms" in ra]
        if a and i:
            ratios.append(a / i)
        first = lambda k: ex.get(k, [{}])[0]  # noqa: E731
        err = first("akgpy").get("error")
        lines.append(
            f"| {model} | {fmt(e)} | {fmt(i)} | {fmt(a) if not err else 'error'} | {' / '.join(per_run) or 'n/a'} | "
            f"{fmt(a / e if a and e else None)} | {first('inductor').get('launches', 'n/a')} / "
            f"{first('akgpy').get('launches', 'n/a')} | {fmt(first('akgpy').get('akgpy_fraction'), '{:.0%}')} | "
            f"{fmt(first('inductor').get('first_call_s'), '{:.1f}')} / {fmt(first('akgpy').get('first_call_s'), '{:.1f}')} | "
            f"{fmt(first('akgpy').get('max_err'), '{:.1e}')} |")
    lines.append(f"\ngeomean akgpy/inductor: {geomean(ratios):.2f} over {len(ratios)} models; ms: best of {runs} runs, "
                 "each the median of its process's per-round medians")
    errors = [f"- {r['model']} {r['executor']}: {r['error']}" for r in rows if "error" in r]
    return "\n".join(lines + (["", "errors:"] + errors if errors else []))


def main(argv=None) -> int:
    ap = arguments(__doc__, ("MODEL", "EXECUTOR"), EXECUTORS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(child(*a.child, a.threads, a.repeat, a.rounds)))
        return 0
    from akgpy import zoo_torch
    models = a.models.split(",") if a.models else list(zoo_torch.BENCH)
    return drive(__file__, a, {m: m for m in models}, table)


if __name__ == "__main__":
    sys.exit(main())
