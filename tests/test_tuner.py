"""tune(): the default is trial 0 and never beaten by a slower candidate, failed candidates
(crash, hang, mismatch, illegal) are failed trials and tuning goes on, builds and
measurements never overlap, both budgets and Ctrl-C stop the search, and a seed fixes it.

Most tests drive the tuner through a fake executor and a two-dimension space (no compiles);
one tunes a real graph through LocalExecutor with injected faults."""
from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass

import pytest

from akgpy import GraphBuilder
from akgpy.tune import measure, tuner
from akgpy.tune.executor import BuildResult, LocalExecutor, MeasureResult


@dataclass(frozen=True)
class Dim:
    name: str
    values: tuple


class Cfg(dict):
    def to_json(self):
        return dict(self)


class FakeSpace:
    """a in (4, 1, 2, 8, 16, 32), b in (0..3); the default (4, 0); a == 16 is illegal."""
    dimensions = [Dim("a", (4, 1, 2, 8, 16, 32)), Dim("b", (0, 1, 2, 3))]

    def default(self):
        return {"a": 4, "b": 0}

    def config(self, point):
        return Cfg(point)

    def legal(self, point):
        return (False, "a=16 carries a dependence") if point["a"] == 16 else (True, "")


def seconds(cfg) -> float:
    """Fastest at a=8, b=0; the default (4, 0) is the third best."""
    return 1e-3 * (1 + abs(cfg["a"] - 8) / 8 + cfg["b"] / 4)


class FakeExecutor:
    def __init__(self, measure_sleep=0.0, interrupt_at=None, slow_others=False):
        self.built, self.measured, self.calls = [], [], 0
        self.measure_sleep, self.interrupt_at, self.slow_others = measure_sleep, interrupt_at, slow_others
        self.n_workers = 2

    def build(self, jobs):
        self.built += [j.config for j in jobs]
        return [BuildResult(j.trial, "ok", b"", {"config": j.config}) for j in jobs]

    def measure(self, jobs):
        out = []
        for j in jobs:
            self.calls += 1
            if self.interrupt_at is not None and self.calls == self.interrupt_at:
                raise KeyboardInterrupt
            time.sleep(self.measure_sleep)
            cfg = j.manifest["config"]
            t = seconds(cfg) if not self.slow_others or cfg == {"a": 4, "b": 0} else 1.0
            self.measured.append(j.trial)
            out.append(MeasureResult(j.trial, "ok", [t] * 3))
        return out

    def close(self):
        pass


@pytest.fixture
def fake_space(monkeypatch):
    monkeypatch.setattr(tuner, "space_for", lambda g, t: FakeSpace())
    monkeypatch.setattr(tuner, "config_from_json", lambda d: d)


def _graph(scale: float = 2.0):
    b = GraphBuilder("tt_rowsum")
    x = b.input("x", (128, 512), "float32")
    b.output(b.op("Exp", [x * scale + 1.0], (128, 512), "float32").sum(axis=1))
    return b.build()


def _tune(ex, **kw):
    kw = {"trials": 8, "search": "random", "seed": 0, "cache": False, "workers": 2, **kw}
    return tuner.tune(_graph(), executor=ex, **kw)


@pytest.mark.parametrize("search", ["random", "tpe", "model"])
def test_trial_budget_default_first_illegal_never_built(fake_space, search):
    ex = FakeExecutor()
    r = _tune(ex, trials=12, search=search)
    counted = [t for t in r.trials if t.status != "illegal"]
    assert len(counted) == 12
    assert r.trials[0].point == {"a": 4, "b": 0} and r.trials[0].index == 0
    assert all(c["a"] != 16 for c in ex.built), "an illegal point was built"
    assert all(t.phase == "legal" and t.time_s is None for t in r.trials if t.status == "illegal")
    assert len({tuple(sorted(t.point.items())) for t in r.trials}) == len(r.trials), "a point was tried twice"
    assert r.best_time_s <= r.default_time_s
    assert r.best_time_s == min(r.retimed.values())
    assert 0 in r.retimed


