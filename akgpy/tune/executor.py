"""Where a tuner's builds and measurements run: the jobs and results (plain, picklable data;
artifacts travel as bytes), the `Executor` protocol, and `LocalExecutor` (this machine).

Builds run in parallel in spawned worker processes that import akgpy and TVM once each; a
worker that dies is a failed build ("crash") and is replaced. Measurements run one at a time
in one long-lived measurer process (akgpy/tune/measure.py). A build never runs while a
measurement does: timings taken beside a compile would measure the compile's load.
"""
from __future__ import annotations

import dataclasses
import importlib
import multiprocessing
import os
import socket
import threading
import time
import traceback
from dataclasses import dataclass, field
from multiprocessing.connection import wait as wait_any
from typing import Any, Callable, Protocol, Sequence

from ..errors import AkgpyError

# a build is a compile (isl, TVM, LLVM): minutes would mean a stuck isl search, not a slow kernel
BUILD_TIMEOUT_S = 300.0
# a worker imports akgpy and TVM before its first job; under load that takes seconds
STARTUP_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class BuildJob:
    """Compile `graph` (composite JSON text) with `config` (ScheduleConfig JSON) for `target`
    (a target spec `resolve_target` accepts, as JSON). `legal`: judge the kernel it schedules
    (tune/space.problem_of) and answer "illegal" instead of an artifact where it is not what the
    config asked for: the legality check reuses the build's schedule, in parallel."""
    trial: int
    graph: str
    config: dict
    target: Any = None
    schedule: str = "poly"
    timeout_s: float = BUILD_TIMEOUT_S
    legal: bool = False


@dataclass
class BuildResult:
    trial: int
    # "ok" | "illegal" (BuildJob.legal: not scheduled as asked; no artifact) | "error" (the
    # compiler refused) | "crash" (worker died) | "timeout"
    status: str
    artifact: bytes | None = None
    manifest: dict | None = None
    error: str | None = None
    started: float = 0.0  # time.time() where the work ran
    finished: float = 0.0
    machine: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class ProbeJob:
    """Schedule `graph` with `config` for `target` without machine code (tune/space.py's probe:
    the TIR's hash, whether it is legal, the bands' facts); space() sends its probes to the
    build workers as these."""
    trial: int
    graph: str
    config: dict
    target: Any = None
    timeout_s: float = BUILD_TIMEOUT_S


@dataclass
class ProbeResult:
    trial: int
    status: str  # "ok" | "error" | "crash" | "timeout"
    probe: Any = None  # tune/space._Probe
    error: str | None = None
    started: float = 0.0
    finished: float = 0.0
    machine: str = ""


@dataclass(frozen=True)
class MeasureJob:
    """Check the artifact's outputs against the reference on seeded random inputs, then time
    it: at least `warmup` calls and warm-up rounds until the kernel's time settles, then
    `repeats` samples (the LLC flushed before each call when `flush_bytes`; tune/measure.py).
    `check=False` skips the reference check (a re-timing of a checked artifact)."""
    trial: int
    graph: str
    artifact: bytes
    manifest: dict
    target: Any = None
    seed: int = 0
    warmup: int = 2
    repeats: int = 9
    flush_bytes: int = 0
    check: bool = True
    timeout_s: float = 60.0


@dataclass
class MeasureResult:
    trial: int
    status: str  # "ok" | "mismatch" | "error" | "crash" (measurer died) | "timeout"
    times: list[float] = field(default_factory=list)  # seconds per timed call
    error: str | None = None
    started: float = 0.0
    finished: float = 0.0
    machine: str = ""
    warmup_calls: int = 0  # untimed calls before the first sample (until two warm-up medians agreed)
    inner: int = 1  # calls per sample: each of `times` is the mean of this many calls
    retaken: int = 0  # samples taken again because the measurer was preempted during them

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def median_s(self) -> float | None:
        return median(self.times) if self.times else None

    @property
    def noise_s(self) -> float | None:
        """The median absolute deviation of `times`: a gain smaller than the two candidates'
        noise together is a tie (measure.faster)."""
        return mad(self.times) if self.times else None


