"""The measurer (akgpy/tune/measure.py) and its process (tune/executor.py): a candidate is
checked against the reference before it is timed, and one that crashes or hangs is a failed
job after which the measurer is restarted."""
from __future__ import annotations

import os
import signal
import time

import pytest

from akgpy import GraphBuilder
from akgpy.tune import measure
from akgpy.tune.executor import BuildJob, LocalExecutor, MeasureJob, config_to_json

CRASH, HANG = 1, 3


def _graph(scale: float = 2.0):
    b = GraphBuilder("tm_rowsum")
    x = b.input("x", (64, 256), "float32")
    b.output((x * scale + 1.0).sum(axis=1))
    return b.build()


def faulty_measure(job):
    """The measurer's job function with injected faults: a segfault and a hang."""
    if job.trial == CRASH:
        os.kill(os.getpid(), signal.SIGSEGV)
    if job.trial == HANG:
        time.sleep(600)
    return measure.run_measure(job)


@pytest.fixture(scope="module")
def built():
    from akgpy.targets import default_config
    g = _graph()
    with LocalExecutor(1) as ex:
        r, = ex.build([BuildJob(0, g.to_composite(), config_to_json(default_config()))])
    assert r.ok, r.error
    return g, r


def test_match_is_timed(built):
    g, r = built
    m = measure.run_measure(MeasureJob(0, g.to_composite(), r.artifact, r.manifest, repeats=5, flush_bytes=1 << 20))
    assert m.status == "ok", m.error
    assert len(m.times) == 5 and all(t > 0 for t in m.times)
    assert min(m.times) <= m.median_s <= max(m.times)


def test_mismatch_is_not_timed(built, monkeypatch):
    """A program computing x*3+1 measured as the graph x*2+1: a mismatch, no times."""
    from akgpy.pipeline import compile_graph
    g, r = built
    wrong = compile_graph(_graph(3.0))
    monkeypatch.setattr(measure, "unpack_program", lambda graph, blob, manifest: wrong)
    monkeypatch.setattr(measure, "_programs", type(measure._programs)())
    m = measure.run_measure(MeasureJob(7, g.to_composite(), r.artifact, r.manifest, repeats=3))
    assert m.status == "mismatch", (m.status, m.error)
    assert m.times == [] and m.median_s is None
    assert "beyond tol" in m.error


def test_crash_and_hang_are_failed_jobs_and_the_measurer_restarts(built, monkeypatch):
    monkeypatch.syspath_prepend(os.path.dirname(__file__))  # the spawned measurer imports this module
    g, r = built
    text = g.to_composite()
    jobs = [MeasureJob(i, text, r.artifact, r.manifest, repeats=3, timeout_s=20 if i != HANG else 3) for i in range(5)]
    with LocalExecutor(1, measure_fn="test_measure:faulty_measure") as ex:
        t = time.monotonic()
        results = ex.measure(jobs)
        took = time.monotonic() - t
    assert [m.trial for m in results] == list(range(5))
    assert [m.status for m in results] == ["ok", "crash", "ok", "timeout", "ok"], [(m.status, m.error) for m in results]
    assert f"signal {int(signal.SIGSEGV)}" in results[CRASH].error
    assert results[HANG].finished - results[HANG].started < 30
    assert all(len(results[i].times) == 3 for i in (0, 2, 4))
    assert took < 200


def test_flush_only_when_the_data_fits_the_llc():
    assert measure.flush_bytes_for(1 << 30, 32 << 20) == 0
    assert measure.flush_bytes_for(1 << 20, 32 << 20) == 64 << 20
    assert measure.flush_bytes_for(1 << 20, 480 << 20) == measure.FLUSH_CAP_BYTES


class FakeKernel:
    """A kernel on a virtual clock: its first `slow` calls start at `slow_s` and halve their
    excess over `fast_s` call after call (a pool spinning up, pages faulting in), the rest
    take `fast_s`. `preempt_at`: the calls during which another process takes the core (they take `slow_s`
    too, and the involuntary-switch counter moves)."""

    def __init__(self, slow: int, slow_s: float = 5e-3, fast_s: float = 2e-3, preempt_at=()):
        self.slow, self.slow_s, self.fast_s, self.preempt_at = slow, slow_s, fast_s, set(preempt_at)
        self.now, self.calls, self.switched = 0.0, 0, 0

    def clock(self) -> float:
        return self.now

    def switches(self) -> int:
        return self.switched

    def __call__(self) -> None:
        if self.calls in self.preempt_at:
            self.switched += 1
            self.now += self.slow_s
        elif self.calls < self.slow:
            self.now += self.fast_s + (self.slow_s - self.fast_s) * 0.5 ** self.calls
        else:
            self.now += self.fast_s
        self.calls += 1


def test_warmup_runs_until_the_kernel_settles():
    """The first 7 calls are 2.5x slower (pool spin-up, first touch): none of them is a sample,
    however small `warmup` is, and the samples are the steady time."""
    k = FakeKernel(slow=7)
    tm = measure.time_kernel(k, warmup=1, repeats=5, flush_bytes=0, clock=k.clock, switches=k.switches)
    assert tm.warmup_calls >= 7
    assert tm.times == [pytest.approx(2e-3)] * 5
    # the old rule (a fixed `warmup` of 2, then time) would have timed slow calls
    assert tm.warmup_calls > 2