class BuildCheckedSpace(FakeSpace):
    """FakeSpace whose scheduling half of legality runs in the build workers: a == 32 is out
    of domain (refused by `precheck` before anything is built), a == 16 is refused by the build."""
    build_checks_legality = True

    def __init__(self):
        self.legal_calls = 0

    def legal(self, point):
        self.legal_calls += 1
        return super().legal(point)

    def precheck(self, point):
        return (False, "a=32 is out of domain", None) if point["a"] == 32 else (True, "", Cfg(point))


class LegalityInBuild(FakeExecutor):
    """Refuses a == 16 as "illegal" where a job asks for the legality check."""

    def __init__(self):
        super().__init__()
        self.jobs = []

    def build(self, jobs):
        self.jobs += jobs
        ok = [j for j in jobs if not (j.legal and j.config["a"] == 16)]
        results = {r.trial: r for r in super().build(ok)}
        return [results.get(j.trial) or BuildResult(j.trial, "illegal", error="a=16 carries a dependence")
                for j in jobs]


@pytest.mark.parametrize("search", ["random", "model"])
def test_legality_is_checked_in_the_build_and_illegal_points_are_never_measured(monkeypatch, search):
    sp = BuildCheckedSpace()
    monkeypatch.setattr(tuner, "space_for", lambda g, t: sp)
    monkeypatch.setattr(tuner, "config_from_json", lambda d: d)
    ex = LegalityInBuild()
    r = _tune(ex, trials=30, search=search)  # more than the 16 legal points: the pool is exhausted
    assert sp.legal_calls == 0, "the tuner scheduled a point in its own process"
    assert [j.legal for j in ex.jobs] == [j.trial != 0 for j in ex.jobs]  # the default is not judged
    # the prechecked pool holds no a == 32; every other point is tried once
    assert {tuple(sorted(t.point.items())) for t in r.trials} == \
        {(("a", a), ("b", b)) for a in FakeSpace.dimensions[0].values for b in FakeSpace.dimensions[1].values
         if a != 32}
    by_a = {a: [t for t in r.trials if t.point["a"] == a] for a in (16,)}
    assert [t.status for t in by_a[16]] == ["illegal"] * 4
    assert all("carries" in t.error and t.phase == "legal" for t in by_a[16])
    assert not {c["a"] for c in ex.built} & {16, 32}
    assert not {t.index for t in by_a[16]} & set(ex.measured), "an illegal point was measured"
    assert sum(t.status != "illegal" for t in r.trials) == 16 == sum(t.status == "ok" for t in r.trials)
    assert r.best_config == {"a": 8, "b": 0}


def test_never_slower_than_the_default(fake_space):
    r = _tune(FakeExecutor(slow_others=True), trials=6)
    assert r.best_trial == 0 and r.best_config == {"a": 4, "b": 0}
    assert r.best_time_s == r.default_time_s


def test_time_budget_stops_the_search(fake_space):
    t = time.monotonic()
    r = _tune(FakeExecutor(measure_sleep=0.25), trials=100, time_budget_s=1.0, workers=1)
    took = time.monotonic() - t
    assert 2 <= len([x for x in r.trials if x.status == "ok"]) < 10
    assert took < 1.0 + 0.25 + 6 * 5 * 0.25 + 1.0  # the last round, the re-timing, slack


def test_ctrl_c_returns_what_finished(fake_space):
    r = _tune(FakeExecutor(interrupt_at=5), trials=20, workers=1)
    assert r.interrupted
    ok = [t for t in r.trials if t.status == "ok"]
    assert len(ok) == 4 and len(r.trials) - len(ok) == sum(t.status == "illegal" for t in r.trials)  # the 5th never finished
    assert r.best_time_s == min(t.time_s for t in ok)
    assert r.retimed == {}


