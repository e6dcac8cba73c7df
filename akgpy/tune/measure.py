"""One measurement of one candidate, as the measurer process runs it (`run_measure`).

The measurer is a long-lived spawned process (tune/executor.Worker): a candidate that crashes
or hangs takes it down, not the tuner, and the executor restarts it. A candidate is first run
on seeded random inputs and compared with the numpy reference (akgpy.testing's tolerance):
a mismatch is a failed trial, never timed, so it cannot win. Then `warmup` calls, and
`repeats` timed calls of the kernels alone (arguments bound once, as bench/bench_cpu.py
times them), each after writing a `flush_bytes` buffer when the kernel's data fits in the LLC,
so every repeat starts from memory as a kernel inside a model does.
"""
from __future__ import annotations

import hashlib
import socket
import time
from collections import OrderedDict

import numpy as np

from .executor import MeasureJob, MeasureResult, unpack_program

# programs kept loaded between jobs: the interleaved re-timing of the top candidates sends the
# same few artifacts round after round
KEEP_PROGRAMS = 8
# the buffer written between timed calls: more than any L2 and most LLCs a kernel sees in a
# model; a larger one costs more time per repeat than most kernels take
FLUSH_CAP_BYTES = 128 << 20

_references: OrderedDict = OrderedDict()
_programs: OrderedDict = OrderedDict()
_flush: dict[int, np.ndarray] = {}


def flush_bytes_for(data_bytes: int, llc_bytes: int) -> int:
    """The flush buffer for a kernel moving `data_bytes`: none when its data outgrows the LLC
    (each call reads memory anyway), else twice the LLC up to FLUSH_CAP_BYTES."""
    if data_bytes >= llc_bytes:
        return 0
    return min(2 * llc_bytes, FLUSH_CAP_BYTES)


def _reference(graph_text: str, seed: int):
    from ..frontends.composite import load_composite
    from ..reference import run
    from ..testing import random_inputs
    key = (hashlib.sha256(graph_text.encode()).hexdigest(), seed)
    hit = _references.get(key)
    if hit is None:
        g = load_composite(graph_text)
        inputs = random_inputs(g, seed)
        ref_inputs = [a.copy() for a in inputs]
        want = run(g, ref_inputs)
        hit = _references[key] = (g, inputs, want, ref_inputs)
        while len(_references) > 2:
            _references.popitem(last=False)
    return hit


def _program(g, job: MeasureJob):
    key = hashlib.sha256(job.artifact + repr(sorted(job.manifest.items())).encode()).hexdigest()
    prog = _programs.get(key)
    if prog is None:
        prog = _programs[key] = unpack_program(g, job.artifact, job.manifest)
        while len(_programs) > KEEP_PROGRAMS:
            _programs.popitem(last=False)
    _programs.move_to_end(key)
    return prog


def check(g, prog, inputs, want, ref_after) -> str | None:
    """None when `prog` matches the reference, else what differs. Runs twice, the first
    call's outputs poisoned, so an element the kernel leaves unwritten shows (testing.check_program)."""
    from ..testing import compare, poison
    first = prog(*[a.copy() for a in inputs])
    poison(first)
    del first
    kin = [a.copy() for a in inputs]
    got = prog(*kin)
    bad = compare(g, got, kin, want, ref_after)
    if not bad:
        return None
    m = bad[0]
    return f"{len(bad)} mismatching tensor(s); {m.tensor}: {m.bad}/{m.total} beyond tol {m.tol:g}, {m.example}"


def bound_call(prog, arrays):
    """prog's kernels with their arguments bound once (outputs preallocated): the kernels alone.
    A program whose kernels this cannot bind (stacked parameters) is called whole."""
    from ..runtime.program import aligned_empty, as_aligned, as_storage
    g, calls = prog.graph, []
    try:
        for k in prog.kernels:
            args = []
            for p in k.params:
                if p.kind == "output":
                    args.append(aligned_empty(p.shape, p.dtype))
                    continue
                a = as_storage(as_aligned(arrays[g.inputs.index(p.tensor)]), p)
                shared = p.kind == "inplace" and p.tensor in k.reads
                args.append(aligned_empty(p.shape, p.dtype) if shared else a)
            calls.append((k.unchecked, args))
    except (AttributeError, ValueError, TypeError):
        return lambda: prog(*arrays)
    return lambda: [f(*a) for f, a in calls]


def time_calls(call, warmup: int, repeats: int, flush_bytes: int) -> list[float]:
    buf = None
    if flush_bytes:
        buf = _flush.get(flush_bytes)
        if buf is None:
            buf = _flush[flush_bytes] = np.zeros(flush_bytes // 8, np.float64)
    for _ in range(warmup):
        call()
    times = []
    for i in range(repeats):
        if buf is not None:
            buf.fill(i)
        t = time.perf_counter()
        call()
        times.append(time.perf_counter() - t)
    return times


def run_measure(job: MeasureJob) -> MeasureResult:
    started, host = time.time(), socket.gethostname()

    def result(status: str, times=(), error=None) -> MeasureResult:
        return MeasureResult(job.trial, status, list(times), error, started, time.time(), host)
    try:
        g, inputs, want, ref_after = _reference(job.graph, job.seed)
        prog = _program(g, job)
        if job.check:
            why = check(g, prog, inputs, want, ref_after)
            if why is not None:
                return result("mismatch", error=why)
        call = bound_call(prog, [a.copy() for a in inputs])
        return result("ok", time_calls(call, job.warmup, job.repeats, job.flush_bytes))
    except Exception as e:  # noqa: BLE001 - a candidate that cannot run is a failed trial
        return result("error", error=f"{type(e).__name__}: {e}")
