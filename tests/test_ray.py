"""RayExecutor (akgpy/tune/distributed.py) on a local two-CPU Ray cluster: the same candidates
built and measured through Ray and through LocalExecutor end with the same status, artifacts
travel as bytes, and a node never times two kernels at once nor while a build runs."""
from __future__ import annotations

import threading

import pytest

ray = pytest.importorskip("ray")

from akgpy import GraphBuilder  # noqa: E402
from akgpy.frontends.composite import dump_composite  # noqa: E402
from akgpy.schedule.config import ScheduleConfig  # noqa: E402
from akgpy.tune.executor import BuildJob, LocalExecutor, MeasureJob  # noqa: E402


def _graph_text() -> str:
    b = GraphBuilder("ray_ewise")
    x, y = b.input("x", [64, 256]), b.input("y", [64, 256])
    b.output(b.relu(x * y + 1.0))
    return dump_composite(b.build())


def _build_jobs(text: str) -> list[BuildJob]:
    base = ScheduleConfig()
    configs = [base, ScheduleConfig(parallel=False), ScheduleConfig(unroll=False, parallel=False)]
    jobs = [BuildJob(i, text, c.to_json()) for i, c in enumerate(configs)]
    jobs.append(BuildJob(len(jobs), text.replace('"Mul"', '"NoSuchOp"'), base.to_json()))  # the compiler refuses it
    return jobs


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def executors(cluster):
    from akgpy.tune.distributed import RayExecutor
    with RayExecutor() as rex, LocalExecutor(workers=1) as lex:
        yield rex, lex


def _measure_jobs(text, builds):
    jobs = [MeasureJob(b.trial, text, b.artifact, b.manifest, repeats=3) for b in builds if b.ok]
    # a corrupt artifact: a failed trial on both executors alike
    ok = next(b for b in builds if b.ok)
    jobs.append(MeasureJob(99, text, ok.artifact[: len(ok.artifact) // 3], ok.manifest, repeats=3))
    return jobs


def test_ray_builds_and_measures_like_local(executors):
    rex, lex = executors
    text = _graph_text()
    jobs = _build_jobs(text)
    rb, lb = rex.build(jobs), lex.build(jobs)
    assert [r.trial for r in rb] == [j.trial for j in jobs]
    assert [r.status for r in rb] == [r.status for r in lb]
    assert [r.status for r in rb] == ["ok", "ok", "ok", "error"]
    assert "NoSuchOp" in rb[-1].error
    for r in rb[:3]:
        assert isinstance(r.artifact, bytes) and r.artifact and r.manifest

    mjobs = _measure_jobs(text, rb)
    rm, lm = rex.measure(mjobs), lex.measure(mjobs)
    assert [r.trial for r in rm] == [j.trial for j in mjobs]
    assert [r.status for r in rm] == [r.status for r in lm]
    assert [r.status for r in rm][:3] == ["ok"] * 3
    assert rm[-1].status != "ok"
    for r in rm[:3]:
        assert len(r.times) == 3 and all(t > 0 for t in r.times)
        assert r.machine in rex.machines


def test_one_measurement_per_node_and_none_beside_a_build(executors):
    rex, _ = executors
    text = _graph_text()
    builds = rex.build(_build_jobs(text)[:2])
    mjobs = [MeasureJob(b.trial, text, b.artifact, b.manifest, repeats=5) for b in builds]
    out: dict[str, list] = {}

    def measure(key):
        out[key] = rex.measure(mjobs)

    def build(key):
        out[key] = rex.build(_build_jobs(text)[:2])

    threads = [threading.Thread(target=measure, args=("m1",)), threading.Thread(target=measure, args=("m2",)),
               threading.Thread(target=build, args=("b",))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert rex.nodes == 1
    measured = [(r.started, r.finished) for k in ("m1", "m2") for r in out[k]]
    assert all(r.ok for k in ("m1", "m2") for r in out[k])
    assert all(r.ok for r in out["b"])
    # one node: the two calls' measurements ran one after the other, never side by side
    spans = sorted(measured)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), spans
    # and no build ran while any measurement did
    for r in out["b"]:
        assert all(r.finished <= s or r.started >= f for s, f in measured), (r.started, r.finished, measured)


def test_tune_on_ray_stores_in_the_drivers_cache(executors, tmp_path):
    from akgpy.frontends.composite import load_composite
    from akgpy.graph import structural_hash
    from akgpy.tune import tune
    from akgpy.tune.cache import Cache
    rex, _ = executors
    cache = Cache(tmp_path / "cache", key_file=tmp_path / "secret.key")
    g = load_composite(_graph_text())
    res = tune(g, trials=3, search="random", cache=cache, executor=rex)
    assert not res.interrupted and res.best_time_s is not None
    assert [t.status for t in res.trials if t.status != "illegal"][0] == "ok"  # trial 0, the default, ran
    [rec] = cache.records()
    assert rec.key.graph == structural_hash(g) and rec.best_s == res.best_time_s
    assert rec.artifact and rec.manifest  # the artifact came back from the cluster as bytes