def test_warmup_stops_once_two_rounds_agree():
    k = FakeKernel(slow=0)
    tm = measure.time_kernel(k, warmup=2, repeats=3, flush_bytes=0, clock=k.clock, switches=k.switches)
    assert tm.warmup_calls == 2 + 2 * measure.WARMUP_ROUND


def test_a_settled_program_skips_the_warmup_rounds():
    k = FakeKernel(slow=0)
    tm = measure.time_kernel(k, warmup=1, repeats=3, flush_bytes=0, settled=4, clock=k.clock, switches=k.switches)
    assert tm.warmup_calls == 1 and tm.inner == 4 and k.calls == 1 + 3 * 4


def test_short_calls_are_repeated_to_a_minimum_sample_time():
    k = FakeKernel(slow=0, fast_s=1e-4)
    tm = measure.time_kernel(k, warmup=1, repeats=4, flush_bytes=0, clock=k.clock, switches=k.switches)
    assert tm.inner == 10  # 10 x 0.1 ms >= MIN_SAMPLE_S
    assert tm.times == [pytest.approx(1e-4)] * 4
    assert k.calls == tm.warmup_calls + 4 * 10


def test_a_preempted_sample_is_taken_again():
    """Two sample calls (after the warm-up) are preempted (2.5x slower, a switch): retaken,
    not reported."""
    first = 2 + 2 * measure.WARMUP_ROUND
    k = FakeKernel(slow=0, preempt_at=(first + 1, first + 3))
    tm = measure.time_kernel(k, warmup=2, repeats=6, flush_bytes=0, clock=k.clock, switches=k.switches)
    assert tm.warmup_calls == first and k.calls == first + 6 + 2
    assert tm.retaken == 2
    assert tm.times == [pytest.approx(2e-3)] * 6


def test_preemption_retakes_are_bounded():
    """On a machine that preempts every call the measurement still ends, with the slow samples."""
    k = FakeKernel(slow=0, preempt_at=range(1000))
    tm = measure.time_kernel(k, warmup=1, repeats=6, flush_bytes=0, clock=k.clock, switches=k.switches)
    assert tm.retaken == 3 and len(tm.times) == 6


def test_noise_is_the_median_absolute_deviation():
    from akgpy.tune.executor import MeasureResult
    m = MeasureResult(0, "ok", [1.0, 1.1, 0.9, 1.05, 3.0])
    assert m.median_s == pytest.approx(1.05)
    assert m.noise_s == pytest.approx(0.05)  # |dev| = .05 .05 .15 0 1.95 -> median .05
    assert MeasureResult(0, "error").noise_s is None


def test_a_win_must_exceed_the_noise():
    default = [1.00, 1.02, 0.98, 1.01, 0.99]  # MAD 0.01
    tie = [0.985, 1.005, 0.965, 0.995, 0.975]  # 1.5% faster, inside the noise bands
    win = [0.90, 0.91, 0.89, 0.905, 0.895]
    assert not measure.faster(tie, default)
    assert measure.faster(win, default)
    assert not measure.faster(default, win)
    assert measure.winner({0: default, 3: tie}, 0) == 0
    assert measure.winner({0: default, 3: tie, 5: win}, 0) == 5
    # a tiny gain on perfectly quiet samples is still below MIN_GAIN_REL
    assert measure.winner({0: [1.0] * 3, 1: [0.995] * 3}, 0) == 0
    from akgpy.errors import AkgpyError
    with pytest.raises(AkgpyError, match="default 0 has no samples"):
        measure.winner({1: win}, 0)


def test_real_measurement_reports_its_warmup_and_noise(built):
    g, r = built
    m = measure.run_measure(MeasureJob(0, g.to_composite(), r.artifact, r.manifest, repeats=5, check=False))
    assert m.status == "ok", m.error
    assert m.warmup_calls >= 2 + 2 * measure.WARMUP_ROUND and m.inner >= 1
    assert m.noise_s is not None and 0 <= m.noise_s < m.median_s
    again = measure.run_measure(MeasureJob(1, g.to_composite(), r.artifact, r.manifest, repeats=3, check=False))
    assert again.ok and again.warmup_calls == 2 and again.inner == m.inner  # warmed up once per program
    # a sample is at least MIN_SAMPLE_S of calls unless the cap on inner calls was reached
    assert m.median_s * m.inner >= 0.5 * measure.MIN_SAMPLE_S or m.inner == measure.MAX_INNER


def test_flushed_samples_cap_their_inner_calls():
    """With an LLC flush before every call a 0.1 ms kernel gets MAX_INNER_FLUSHED calls per
    sample, each timed alone (its flush outside the timing)."""
    k = FakeKernel(slow=0, fast_s=1e-4)
    tm = measure.time_kernel(k, warmup=1, repeats=3, flush_bytes=1 << 20, clock=k.clock, switches=k.switches)
    assert tm.inner == measure.MAX_INNER_FLUSHED
    assert tm.times == [pytest.approx(1e-4)] * 3
