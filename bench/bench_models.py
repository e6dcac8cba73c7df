"""Whole ONNX models: akgpy.from_onnx + akgpy.fuse against onnxruntime, each in its own process.

    python3 bench/bench_models.py [--models bert_base_layer,...] [--exporter torchscript|dynamo]
                                  [--threads 2] [--repeat 10] [--rounds 5] [--runs 2] [--json out.json]

Models: akgpy/zoo_torch.py BENCH (a BERT-base and a GPT-2-small layer at batch 1, sequence 128,
ResNet-50- and MobileNetV2-style nets at 224x224), exported once by torch.onnx in this process.
Each executor then runs in a fresh process with a cold compile cache and equal thread counts
(TVM_NUM_THREADS, onnxruntime's intra-op threads): compile time (akgpy: import + fuse;
onnxruntime: session creation), launches (akgpy: kernels + library/fallback calls; onnxruntime:
nodes of its optimised graph), the steady median on numpy's own arrays (not aligned by hand),
and the max error against onnxruntime's output (written by the onnxruntime child)."""
from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.procs import arguments, drive, fmt, geomean, median_ms  # noqa: E402

EXECUTORS = ("ort", "akgpy")


def child(path: str, executor: str, threads: int, repeat: int, rounds: int) -> dict:
    inputs = dict(np.load(path + ".inputs.npz"))
    row = {}
    t0 = time.perf_counter()
    if executor == "ort":
        import onnx
        import onnxruntime as ort
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.log_severity_level = 3
        so.optimized_model_filepath = path + ".ort.onnx"
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        row["compile_s"] = time.perf_counter() - t0
        row["launches"] = len(onnx.load(so.optimized_model_filepath, load_external_data=False).graph.node)
        out = sess.run(None, inputs)[0]
        np.save(path + ".ort.npy", out)
        fn = lambda: sess.run(None, inputs)  # noqa: E731
    else:
        import akgpy
        g = akgpy.from_onnx(path)
        prog = akgpy.fuse(g)
        row["compile_s"] = time.perf_counter() - t0
        row["launches"], row["fallbacks"] = prog.launches, len(prog.fallbacks())
        args = [inputs[n] for n in g.free_inputs]
        out = prog(*args)[0]
        ref = Path(path + ".ort.npy")
        if ref.exists():
            row["max_err"] = float(np.abs(out - np.load(ref)).max())
        fn = lambda: prog(*args)  # noqa: E731
    row["ms"] = median_ms(fn, repeat, rounds)
    return row


def export(model: str, exporter: str, d: str) -> str:
    from akgpy import zoo_torch
    m, example = zoo_torch.bench_model(model)
    path = str(Path(d) / f"{model}.onnx")
    Path(path).write_bytes(zoo_torch.export(m, example, exporter))
    np.savez(path + ".inputs.npz", **example)
    return path


def table(rows: list[dict], runs: int) -> str:
    by = {}
    for r in rows:
        by.setdefault(r["model"], {}).setdefault(r["executor"], []).append(r)
    lines = ["| model | ort ms | akgpy ms | akgpy/ort (per run) | launches ort / akgpy | fallbacks | compile s ort / akgpy "
             "| max err vs ort |", "|---|---:|---:|---|---|---:|---|---:|"]
    ratios = []
    for model, ex in by.items():
        o = [r.get("ms") for r in ex.get("ort", [])]
        a = [r.get("ms") for r in ex.get("akgpy", [])]
        per_run = [x / y for x, y in zip(a, o) if x and y]
        best_o, best_a = min(filter(None, o), default=None), min(filter(None, a), default=None)
        if best_o and best_a:
            ratios.append(best_a / best_o)
        fo, fa = ex.get("ort", [{}])[0], ex.get("akgpy", [{}])[0]
        lines.append(f"| {model} | {fmt(best_o)} | {fmt(best_a) if 'error' not in fa else 'error'} | "
                     f"{' / '.join(f'{x:.2f}' for x in per_run) or 'n/a'} | {fo.get('launches', 'n/a')} / "
                     f"{fa.get('launches', 'n/a')} | {fa.get('fallbacks', 'n/a')} | {fmt(fo.get('compile_s'), '{:.1f}')} / "
                     f"{fmt(fa.get('compile_s'), '{:.1f}')} | {fmt(fa.get('max_err'), '{:.1e}')} |")
    lines.append(f"\ngeomean akgpy/ort: {geomean(ratios):.2f} over {len(ratios)} models; ms: best of {runs} runs, each "
                 "the median of its process's per-round medians")
    errors = [f"- {r['model']} {r['executor']}: {r['error']}" for r in rows if "error" in r]
    return "\n".join(lines + (["", "errors:"] + errors if errors else []))


def main(argv=None) -> int:
    ap = arguments(__doc__, ("ONNX", "EXECUTOR"), EXECUTORS)
    ap.add_argument("--exporter", default="torchscript", choices=("torchscript", "dynamo"))
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(child(*a.child, a.threads, a.repeat, a.rounds)))
        return 0
    from akgpy import zoo_torch
    models = a.models.split(",") if a.models else list(zoo_torch.BENCH)
    with tempfile.TemporaryDirectory(prefix="akgpy-models-") as d:  # onnxruntime first: its output is the reference
        return drive(__file__, a, {m: export(m, a.exporter, d) for m in models}, table)


if __name__ == "__main__":
    sys.exit(main())
