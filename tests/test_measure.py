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
