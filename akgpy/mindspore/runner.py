"""Run one `akgpy.mindspore.zoo` network under stock MindSpore (GRAPH_MODE, CPU) and record what
happened: outputs, step times, thread counts, and what the kernel-meta directory holds.

    python -m akgpy.mindspore.runner NETWORK --steps N --mode {akgpy,bundled,nofusion} --out result.json

The mode only names what the caller set up; the environment decides who compiles (akgpy: the
`akg` shim first on PYTHONPATH and graph-kernel flags; bundled: the flags alone; nofusion: graph
kernels off). `run_network` starts this in a subprocess with the environment of a mode: the tests
(tests/test_mindspore_wheel.py) and the bench (bench/bench_mindspore.py) call it. The child never
imports akgpy's compiler: MindSpore's compile workers do that through the shim.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ..errors import AkgpyError

MODES = ("akgpy", "bundled", "nofusion")
# LayerNorm is not expanded on CPU by default; the rest are expanded where MindSpore does not by
# default, so the bundled AKG and akgpy get the same subgraphs (bench/record_mindspore.py's list).
FLAGS = "--opt_level=2 --enable_expand_ops=LayerNorm,Softmax,GeLU,BatchNorm,SoftmaxCrossEntropyWithLogits"
SHIM = Path(__file__).resolve().parent / "shim"
REPO = Path(__file__).resolve().parents[2]
META_DIR = "akg_kernel_meta"


def kernel_meta_counts(meta: Path) -> dict[str, Any]:
    """What a kernel-meta directory holds: MindSpore's requests (.info), the .json files akgpy
    wrote and those the bundled AKG wrote, and akgpy.log's lines by status."""
    counts: dict[str, Any] = {"info": 0, "json_akgpy": 0, "json_bundled": 0, "log": {}}
    if not meta.is_dir():
        return counts
    counts["info"] = len(list(meta.glob("*.info")))
    for p in meta.glob("*.json"):
        try:
            compiler = str(json.loads(p.read_text()).get("compiler", ""))
        except (OSError, ValueError):
            compiler = ""
        counts["json_akgpy" if compiler.startswith("akgpy") else "json_bundled"] += 1
    log = meta / "akgpy.log"
    if log.exists():
        for line in log.read_text().splitlines():
            if line.strip():
                status = json.loads(line).get("status", "?")
                counts["log"][status] = counts["log"].get(status, 0) + 1
    return counts


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


def thread_names() -> list[str]:
    names = []
    for t in os.listdir("/proc/self/task"):
        try:
            names.append(Path(f"/proc/self/task/{t}/comm").read_text().strip())
        except OSError:  # the thread ended meanwhile
            pass
    return sorted(names)


def _arrays(out: Any) -> list:
    """A step's result (a Tensor, or nested tuples of them) as a flat list of numpy arrays; reading
    them waits for the step to finish."""
    if isinstance(out, (tuple, list)):
        return [a for o in out for a in _arrays(o)]
    return [out.asnumpy()]


def check_env(mode: str) -> None:
    """Refuse to record a run as `mode` when the environment set up another one."""
    import importlib.util
    spec = importlib.util.find_spec("akg")
    shim = spec is not None and spec.origin is not None and Path(spec.origin).resolve().is_relative_to(SHIM)
    fused = bool(os.environ.get("MS_DEV_GRAPH_KERNEL_FLAGS"))
    want = {"akgpy": (True, True), "bundled": (False, True), "nofusion": (False, False)}[mode]
    if (shim, fused) != want:
        raise AkgpyError(f"mode {mode!r} needs the akgpy shim {'on' if want[0] else 'off'} PYTHONPATH and "
                         f"MS_DEV_GRAPH_KERNEL_FLAGS {'set' if want[1] else 'unset'}; this environment has the shim "
                         f"{'on' if shim else 'off'} and the flags {'set' if fused else 'unset'} (use run_network)")