def median(xs: Sequence[float]) -> float:
    ts = sorted(xs)
    n = len(ts)
    if not n:
        raise ValueError("median of no samples")
    return ts[n // 2] if n % 2 else 0.5 * (ts[n // 2 - 1] + ts[n // 2])


def mad(xs: Sequence[float]) -> float:
    """Median absolute deviation: the spread of the samples, blind to a few outliers."""
    m = median(xs)
    return median([abs(x - m) for x in xs])


class Executor(Protocol):
    """What a tuner needs from where its work runs (LocalExecutor; the Ray executor).

    `build` returns one result per job, in job order; jobs may run in parallel. `measure` runs
    the jobs of one call on ONE machine, one at a time, in the given order (the tuner's
    interleaved re-timing relies on it), and never while a build runs there."""

    def build(self, jobs: Sequence[BuildJob]) -> list[BuildResult]: ...

    def measure(self, jobs: Sequence[MeasureJob]) -> list[MeasureResult]: ...

    def close(self) -> None: ...


def failed(job: BuildJob | MeasureJob, status: str, error: str, started: float = 0.0):
    """The result of a job that produced none (its process died, ran out of time, or refused)."""
    cls = BuildResult if isinstance(job, BuildJob) else ProbeResult if isinstance(job, ProbeJob) else MeasureResult
    return cls(trial=job.trial, status=status, error=error, started=started, finished=time.time(),
               machine=socket.gethostname())


# --- the work itself (runs in a worker process) ---

def run_build(job: BuildJob | ProbeJob) -> BuildResult | ProbeResult:
    """Compile one job and pack the program; a compiler error is an "error" result. A ProbeJob
    is scheduled only (run_probe)."""
    if isinstance(job, ProbeJob):
        return run_probe(job)
    started = time.time()
    try:
        from ..frontends.composite import load_composite
        from ..pipeline import compile_graph
        g = load_composite(job.graph)
        prog = compile_graph(g, resolve(job.target), schedule=job.schedule, config=config_from_json(job.config))
        problem = job.legal and illegal_because(prog)
        if problem:
            return BuildResult(job.trial, "illegal", error=problem, started=started, finished=time.time(),
                               machine=socket.gethostname())
        blob, manifest = pack_program(prog, job)
    except Exception as e:  # noqa: BLE001 - any failure of one candidate is that trial's result
        return BuildResult(job.trial, "error", error=f"{type(e).__name__}: {e}", started=started,
                           finished=time.time(), machine=socket.gethostname())
    return BuildResult(job.trial, "ok", blob, manifest, started=started, finished=time.time(),
                       machine=socket.gethostname())


# the last graph a worker probed: its lowering and probes are reused by the next ProbeJob
_PROBER: dict = {}


def run_probe(job: ProbeJob) -> ProbeResult:
    started = time.time()
    try:
        from .space import prober_for
        probe = prober_for(_PROBER, job.graph, job.target)(config_from_json(job.config))
    except Exception as e:  # noqa: BLE001 - the parent probes it itself
        return ProbeResult(job.trial, "error", error=f"{type(e).__name__}: {e}", started=started,
                           finished=time.time(), machine=socket.gethostname())
    return ProbeResult(job.trial, "ok", probe, started=started, finished=time.time(), machine=socket.gethostname())


def illegal_because(prog) -> str | None:
    """Why a kernel of `prog` is not scheduled as its config asked (tune/space.problem_of);
    None when every kernel is."""
    from .space import problem_of
    for k in prog.kernels:
        problem = problem_of(k.schedule_path, getattr(k, "_report", None))
        if problem:
            return problem
    return None


# --- seams to the other parts of issue 49 (target, config JSON, artifacts) ---

def resolve(target):
    """What a job's target field names, for compile_graph (which resolves it once): a Target
    where the field is a Target's JSON, else the spec as the user gave it."""
    if isinstance(target, dict) and "vector_bytes" in target:
        from ..target import Target
        return Target.from_json(target)
    return target


def target_json(target) -> Any:
    """A picklable, JSON-able form of a target for jobs (Target.to_json(), or the spec itself)."""
    to_json = getattr(target, "to_json", None)
    return to_json() if to_json else target


def config_to_json(cfg) -> dict:
    to_json = getattr(cfg, "to_json", None)
    if to_json is not None:
        return to_json()
    return dataclasses.asdict(cfg)


def config_from_json(d: dict):
    from ..schedule.config import ScheduleConfig
    return ScheduleConfig.from_json(d)


def pack_program(prog, job: BuildJob) -> tuple[bytes, dict]:
    """A compiled Program as (bytes, manifest): `akgpy.runtime.artifact.pack`."""
    from ..runtime.artifact import pack
    return pack(prog)


def unpack_program(graph, blob: bytes, manifest: dict):
    from ..runtime.artifact import unpack
    return unpack(graph, blob, manifest)


# --- worker processes ---

def _serve(conn, fn_path: str, env: dict, warm: str) -> None:
    """A worker's main loop: set the environment, import once, then answer jobs until EOF."""
    os.environ.update(env)
    for name in filter(None, warm.split(",")):
        importlib.import_module(name)
    module, _, name = fn_path.partition(":")
    fn = getattr(importlib.import_module(module), name)
    conn.send("ready")
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        try:
            result = fn(job)
        except BaseException:  # noqa: BLE001 - the parent gets a result, never a dead pipe
            result = failed(job, "error", traceback.format_exc(limit=5))
        conn.send(result)


class Worker:
    """One spawned process that runs `fn_path` ("module:function") on each job sent to it.
    Spawned, not forked: a fork of a process whose TVM thread pool runs can deadlock."""

    def __init__(self, fn_path: str, env: dict | None = None, warm: str = "akgpy.pipeline,tvm"):
        self.fn_path, self.env, self.warm = fn_path, dict(env or {}), warm
        self.proc = None
        self.conn = None
        self.ready = False  # its imports are done ("ready" received)
        self.job = None  # the job it runs now
        self.sent = 0.0
        self.deadline = 0.0

    def spawn(self) -> None:
        """Start the process without waiting for its imports (start() waits)."""
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, self.fn_path, self.env, self.warm), daemon=True,
                                name="akgpy-tune-worker")
        self.proc.start()
        child.close()
        self.ready = False

    def start(self) -> None:
        if not self.alive:
            self.stop()
            self.spawn()
        if self.ready:
            return
        ready = wait_any([self.conn, self.proc.sentinel], STARTUP_TIMEOUT_S)
        if self.conn in ready:
            try:
                if self.conn.recv() == "ready":
                    self.ready = True
                    return
            except EOFError:
                pass
        self.stop()
        raise AkgpyError(f"tuning worker for {self.fn_path} did not start (exit code "
                         f"{self.proc.exitcode if self.proc else None})")

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.is_alive()

    def submit(self, job) -> None:
        if not self.alive or not self.ready:
            self.start()
        self.job, self.sent = job, time.time()
        self.deadline = time.monotonic() + job.timeout_s
        self.conn.send(job)

    def collect(self):
        """The running job's result if it has one now (or its process died); None while it runs.
        Past its deadline the process is killed: a "timeout" result."""
        job = self.job
        if self.conn.poll():
            try:
                result = self.conn.recv()
            except (EOFError, OSError):
                result = None
            if result is not None:
                self.job = None
                return result
        if not self.proc.is_alive():
            code = self.proc.exitcode
            self.stop()
            self.job = None
            how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
            return failed(job, "crash", f"worker process died ({how})", self.sent)
        if time.monotonic() > self.deadline:
            self.stop()
            self.job = None
            return failed(job, "timeout", f"no result within {job.timeout_s:g} s", self.sent)
        return None

    def waitables(self) -> list:
        return [self.conn, self.proc.sentinel]

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.is_alive():
                self.proc.kill()
            self.proc.join(5)
        if self.conn is not None:
            self.conn.close()
        self.proc = self.conn = None
        self.ready = False


