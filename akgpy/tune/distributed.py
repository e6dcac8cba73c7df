"""`RayExecutor`: the tuner's builds and measurements as Ray tasks across a cluster
(`akgpy-tune --ray ADDRESS`; Ray is the optional extra `akgpy[distributed]`).

Builds are Ray tasks, one CPU each, spread over every node. Measurements go to one actor per
node (max_concurrency 1, pinned to its node), so a node times at most one kernel at a time;
the actor times in a measurer subprocess of its own (akgpy/tune/measure.py through
executor.Worker), so a crashing candidate costs a subprocess, not the actor. Artifacts travel
as bytes inside the jobs and results; the driver's tuner stores the records in its own cache.
Every node must have the same akgpy installed: the actors report theirs and a mismatch is
refused, since a record's key names the sources that built it.
"""
from __future__ import annotations

import socket
import threading
import time
from typing import Sequence

from ..errors import AkgpyError
from .cache import source_hash
from .executor import (BuildJob, BuildResult, MeasureJob, MeasureResult, Worker, failed, run_build,
                       run_jobs)

# what a build worker needs: one kernel thread (a build runs no kernel) and no cache of its own
BUILD_ENV = {"TVM_NUM_THREADS": "1", "AKGPY_CACHE": "off"}


def _ray():
    try:
        import ray
    except ImportError as e:
        raise AkgpyError("the Ray executor needs Ray: pip install 'akgpy[distributed]'") from e
    return ray


def _remote_build(job: BuildJob) -> BuildResult:
    return run_build(job)


class _NodeMeasurer:
    """One per node (a Ray actor): runs measure jobs one at a time in its measurer subprocess."""

    def __init__(self, env: dict):
        self.worker = Worker("akgpy.tune.measure:run_measure", env)

    def hello(self) -> dict:
        return {"machine": socket.gethostname(), "sources": source_hash()}

    def measure(self, jobs: list) -> list:
        return run_jobs([self.worker], jobs)

    def close(self) -> None:
        self.worker.stop()


class RayExecutor:
    """The Executor protocol (akgpy/tune/executor.py) on a Ray cluster.

    address: a running cluster ("HOST:6379", "auto", "ray://HOST:10001"); None uses the Ray
    connection this process already has, or starts a local one. `build` runs every job as a
    task (parallel over the cluster's CPUs); `measure` runs one call's jobs in order on one
    node's actor, the first idle one in a fixed order, so a tuner calling it from one thread
    times every candidate on the same node. Builds and measurements never overlap (as in
    LocalExecutor), so no build disturbs a timing; measurements on different nodes may."""

    def __init__(self, address: str | None = None, *, measure_threads: int | None = None,
                 init_kwargs: dict | None = None):
        ray = self._ray = _ray()
        self._owns_ray = False
        if not ray.is_initialized():
            try:
                ray.init(address=address, **(init_kwargs or {}))
            except Exception as e:  # noqa: BLE001 - Ray raises several types for a bad address
                raise AkgpyError(f"cannot connect to the Ray cluster at {address!r}: {e} (is it running: `ray status`? "
                                 "Ray >= 2.59 wants RAY_AUTH_MODE=token and the cluster's token here: "
                                 "docs/tuning.md)") from e
            self._owns_ray = True
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self._build = ray.remote(_remote_build).options(
            num_cpus=1, max_retries=0, runtime_env={"env_vars": dict(BUILD_ENV)})
        env = {"AKGPY_CACHE": "off"}
        if measure_threads:
            env["TVM_NUM_THREADS"] = str(measure_threads)
        actor = ray.remote(_NodeMeasurer)
        nodes = sorted(n["NodeID"] for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU"))
        if not nodes:
            raise AkgpyError("the Ray cluster has no live node with CPUs")
        self._actors = [actor.options(num_cpus=0, max_concurrency=1, max_restarts=-1, max_task_retries=0,
                                      scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False))
                        .remote(env) for node in nodes]
        hellos = ray.get([a.hello.remote() for a in self._actors])
        here = source_hash()  # what the driver's cache keys name
        other = [h["machine"] for h in hellos if h["sources"] != here]
        if other:
            raise AkgpyError(f"Ray nodes {', '.join(other)} run other akgpy sources than this driver "
                             f"({here}): install the same akgpy on every node")
        self.machines = [h["machine"] for h in hellos]
        self._idle = list(range(len(self._actors)))
        self._cond = threading.Condition()  # guards _idle, _measuring, _building
        self._measuring = 0
        self._building = False

    @property
    def nodes(self) -> int:
        return len(self._actors)

    @property
    def n_workers(self) -> int:
        """Builds that can run at once: the cluster's CPUs (the tuner sizes its rounds by it)."""
        return max(1, int(self._ray.cluster_resources().get("CPU", 1)))

    def build(self, jobs: Sequence[BuildJob]) -> list[BuildResult]:
        ray = self._ray
        with self._cond:
            while self._building or self._measuring:
                self._cond.wait()
            self._building = True
        try:
            started = time.time()
            refs = [self._build.remote(job) for job in jobs]
            deadline = {ref: time.monotonic() + job.timeout_s for ref, job in zip(refs, jobs)}
            index = {ref: i for i, ref in enumerate(refs)}
            results: list = [None] * len(jobs)
            pending = list(refs)
            while pending:
                soonest = min(deadline[r] for r in pending) - time.monotonic()
                done, pending = ray.wait(pending, num_returns=1, timeout=max(0.0, soonest) + 0.01)
                for ref in done:
                    results[index[ref]] = self._result(ref, jobs[index[ref]], started)
                now = time.monotonic()
                for ref in [r for r in pending if deadline[r] < now]:
                    ray.cancel(ref, force=True)
                    job = jobs[index[ref]]
                    results[index[ref]] = failed(job, "timeout", f"no result within {job.timeout_s:g} s", started)
                    pending.remove(ref)
            return results
        finally:
            with self._cond:
                self._building = False
                self._cond.notify_all()

    def _result(self, ref, job, started):
        ray = self._ray
        try:
            return ray.get(ref)
        except (ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError,
                ray.exceptions.ObjectLostError) as e:
            return failed(job, "crash", f"Ray worker died: {type(e).__name__}", started)
        except ray.exceptions.RayError as e:
            return failed(job, "error", f"{type(e).__name__}: {e}", started)

    def measure(self, jobs: Sequence[MeasureJob]) -> list[MeasureResult]:
        ray = self._ray
        with self._cond:
            while self._building or not self._idle:
                self._cond.wait()
            node = min(self._idle)
            self._idle.remove(node)
            self._measuring += 1
        started = time.time()
        try:
            return ray.get(self._actors[node].measure.remote(list(jobs)))
        except ray.exceptions.RayActorError as e:  # the actor restarts; these jobs are lost
            return [failed(job, "crash", f"measuring actor died: {type(e).__name__}", started) for job in jobs]
        finally:
            with self._cond:
                self._idle.append(node)
                self._measuring -= 1
                self._cond.notify_all()

    def close(self) -> None:
        ray = self._ray
        for a in getattr(self, "_actors", []):
            try:
                ray.get(a.close.remote(), timeout=10)
            except Exception:  # noqa: BLE001 - closing a dead actor
                pass
            ray.kill(a)
        self._actors = []
        if self._owns_ray:
            ray.shutdown()
            self._owns_ray = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
