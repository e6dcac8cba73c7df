"""One measurement of one candidate, as the measurer process runs it (`run_measure`).

The measurer is a long-lived spawned process (tune/executor.Worker): a candidate that crashes
or hangs takes it down, not the tuner, and the executor restarts it. A candidate is first run
on seeded random inputs and compared with the numpy reference (akgpy.testing's tolerance):
a mismatch is a failed trial, never timed, so it cannot win. Then the kernels alone are timed
(arguments bound once and their pages touched, as bench/bench_cpu.py times them), each call
after writing a `flush_bytes` buffer when the kernel's data fits in the LLC, so every call
starts from memory as a kernel inside a model does (`time_kernel`):

- warm-up: `warmup` calls, then (the first time this process measures the program) rounds of
  WARMUP_ROUND calls until two successive rounds' medians agree within STABLE_REL (the thread
  pool, first-touch faults and the caches settle);
- each sample is the mean of `inner` calls, enough for MIN_SAMPLE_S of kernel time;
- a sample during which the measurer was preempted (an involuntary context switch: another
  process took the core, which on a shared machine doubles a call or worse) is taken again, up
  to half of `repeats` times per measurement (under sustained load no retake is cleaner);
- the result carries the median absolute deviation of the samples (MeasureResult.noise_s), and
  `faster` / `winner` declare a win only beyond the measured noise.
"""
from __future__ import annotations

import hashlib
import math
import resource
import socket
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ..errors import AkgpyError
from .executor import MeasureJob, MeasureResult, mad, median, unpack_program

# programs kept loaded between jobs: the interleaved re-timing of the top candidates sends the
# same few artifacts round after round
KEEP_PROGRAMS = 8
# the buffer written between timed calls: more than any L2 and most LLCs a kernel sees in a
# model; a larger one costs more time per repeat than most kernels take
FLUSH_CAP_BYTES = 128 << 20
# a sample shorter than this is dominated by timer and call overhead: calls are repeated within it
MIN_SAMPLE_S = 1e-3
MAX_INNER = 64
# with a flush before every call (10-40 ms for 128 MiB here) a sample's flushes cost far more
# than its calls, and each call is timed alone anyway: a few per sample keep a job near a second
MAX_INNER_FLUSHED = 4
# warm-up rounds: WARMUP_ROUND single calls each, until two rounds' medians agree within
# STABLE_REL, at most MAX_WARMUP_ROUNDS rounds or MAX_WARMUP_S seconds of calls; only the first
# time a program is measured in this process (later jobs find its pool and code warm)
WARMUP_ROUND = 2
STABLE_REL = 0.05
MAX_WARMUP_ROUNDS = 8
MAX_WARMUP_S = 2.0
# under sustained load every sample is preempted: retaking more than this only doubles the cost
MAX_RETAKE_SHARE = 0.5
# a win smaller than this share of the default's time is not worth a record, whatever the noise
MIN_GAIN_REL = 0.01

_references: OrderedDict = OrderedDict()
_programs: OrderedDict = OrderedDict()
_flush: dict[int, np.ndarray] = {}
_settled: OrderedDict = OrderedDict()  # program key -> its samples' inner calls, once warmed up


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
    return prog, key


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


def _touched(a: np.ndarray) -> np.ndarray:
    """`a` with every page written once: a fresh buffer's first touch faults each page in, a
    cost that belongs to no kernel call."""
    a.fill(0)
    return a


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
                    args.append(_touched(aligned_empty(p.shape, p.dtype)))
                    continue
                a = as_storage(as_aligned(arrays[g.inputs.index(p.tensor)]), p)
                shared = p.kind == "inplace" and p.tensor in k.reads
                args.append(_touched(aligned_empty(p.shape, p.dtype)) if shared else a)
            calls.append((k.unchecked, args))
    except (AttributeError, ValueError, TypeError):
        return lambda: prog(*arrays)
    return lambda: [f(*a) for f, a in calls]


def faster(a: Sequence[float], b: Sequence[float], *, min_gain_rel: float = MIN_GAIN_REL) -> bool:
    """Whether samples `a` beat samples `b` beyond the measured noise: the gain of a's median
    over b's exceeds both MADs together (their noise bands do not overlap) and
    `min_gain_rel` of b's median."""
    ma, mb = median(a), median(b)
    gain = mb - ma
    return gain > mad(a) + mad(b) and gain > min_gain_rel * mb


def winner(times: dict, default, *, min_gain_rel: float = MIN_GAIN_REL):
    """The key of `times` (key -> samples, e.g. trial -> re-timed samples) with the fastest
    median if it beats `default`'s samples beyond the noise (`faster`), else `default`."""
    if default not in times:
        raise AkgpyError(f"winner: the default {default!r} has no samples among {sorted(times)}")
    best = min((k for k in times if times[k]), key=lambda k: median(times[k]))
    if best != default and faster(times[best], times[default], min_gain_rel=min_gain_rel):
        return best
    return default


