"""`python -m kernels`: compile every pattern, check it against the numpy reference, and time
it against a hand-written numpy float32 version.

    python -m kernels                 # realistic sizes
    python -m kernels --small         # small sizes, a fast smoke run
    python -m kernels --only softmax --only adam

One row per pattern: kernels in the program, compile time, median time of a Program call
(akgpy; 64-byte aligned inputs, output allocation included), median time of the
pattern's hand-written numpy float32 twin (`numpy_impl`), one run of the float64 reference
interpreter (akgpy.reference), speedup = numpy / akgpy, max |akgpy - reference| over
outputs and in-place targets, and PASS/FAIL under akgpy.testing.compare's tolerance rule.
Inputs come from akgpy.testing.random_inputs. Exits 1 if any pattern fails.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import traceback

import numpy as np

import akgpy
from akgpy import reference, testing
from akgpy.runtime.program import aligned_empty

from . import PATTERNS


def _median_ms(fn, args, repeat: int, warmup: int = 1) -> float:
    """Median wall time of fn(*args) in ms."""
    for _ in range(warmup):
        fn(*args)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def _aligned(a: np.ndarray) -> np.ndarray:
    """A 64-byte aligned copy: what a framework hands a kernel, so the Program passes it
    zero-copy instead of staging it through an aligned temporary on every call."""
    out = aligned_empty(a.shape, a.dtype)
    np.copyto(out, a)
    return out


def _max_err(g: akgpy.Graph, got, inputs_after, want, ref_inputs_after) -> float:
    pairs = list(zip(got, want))
    for target in g.inplace_targets():
        k = g.inputs.index(target)
        pairs.append((inputs_after[k], ref_inputs_after[k]))
    err = 0.0
    for a, b in pairs:
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        if a.shape != b.shape:
            return float("inf")
        if a.size:
            err = max(err, float(np.max(np.abs(a - b))))
    return err


def run_pattern(name: str, small: bool, repeat: int) -> dict:
    build = PATTERNS[name]
    g = build(**build.small) if small else build()
    t0 = time.perf_counter()
    prog = akgpy.fuse(g)
    compile_s = time.perf_counter() - t0

    inputs = testing.random_inputs(g)
    # Correctness: one call on fresh aligned copies (the Program writes in-place targets into
    # them); tests/test_kernels.py covers the unaligned, staged path.
    kin = [_aligned(a) for a in inputs]
    got = prog(*kin)
    ref_in = [a.copy() for a in inputs]
    t0 = time.perf_counter()
    want = reference.run(g, ref_in)
    ref_ms = (time.perf_counter() - t0) * 1e3
    bad = testing.compare(g, got, kin, want, ref_in)

    # Timing, on aligned arrays. An in-place pattern updates its arguments on every call, like
    # a training loop does (the values stay finite over a few steps); akgpy and numpy each
    # get their own copies.
    akg_ms = _median_ms(prog, [_aligned(a) for a in inputs], repeat)
    np_ms = _median_ms(build.numpy_impl, [_aligned(a) for a in inputs], repeat)
    return dict(name=name, kernels=len(prog.kernels), compile_s=compile_s, akg_ms=akg_ms, np_ms=np_ms,
                ref_ms=ref_ms, err=_max_err(g, got, kin, want, ref_in), bad=bad,
                shape=" ".join(f"{g.tensors[n].dtype}{list(g.tensors[n].shape)}" for n in g.inputs[:1]))


HEADER = (f"{'pattern':<16} {'first input':<24} {'kern':>4} {'compile s':>9} {'akgpy ms':>9} {'numpy ms':>9} "
          f"{'ref64 ms':>9} {'speedup':>8} {'max err':>9}  result")


def format_row(r: dict) -> str:
    if "error" in r:
        return f"{r['name']:<16} {'':<24} {'-':>4} {'-':>9} {'-':>9} {'-':>9} {'-':>9} {'-':>8} {'-':>9}  FAIL ({r['error']})"
    status = "PASS" if not r["bad"] else "FAIL"
    return (f"{r['name']:<16} {r['shape']:<24} {r['kernels']:>4} {r['compile_s']:>9.2f} {r['akg_ms']:>9.3f} "
            f"{r['np_ms']:>9.3f} {r['ref_ms']:>9.1f} {r['np_ms'] / r['akg_ms']:>7.2f}x {r['err']:>9.2e}  {status}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kernels", description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", metavar="NAME", choices=sorted(PATTERNS),
                    help="run only this pattern (repeatable)")
    ap.add_argument("--small", action="store_true", help="small sizes for a fast smoke run")
    ap.add_argument("--repeat", type=int, default=10, help="timed runs per measurement (median is shown)")
    args = ap.parse_args(argv)

    names = args.only or list(PATTERNS)
    print(f"akgpy {akgpy.__version__}, TVM_NUM_THREADS={os.environ.get('TVM_NUM_THREADS', '?')}, "
          f"{'small' if args.small else 'full'} sizes, median of {args.repeat} runs")
    print(HEADER)
    print("-" * len(HEADER))
    failed = []
    for name in names:
        try:
            r = run_pattern(name, args.small, args.repeat)
        except Exception as e:  # one broken pattern must not hide the others
            traceback.print_exc(file=sys.stderr)
            r = dict(name=name, error=f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:120])
        print(format_row(r), flush=True)
        if "error" in r or r["bad"]:
            failed.append(name)
            for m in r.get("bad", []):
                print(f"    {m.tensor}: {m.bad}/{m.total} off by > {m.tol:g} (max {m.max_abs:.3g}), {m.example}")
    print("-" * len(HEADER))
    print(f"{len(names) - len(failed)}/{len(names)} passed" + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