@pytest.mark.parametrize("search", ["random", "tpe", "model"])
def test_searcher_is_deterministic_for_a_seed(fake_space, search):
    runs = [[t.point for t in _tune(FakeExecutor(), trials=14, search=search, seed=s).trials] for s in (3, 3, 4)]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_bad_arguments_are_named():
    from akgpy.errors import AkgpyError
    with pytest.raises(AkgpyError, match="trials"):
        tuner.tune(_graph(), trials=0, cache=False)
    with pytest.raises(AkgpyError, match="unknown search 'annealing'"):
        from akgpy.tune.search import make_searcher
        make_searcher("annealing", FakeSpace.dimensions)


# --- a real graph, real builds and measurements, injected faults ---

FAULTS = ("crash", "timeout", "mismatch")


def faulty_measure(job):
    """The measurer's job function with faults injected by trial (the plan Recording wrote to
    $AKGPY_TEST_FAULTS): a segfault, a hang, and a reference the kernel's outputs disagree with."""
    import json
    plan = json.loads(open(os.environ["AKGPY_TEST_FAULTS"]).read())
    fault = plan.get(str(job.trial)) if job.check else None
    if fault == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    if fault == "timeout":
        time.sleep(600)
    if fault == "mismatch":
        g, inputs, want, ref_after = measure._reference(job.graph, job.seed)
        real = measure._reference
        measure._reference = lambda text, seed: (g, inputs, [w * 2 + 1 for w in want], ref_after)
        try:
            return measure.run_measure(job)
        finally:
            measure._reference = real
    return measure.run_measure(job)


class Recording:
    """Records when each build and measurement ran; gives the first three candidates after
    the default a fault each (FAULTS, in order)."""

    def __init__(self, inner, plan_path):
        self.inner, self.spans, self.n_workers, self.path = inner, [], 1, plan_path
        self.plan: dict[str, str] = {}

    def build(self, jobs):
        out = self.inner.build(jobs)
        self.spans += [("build", r.started, r.finished) for r in out]
        return out

    def measure(self, jobs):
        import json
        for j in jobs:
            if j.check and j.trial != 0 and str(j.trial) not in self.plan and len(self.plan) < len(FAULTS):
                self.plan[str(j.trial)] = FAULTS[len(self.plan)]
        with open(self.path, "w") as f:
            json.dump(self.plan, f)
        out = self.inner.measure(jobs)
        self.spans += [("measure", r.started, r.finished) for r in out]
        return out

    def close(self):
        self.inner.close()


def test_real_tune_with_crash_hang_and_mismatch(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(os.path.dirname(__file__))  # the spawned measurer imports this module
    monkeypatch.setenv("AKGPY_TEST_FAULTS", str(tmp_path / "faults.json"))
    ex = Recording(LocalExecutor(1, measure_fn="test_tuner:faulty_measure"), tmp_path / "faults.json")
    try:
        r = tuner.tune(_graph(), trials=6, search="random", seed=0, cache=False, executor=ex, workers=1,
                       measure_timeout_s=10, repeats=3)
    finally:
        ex.close()
    status = {t.index: t.status for t in r.trials}
    assert status[0] == "ok"
    faulted = {int(k): v for k, v in ex.plan.items()}
    assert sorted(faulted.values()) == sorted(FAULTS)
    assert {i: status[i] for i in faulted} == faulted, [(t.index, t.status, t.error) for t in r.trials]
    assert all(r.trials[i].time_s is None for i in faulted)
    assert sum(t.status != "illegal" for t in r.trials) == 6  # tuning went on past each fault
    assert r.best_trial not in faulted and status[r.best_trial] == "ok"
    assert r.best_time_s <= r.default_time_s
    assert r.trials[0].config == tuner.config_to_json(tuner.space_for(_graph(), None).config(r.trials[0].point))
    builds = [(a, b) for kind, a, b in ex.spans if kind == "build"]
    measures = [(a, b) for kind, a, b in ex.spans if kind == "measure"]
    assert builds and measures
    overlaps = [(bb, m) for bb in builds for m in measures if bb[0] < m[1] and m[0] < bb[1]]
    assert not overlaps, overlaps
