"""One thread pool (issue 51): an akgpy block alone vs right after another runtime's op, with the
kernels on TVM's pool vs the OpenMP launcher (runtime/launcher.py: torch's intra-op threads).

    python bench/bench_thread_pool.py [--repeat 60] [--out bench/results/thread_pool.md]

Per block (a ResNet bottleneck and an MLP from akgpy.zoo) and launcher: the block's time alone
(called back to back) and right after a torch eager matmul; then, with onnxruntime in the same
process, right after an onnxruntime session's run with default options and with
`session.intra_op.allow_spinning = 0`. One process per launcher (two pools in one process fight
each other, which is what is measured against), processes alternating over `--rounds`; inside a
process every condition interleaved call by call, medians over calls, then the median over
rounds. Each timed call is the akgpy block alone (the other runtime's op is not counted)."""
from __future__ import annotations

import argparse
import os
import platform
import json
import statistics
import subprocess
import sys
import time

import numpy as np
import onnx
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import akgpy  # noqa: E402
from akgpy import zoo  # noqa: E402
from akgpy.pipeline import compile_model  # noqa: E402


def _ort_session(spinning: bool, threads: int):
    import onnxruntime as ort
    from onnx import TensorProto, helper
    w = np.random.default_rng(0).standard_normal((512, 512), dtype=np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "mm",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [512, 512])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [512, 512])],
                          [helper.make_tensor("w", TensorProto.FLOAT, [512, 512], w.ravel())])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    if not spinning:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _blocks(launcher: str):
    out = {}
    for name, model in (("resnet_bottleneck c64 w16 28x28", zoo.resnet_bottleneck(channels=64, width=16, size=28)),
                        ("mlp 64x256-512-512-10", zoo.mlp(batch=64, sizes=(256, 512, 512, 10)))):
        g = akgpy.from_onnx(model if isinstance(model, onnx.ModelProto) else model[0])
        rng = np.random.default_rng(0)
        xs = [rng.standard_normal(g.tensors[n].shape, dtype=np.float32) for n in g.free_inputs]
        out[name] = (compile_model(g).with_launcher(launcher), xs)
    return out


def child(launcher: str, repeat: int) -> dict:
    threads = torch.get_num_threads()
    a = torch.randn(512, 512)
    feed = {"x": np.ones((512, 512), np.float32)}
    before = {"alone": lambda: None, "after torch matmul": lambda: a @ a}
    for label, spinning in (("after ort (spinning)", True), ("after ort (allow_spinning=0)", False)):
        s = _ort_session(spinning, threads)
        before[label] = (lambda s=s: s.run(None, feed))
    blocks = _blocks(launcher)
    times: dict[str, list[float]] = {}
    for r in range(repeat + 3):  # 3 warm rounds
        for name, (prog, xs) in blocks.items():
            for cond, pre in before.items():
                pre()
                t0 = time.perf_counter()
                prog(*xs)
                if r >= 3:
                    times.setdefault(f"{name}|{cond}", []).append(time.perf_counter() - t0)
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=60, help="timed calls per condition in each process")
    ap.add_argument("--rounds", type=int, default=3, help="processes per launcher, alternating")
    ap.add_argument("--child", choices=("tvm", "openmp"), help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, args.repeat)))
        return 0
    runs: dict[str, list[dict]] = {"tvm": [], "openmp": []}
    for _ in range(args.rounds):
        for launcher in runs:
            p = subprocess.run([sys.executable, __file__, "--child", launcher, "--repeat", str(args.repeat)],
                               capture_output=True, text=True, check=True)
            runs[launcher].append(json.loads(p.stdout.strip().splitlines()[-1]))
    keys = list(runs["tvm"][0])
    names = list(dict.fromkeys(k.split("|")[0] for k in keys))
    conds = list(dict.fromkeys(k.split("|")[1] for k in keys))
    lines = [f"akgpy block time in ms: median over {args.rounds} processes per launcher (alternating) of the "
             f"median of {args.repeat} interleaved calls; torch threads {torch.get_num_threads()}, load average "
             f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores ({platform.machine()})",
             "", "| block | launcher | " + " | ".join(conds) + " |", "|---|---|" + "---|" * len(conds)]
    for name in names:
        for launcher, rs in runs.items():
            med = {c: statistics.median(r[f"{name}|{c}"] for r in rs) for c in conds}
            alone = med["alone"]
            cells = [f"{alone:.3f}"] + [f"{med[c]:.3f} ({med[c] / alone:.2f}x)" for c in conds[1:]]
            lines.append(f"| {name} | {launcher} | " + " | ".join(cells) + " |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write(text + "\n\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
