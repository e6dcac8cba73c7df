"""`tune`: search a graph's schedule space for the fastest kernel that matches the reference.

Trial 0 is the target's default config, so the result is never slower than the default. Each
round asks the searcher for as many points as there are build workers, rejects the points whose
values are out of domain (`Space.precheck`), builds the rest in parallel, and the build workers
reject the points whose schedule is not what they asked for (the legality check reuses the
build's schedule; a space without `build_checks_legality` is checked with `Space.legal` in this
process first). An illegal point is never measured nor counted as a trial. Then the built ones
are measured one at a time (tune/executor.py: builds and measurements never overlap). A failed build, a crash, a
hang or a mismatch against the reference is a failed trial and the search goes on. At the end
the five fastest (and the default) are re-timed interleaved, round after round on one
machine, and the fastest median of those rounds wins. Ctrl-C stops the search and returns
what finished (without the re-timing).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..errors import AkgpyError
from .executor import BuildJob, MeasureJob, config_from_json, config_to_json, target_json

TOP = 5  # candidates re-timed interleaved before a winner is kept
RETIME_ROUNDS = 5
PRECHECK_DRAW = 16  # candidates drawn per pool point kept: most of a big space fails the precheck
MAX_ILLEGAL = 1000  # illegal points in a row before the space is taken as exhausted


@dataclass
class Trial:
    index: int
    point: dict
    config: dict  # ScheduleConfig JSON
    status: str  # "ok" | "illegal" | build "error"/"crash"/"timeout" | measure "mismatch"/"error"/"crash"/"timeout"
    time_s: float | None = None  # median of the search's repeats
    error: str | None = None
    phase: str = ""  # where it failed: "legal", "build" or "measure"
    finished_s: float = 0.0  # seconds since tuning started


@dataclass
class TuneResult:
    graph: str  # structural hash
    target: Any
    best_config: Any  # ScheduleConfig
    best_time_s: float | None
    default_time_s: float | None
    best_trial: int
    trials: list[Trial]
    retimed: dict[int, float] = field(default_factory=dict)  # trial -> median of the interleaved rounds
    record: Any = None  # what the cache stored, if one did
    interrupted: bool = False
    wall_s: float = 0.0
    dimensions: list = field(default_factory=list)  # the space searched (tune/space.py Dimensions)
    phases: dict = field(default_factory=dict)  # wall seconds: space, legal, build, measure, retime

    @property
    def speedup(self) -> float | None:
        if not self.best_time_s or not self.default_time_s:
            return None
        return self.default_time_s / self.best_time_s


def space_for(graph, target, probe_many=None):
    """The graph's search space: `akgpy.tune.space` (tune/space.py), its probes through
    `probe_many` where given."""
    from .space import space
    return space(graph, target, probe_many=probe_many)


def _probe_many(ex, graph_text: str, tjson):
    """space()'s probes on the executor's build workers (None where it has none)."""
    if getattr(ex, "probe", None) is None:
        return None
    from .executor import ProbeJob
    if getattr(ex, "warm_up", None) is not None:
        ex.warm_up()

    def probe_many(cfgs):
        results = ex.probe([ProbeJob(i, graph_text, config_to_json(c), tjson) for i, c in enumerate(cfgs)])
        return [r.probe if r.status == "ok" else None for r in results]
    return probe_many




def _resolve_target(target):
    from ..target import resolve_target
    return resolve_target(target)


def _data_bytes(g) -> int:
    from .. import dtypes
    names = list(g.inputs) + list(g.real_outputs)
    return sum(g.tensors[n].size * dtypes.to_numpy(g.tensors[n].dtype).itemsize for n in names)




def tune(graph, target=None, *, trials: int = 64, time_budget_s: float | None = None, workers: int | None = None,
         search: str | None = None, seed: int = 0, cache=None, executor=None,
         progress: Callable[[Trial, TuneResult], None] | None = None, repeats: int = 9,
         measure_timeout_s: float = 60.0, schedule: str = "poly", pool_size: int | None = None) -> TuneResult:
    """Tune `graph` (a Graph or composite JSON) for `target`; see the module doc.

    trials: candidates built and measured, the default included; time_budget_s: no new round
    starts after it; workers: parallel builds (default: the CPU count); search: "model" (the
    default, search.DEFAULT_SEARCH), "tpe" or "random"; cache: where the result is stored
    (None: the user cache unless AKGPY_CACHE=off; False: nowhere); executor: a tune.executor.Executor (default: a LocalExecutor, closed at
    the end); progress(trial, partial_result) after each finished trial; pool_size: candidate
    points the searcher chooses from (default: max(POOL_SIZE, 4 x trials); tune/search.py)."""
    from ..frontends.composite import load_composite
    from ..graph.ir import Graph
    from .executor import LocalExecutor
    from .search import DEFAULT_SEARCH, POOL_SIZE, make_searcher

    if not isinstance(trials, int) or isinstance(trials, bool) or trials < 1:
        raise AkgpyError(f"tune: trials must be a positive int, got {trials!r}")
    if time_budget_s is not None and not time_budget_s > 0:
        raise AkgpyError(f"tune: time_budget_s must be > 0 seconds, got {time_budget_s!r}")
    if pool_size is not None and (not isinstance(pool_size, int) or isinstance(pool_size, bool) or pool_size < 1):
        raise AkgpyError(f"tune: pool_size must be a positive int, got {pool_size!r}")
    t0 = time.monotonic()
    g = graph if isinstance(graph, Graph) else load_composite(graph)
    tgt = _resolve_target(target)
    # jobs carry the target as the caller named it: compile_graph resolves it in the worker
    text, tjson = g.to_composite(), target_json(target)
    own = executor is None
    ex = executor or LocalExecutor(workers)
    try:
        probe_many = _probe_many(ex, text, tjson)
        sp = space_for(g, tgt, probe_many) if probe_many else space_for(g, tgt)
        phases = {"space": time.monotonic() - t0, "legal": 0.0, "build": 0.0, "measure": 0.0, "retime": 0.0}
        size = pool_size or max(POOL_SIZE, 4 * trials)
        in_build = bool(getattr(sp, "build_checks_legality", False))
        searcher = make_searcher(search or DEFAULT_SEARCH, sp.dimensions, seed, pool_size=size,
                                 pool=_prechecked_pool(sp, size, seed) if in_build else None)
    except BaseException:
        if own:
            ex.close()
        raise
    batch = max(1, workers or getattr(ex, "n_workers", 1))
    flush = _flush_bytes(g, tgt)
    history: list[Trial] = []
    result = TuneResult(g.hash(), tgt, None, None, None, 0, history, dimensions=list(sp.dimensions), phases=phases)
    artifacts: dict[int, tuple[bytes, dict]] = {}

    def finish(trial: Trial) -> None:
        trial.finished_s = time.monotonic() - t0
        history.append(trial)
        if trial.status == "ok" and (result.best_time_s is None or trial.time_s < result.best_time_s):
            result.best_time_s, result.best_trial = trial.time_s, trial.index
        if progress is not None:
            progress(trial, result)

    def run_round(points: list[dict], check: bool = True) -> None:
        trials_ = []
        for point in points:
            cfg = config_to_json(sp.config(point))
            trials_.append(Trial(len(history) + len(trials_), point, cfg, "pending"))
        t_build = time.monotonic()
        built = ex.build([BuildJob(t.index, text, t.config, tjson, schedule, legal=check and in_build)
                          for t in trials_])
        phases["build"] += time.monotonic() - t_build
        measure_jobs, waiting = [], []
        for t, b in zip(trials_, built):
            if b.status != "ok":
                t.status, t.error, t.phase = b.status, b.error, "legal" if b.status == "illegal" else "build"
                continue
            artifacts[t.index] = (b.artifact, b.manifest)
            measure_jobs.append(MeasureJob(t.index, text, b.artifact, b.manifest, tjson, seed=seed, repeats=repeats,
                                           flush_bytes=flush, timeout_s=measure_timeout_s))
            waiting.append(t)
        t_measure = time.monotonic()
        measured = ex.measure(measure_jobs)
        phases["measure"] += time.monotonic() - t_measure
        for t, m in zip(waiting, measured):
            if m.status == "ok":
                t.status, t.time_s = "ok", m.median_s
            else:
                t.status, t.error, t.phase = m.status, m.error, "measure"
        for t in trials_:
            searcher.tell(t.point, t.time_s)
            finish(t)

    try:
        try:
            default = {d.name: d.values[0] for d in sp.dimensions}  # each dimension lists its default first
            run_round([default], check=False)
            result.default_time_s = history[0].time_s
            illegal = 0
            while sum(t.status != "illegal" for t in history) < trials:
                if time_budget_s is not None and time.monotonic() - t0 >= time_budget_s:
                    break
                left = trials - sum(t.status != "illegal" for t in history)
                points = []
                while len(points) < min(batch, left):
                    p = searcher.ask()
                    if p is None:
                        break
                    t_legal = time.monotonic()
                    ok, why = sp.precheck(p)[:2] if in_build else sp.legal(p)
                    phases["legal"] += time.monotonic() - t_legal
                    if ok:
                        points.append(p)
                        continue
                    illegal += 1
                    searcher.tell(p, None)
                    finish(Trial(len(history), p, {}, "illegal", error=why, phase="legal"))
                    if illegal >= MAX_ILLEGAL:
                        break
                if not points:
                    break
                before = len(history)
                run_round(points)
                if any(t.status != "illegal" for t in history[before:]):
                    illegal = 0
                else:
                    illegal += len(history) - before
                    if illegal >= MAX_ILLEGAL:
                        break
        except KeyboardInterrupt:
            result.interrupted = True
        if not result.interrupted:
            try:
                t_retime = time.monotonic()
                _retime(ex, result, artifacts, text, tjson, flush, measure_timeout_s, seed)
                phases["retime"] = time.monotonic() - t_retime
            except KeyboardInterrupt:
                result.interrupted = True
    finally:
        if own:
            ex.close()
    ok = [t for t in history if t.status == "ok"]
    if not ok:
        raise AkgpyError(f"tune: no candidate of {g.name} built, ran and matched the reference "
                         f"({len(history)} trials; first failure: {history[0].status}: {history[0].error})")
    result.best_config = config_from_json(history[result.best_trial].config)
    result.wall_s = time.monotonic() - t0
    result.record = _store(cache, g, target, result, artifacts.get(result.best_trial), schedule)
    return result


def _prechecked_pool(sp, size: int, seed: int) -> list[dict]:
    """`size` candidate points that pass `sp.precheck` (drawn from a seeded pool PRECHECK_DRAW x as large),
    so the searcher's pool holds no point refused without a schedule (a band choice that
    another value of the point invalidates: Space.reshapes)."""
    from .search import candidate_pool
    drawn = candidate_pool(sp.dimensions, PRECHECK_DRAW * size, seed)
    kept = [p for p in drawn if sp.precheck(p)[0]]
    return kept[:size] or drawn[:size]


def _flush_bytes(g, target) -> int:
    from .measure import flush_bytes_for
    return flush_bytes_for(_data_bytes(g), target.llc_bytes)


def _retime(ex, result: TuneResult, artifacts, text, tjson, flush, timeout_s, seed) -> None:
    """Re-time the TOP fastest trials and the default interleaved (round robin on one machine);
    the fastest median over all rounds becomes the best."""
    ok = sorted((t for t in result.trials if t.status == "ok"), key=lambda t: t.time_s)
    chosen = [t.index for t in ok[:TOP]]
    if result.trials and result.trials[0].status == "ok" and 0 not in chosen:
        chosen.append(0)
    if len(chosen) < 2:
        return
    jobs = [MeasureJob(i, text, *artifacts[i], tjson, seed=seed, warmup=1, repeats=3, flush_bytes=flush, check=False,
                       timeout_s=timeout_s)
            for _ in range(RETIME_ROUNDS) for i in chosen]
    times: dict[int, list[float]] = {i: [] for i in chosen}
    failed: set[int] = set()
    for m in ex.measure(jobs):
        if m.status == "ok":
            times[m.trial].extend(m.times)
        else:  # a candidate that ran before and fails now cannot be trusted to win
            failed.add(m.trial)
    for i, ts in times.items():
        if i not in failed and ts:
            ts = sorted(ts)
            result.retimed[i] = ts[len(ts) // 2] if len(ts) % 2 else 0.5 * (ts[len(ts) // 2 - 1] + ts[len(ts) // 2])
    if result.retimed:
        best = min(result.retimed, key=result.retimed.get)
        result.best_trial, result.best_time_s = best, result.retimed[best]
        if 0 in result.retimed:
            result.default_time_s = result.retimed[0]


def _store(cache, g, target, result: TuneResult, artifact, schedule: str):
    """The tuned record into the cache (tune/cache.py) under the key a plain compile of `g`
    looks up, with the winner's artifact; None where nothing was stored. `cache`: a Cache, a
    directory, None (the user cache, unless AKGPY_CACHE=off) or False (nowhere)."""
    if cache is False:
        return None
    from .cache import Cache, CacheKey, Record, default_cache
    c = default_cache() if cache is None else cache if isinstance(cache, Cache) else Cache(cache)
    if c is None:
        return None
    tgt, llvm = c.target_for(target)
    key = CacheKey.make(result.graph, tgt, schedule=schedule, config=None, llvm=llvm)
    blob, manifest = artifact or (None, None)
    if manifest is None or not _reproducible(manifest):
        blob = manifest = None  # compile_graph builds it from the record's config
    rows = [{"trial": t.index, "status": t.status, "time_s": t.time_s, "config": t.config, "error": t.error,
             "phase": t.phase, "finished_s": t.finished_s} for t in result.trials]
    rec = Record(key, config=config_to_json(result.best_config), best_s=result.best_time_s,
                 default_s=result.default_time_s, history=rows, artifact=blob, manifest=manifest)
    c.put(rec)
    return rec


def _reproducible(manifest: dict) -> bool:
    """No kernel of the artifact was shaped by a wall-clock guard (such code is never cached)."""
    for k in manifest.get("kernels", ()):
        path = k.get("schedule_path") or {}
        if path.get("deterministic", True) is False or path.get("guard_fired"):
            return False
    return True