def run_jobs(workers: list[Worker], jobs: Sequence, on_result: Callable | None = None) -> list:
    """Each job on the next idle worker; results in job order. A worker whose job crashed or
    timed out is restarted on its next job."""
    results: list = [None] * len(jobs)
    todo = list(enumerate(jobs))
    busy: dict[int, int] = {}  # worker index -> job index
    while todo or busy:
        for w, worker in enumerate(workers):
            if w not in busy and todo:
                i, job = todo.pop(0)
                try:
                    worker.submit(job)
                except AkgpyError as e:
                    results[i] = failed(job, "crash", str(e), time.time())
                    continue
                busy[w] = i
        if not busy:
            continue
        soonest = min(workers[w].deadline for w in busy) - time.monotonic()
        wait_any([x for w in busy for x in workers[w].waitables()], max(0.0, soonest) + 0.01)
        for w in list(busy):
            result = workers[w].collect()
            if result is not None:
                results[busy.pop(w)] = result
                if on_result is not None:
                    on_result(result)
    return results


class LocalExecutor:
    """Builds on `workers` spawned processes (default: the CPU count), measurements in one
    measurer process, on this machine. One lock keeps builds and measurements apart."""

    BUILD_FN, MEASURE_FN = "akgpy.tune.executor:run_build", "akgpy.tune.measure:run_measure"

    def __init__(self, workers: int | None = None, *, measure_threads: int | None = None,
                 build_fn: str = BUILD_FN, measure_fn: str = MEASURE_FN):
        """`build_fn`/`measure_fn` ("module:function", importable in a spawned process): what a
        worker runs per job (tests inject crashing or hanging candidates there)."""
        self.n_workers = max(1, workers or os.cpu_count() or 1)
        # builds never run kernels: one thread each, so idle pools do not spin on the cores
        build_env = {"TVM_NUM_THREADS": "1", "AKGPY_CACHE": "off"}
        measure_env = {"AKGPY_CACHE": "off"}
        if measure_threads:
            measure_env["TVM_NUM_THREADS"] = str(measure_threads)
        self._builders = [Worker(build_fn, build_env) for _ in range(self.n_workers)]
        self._measurer = Worker(measure_fn, measure_env)
        self._lock = threading.Lock()

    def build(self, jobs: Sequence[BuildJob]) -> list[BuildResult]:
        with self._lock:
            return run_jobs(self._builders, jobs)

    def measure(self, jobs: Sequence[MeasureJob]) -> list[MeasureResult]:
        with self._lock:
            return run_jobs([self._measurer], jobs)

    def warm_up(self) -> None:
        """Spawn the build workers now, their imports overlapping the caller's work (the
        tuner's first schedule of the graph); their first job waits for them."""
        for w in self._builders:
            if not w.alive:
                w.stop()
                w.spawn()

    def probe(self, jobs: Sequence[ProbeJob]) -> list[ProbeResult]:
        """space()'s probes on the build workers, in parallel."""
        with self._lock:
            return run_jobs(self._builders, jobs)

    def close(self) -> None:
        for w in [*self._builders, self._measurer]:
            w.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
