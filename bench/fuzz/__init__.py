"""akgpy's own fuzz campaign (issue 48): mutated corpus files, call-argument mutations (aliasing,
overlapping views, strided/unaligned/read-only arrays, wrong dtypes and shapes), ONNX mutations of
akgpy.zoo models and one-node models, random graphs on NaN/inf/-0/subnormal/float16-extreme inputs,
and one generator per defect family of issue 48, each checked against the numpy reference (ONNX:
onnxruntime).

    python -m bench.fuzz [--cases N] [--seed S] [--out DIR] [--resume] [--only GEN,...] [--timeout 60]
    python -m bench.fuzz --case SEED:INDEX      # one case, in this process, with its traceback
    python -m bench.fuzz --seed S --indices 89,140 --out DIR   # rerun some cases, forked

Each case runs in a child forked from a server that imported akgpy, tvm and onnxruntime once; a
signal is a crash, no answer within --timeout seconds a hang. Results: DIR/results.jsonl (one row
per case, keyed "seed:index"; --resume skips the rows there), DIR/repros/SEED-INDEX.json (+ .onnx)
for each crash, hang, wrong result and bare exception. See docs/testing.md.
"""