@dataclass
class Timing:
    """What `time_kernel` measured: `times` (seconds per call, one per sample, each the mean
    of `inner` calls), the untimed warm-up calls, and the samples taken again after a preemption."""
    times: list[float] = field(default_factory=list)
    warmup_calls: int = 0
    inner: int = 1
    retaken: int = 0


def involuntary_switches() -> int:
    """Involuntary context switches of this process (all its threads) so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw


def _flush_buffer(flush_bytes: int):
    buf = _flush.get(flush_bytes)
    if buf is None:
        # np.zeros maps untouched pages: fill once so no timed round pays their faults
        buf = _flush[flush_bytes] = np.zeros(flush_bytes // 8, np.float64)
        buf.fill(1.0)
    return buf


def time_kernel(call: Callable[[], object], warmup: int, repeats: int, flush_bytes: int, *,
                min_sample_s: float = MIN_SAMPLE_S, settled: int | None = None,
                clock: Callable[[], float] = time.perf_counter,
                switches: Callable[[], int] = involuntary_switches) -> Timing:
    """Time `call` (module docstring): warm-up until stable, `repeats` samples of `inner` calls
    each, a preempted sample taken again (at most MAX_RETAKE_SHARE of `repeats`). `settled`:
    the `inner` of an earlier measurement of this program, whose warm-up rounds are skipped.
    `clock` and `switches` are injectable for tests."""
    buf = _flush_buffer(flush_bytes) if flush_bytes else None
    stamp, preempted = [0.0], [False]

    def one() -> float:
        """One call from a flushed cache; notes whether the call (not the flush) was preempted."""
        if buf is not None:
            stamp[0] += 1.0
            buf.fill(stamp[0])
        before = switches()
        t = clock()
        call()
        dt = clock() - t
        preempted[0] |= switches() != before
        return dt

    for _ in range(warmup):
        call()
    calls, spent, prev, rounds, fastest = warmup, 0.0, None, 0, math.inf
    while settled is None:
        ts = [one() for _ in range(WARMUP_ROUND)]
        calls, spent, rounds = calls + WARMUP_ROUND, spent + sum(ts), rounds + 1
        cur, fastest = median(ts), min(fastest, *ts)
        if prev is not None and abs(cur - prev) <= STABLE_REL * min(cur, prev):
            break
        if rounds >= MAX_WARMUP_ROUNDS or spent >= MAX_WARMUP_S:
            break
        prev = cur
    cap = MAX_INNER_FLUSHED if buf is not None else MAX_INNER
    # sized by the fastest warm-up call: a preempted one only adds time, and sized by it a sample
    # of a 20 us kernel was one call
    inner = settled if settled is not None else max(1, min(cap, math.ceil(round(min_sample_s / max(fastest, 1e-9), 6))))

    def sample() -> float:
        if buf is not None:
            return sum(one() for _ in range(inner)) / inner
        before = switches()
        t = clock()
        for _ in range(inner):
            call()
        dt = clock() - t
        preempted[0] |= switches() != before
        return dt / inner

    out = Timing(warmup_calls=calls, inner=inner)
    max_retakes = max(1, int(MAX_RETAKE_SHARE * repeats))
    while len(out.times) < repeats:
        preempted[0] = False
        t = sample()
        if preempted[0] and out.retaken < max_retakes:
            out.retaken += 1
            continue
        out.times.append(t)
    return out


def time_calls(call, warmup: int, repeats: int, flush_bytes: int) -> list[float]:
    """`time_kernel`'s samples alone."""
    return time_kernel(call, warmup, repeats, flush_bytes).times


def run_measure(job: MeasureJob) -> MeasureResult:
    started, host = time.time(), socket.gethostname()

    def result(status: str, times=(), error=None) -> MeasureResult:
        return MeasureResult(job.trial, status, list(times), error, started, time.time(), host)
    try:
        g, inputs, want, ref_after = _reference(job.graph, job.seed)
        prog, key = _program(g, job)
        if job.check:
            why = check(g, prog, inputs, want, ref_after)
            if why is not None:
                return result("mismatch", error=why)
        call = bound_call(prog, [a.copy() for a in inputs])
        tm = time_kernel(call, job.warmup, job.repeats, job.flush_bytes, settled=_settled.get((key, job.flush_bytes)))
        _settled[key, job.flush_bytes] = tm.inner
        while len(_settled) > 4 * KEEP_PROGRAMS:
            _settled.popitem(last=False)
        r = result("ok", tm.times)
        r.warmup_calls, r.inner, r.retaken = tm.warmup_calls, tm.inner, tm.retaken
        return r
    except Exception as e:  # noqa: BLE001 - a candidate that cannot run is a failed trial
        return result("error", error=f"{type(e).__name__}: {e}")