def run(name: str, steps: int, mode: str, out: Path) -> dict[str, Any]:
    """Run `steps` steps of network `name` in this process; writes `out` (JSON) and the first and
    last step's outputs beside it (`<out stem>.npz`: first_<i>, last_<i>)."""
    import numpy as np
    if steps < 2:
        raise AkgpyError(f"--steps must be at least 2 (the first step compiles), got {steps}")
    if mode not in MODES:
        raise AkgpyError(f"--mode must be one of {', '.join(MODES)}, got {mode!r}")
    check_env(mode)
    import mindspore as ms
    from .zoo import NETWORKS
    if name not in NETWORKS:
        raise AkgpyError(f"unknown network {name!r}; the zoo has {', '.join(NETWORKS)}")
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    step, inputs = NETWORKS[name]()
    args = [ms.Tensor(a) for a in inputs]
    t0 = time.perf_counter()
    first = _arrays(step(*args))
    compile_s = time.perf_counter() - t0
    per_step = [threads()]
    times, last = [], first
    for _ in range(steps - 1):
        t0 = time.perf_counter()
        last = _arrays(step(*args))
        times.append(time.perf_counter() - t0)
        per_step.append(threads())
    cache = os.environ.get("MS_COMPILER_CACHE_PATH", ".")
    meta = Path(cache) / os.environ.get("KERNEL_META_DIR", META_DIR)
    outputs = out.with_suffix(".npz")
    np.savez(outputs, **{f"first_{i}": a for i, a in enumerate(first)}, **{f"last_{i}": a for i, a in enumerate(last)})
    result = {
        "network": name, "mode": mode, "steps": steps,
        "flags": os.environ.get("MS_DEV_GRAPH_KERNEL_FLAGS", ""),
        "compile_s": compile_s, "step_s": statistics.median(times), "step_times_s": times,
        # MindSpore starts its launch pipeline (infer/resize/launch queues) in the second step
        "threads_first": per_step[0], "threads_last": per_step[-1], "threads_per_step": per_step,
        "thread_names": thread_names(),
        # akgpy's compiler runs in MindSpore's compile workers only: tvm here would mean otherwise
        "tvm_loaded": "tvm" in sys.modules,
        "outputs": str(outputs), "n_outputs": len(first),
        "dtypes": sorted({str(a.dtype) for a in first}),
        "meta_dir": str(meta), "meta": kernel_meta_counts(meta),
    }
    out.write_text(json.dumps(result, indent=1) + "\n")
    return result


def mode_env(mode: str, cache_dir: Path, *, tvm_threads: int | None = None, omp_threads: int | None = None,
             base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a mode: the caller's, minus any `akg` shim and graph-kernel flags it set,
    plus what the mode sets up and a MindSpore compile cache of its own."""
    if mode not in MODES:
        raise AkgpyError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    env = dict(os.environ if base is None else base)
    path = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).resolve() != SHIM]
    path = [str(REPO)] + [p for p in path if Path(p).resolve() != REPO]
    env.pop("MS_DEV_GRAPH_KERNEL_FLAGS", None)
    if mode == "akgpy":
        path.insert(0, str(SHIM))
    if mode != "nofusion":
        env["MS_DEV_GRAPH_KERNEL_FLAGS"] = FLAGS
    env["PYTHONPATH"] = os.pathsep.join(path)
    env["MS_COMPILER_CACHE_PATH"] = str(cache_dir)
    env.pop("KERNEL_META_DIR", None)
    for var, value in (("TVM_NUM_THREADS", tvm_threads), ("OMP_NUM_THREADS", omp_threads)):
        if value is None:
            env.pop(var, None)
        else:
            env[var] = str(value)
    return env


def run_network(name: str, mode: str, steps: int, cache_dir: str | os.PathLike, timeout: float = 600, *,
                tvm_threads: int | None = None, omp_threads: int | None = None,
                env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run network `name` in a fresh interpreter set up for `mode`, MindSpore's compile cache at
    `cache_dir` (reused as it is: pass a fresh one for a cold compile). Returns the runner's
    result dict (its `outputs` .npz lies in `cache_dir`). `env`: extra variables. Raises an
    AkgpyError with the child's output tail when it fails or outlives `timeout` seconds."""
    cache = Path(cache_dir).resolve()
    cache.mkdir(parents=True, exist_ok=True)
    child_env = mode_env(mode, cache, tvm_threads=tvm_threads, omp_threads=omp_threads)
    child_env.update(env or {})
    with tempfile.NamedTemporaryFile(prefix=f"{name}_{mode}_", suffix=".json", dir=cache, delete=False) as f:
        out = Path(f.name)
    cmd = [sys.executable, "-m", "akgpy.mindspore.runner", name, "--steps", str(steps), "--mode", mode,
           "--out", str(out)]
    try:
        r = subprocess.run(cmd, env=child_env, cwd=cache, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        tail = (e.stderr or b"")[-3000:]
        raise AkgpyError(f"{name} ({mode}) ran past {timeout} s: {tail!r}") from None
    if r.returncode != 0 or not out.stat().st_size:
        raise AkgpyError(f"{name} ({mode}) failed with exit {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
    return json.loads(out.read_text())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m akgpy.mindspore.runner", description=__doc__.split("\n\n")[0])
    ap.add_argument("network")
    ap.add_argument("--steps", type=int, default=10, help="steps to run, the first compiles (default: %(default)s)")
    ap.add_argument("--mode", choices=MODES, required=True, help="what the environment set up (recorded)")
    ap.add_argument("--out", type=Path, required=True, help="result JSON; outputs go to <stem>.npz beside it")
    ns = ap.parse_args(argv)
    r = run(ns.network, ns.steps, ns.mode, ns.out)
    print(f"{r['network']} ({r['mode']}): compile {r['compile_s']:.2f} s, step {r['step_s'] * 1e3:.3f} ms, "
          f"threads {r['threads_first']} -> {r['threads_last']}, meta {r['meta']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
