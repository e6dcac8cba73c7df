"""isl's scheduler on a PolyModel, with two guards against pathological graphs.

- an isl operation budget (Context.set_max_operations): deterministic, and isl stops
  cleanly; exhausting it raises CompileError. It does NOT bound wall time: some corpus
  graphs spend 10 s in isl within 1e6 counted operations;
- run_bounded: a worker process with a hard wall-clock limit, for callers that must not
  wait beyond a deadline (native code cannot be interrupted from a thread).
Every schedule returned here has passed check_legal.
"""
from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import threading
import time
from math import prod
from typing import Any, Callable

import islpy as isl

from ..errors import CompileError
from .checks import check_legal
from .deps import Deps
from .access import extents
from .isl_util import context_options, operation_budget, schedule_from_text, sets_of
from .model import PolyModel

# The 64x128 LayerNorm/Softmax graphs of tests/test_poly_model.py need about 80k / 45k
# operations (0.4 % of this); the budget only stops runaway searches.
DEFAULT_MAX_OPERATIONS = 20_000_000


# isl's scheduler is superlinear in the statements (clustering compares bands pairwise): 400
# independent outputs of `x * k` took 34 s; with their input reuse a chain (poly/deps.py), 100
# took 0.19 s and 300 1.4 s. A model above this many statements takes the plain schedule (one
# kernel all the same); the corpus's graphs have far fewer
MAX_STATEMENTS = 128


class ModelTooLarge(CompileError):
    """A polyhedral model above MAX_STATEMENTS statements: not given to isl."""


def check_size(n_statements: int) -> None:
    if n_statements > MAX_STATEMENTS:
        raise ModelTooLarge(f"{n_statements} statements, above the {MAX_STATEMENTS} that isl's "
                            "scheduler is given (its search is superlinear in them)")


def compute_schedule(model: PolyModel, deps: Deps, *, max_operations: int = DEFAULT_MAX_OPERATIONS,
                     options: dict[str, int] | None = None, input_reuse: bool = True) -> isl.Schedule:
    """isl's schedule for the model: validity = all dependences, proximity = RAW (so
    producers move next to consumers: fusion) and, with `input_reuse`, read-after-read of
    one element by two statements (so statements sharing only inputs fuse too, and each
    input is read from memory once: AKG's input fusion), coincidence = validity (prefer
    parallel bands).

    `options` are isl Context scheduler options without the set_ prefix, e.g.
    {"schedule_max_constant_term": 1024}; they hold for this call only.
    """
    first = broadcasts(model, deps)
    domain = model.domain if first is None else model.domain.subtract(first)

    def within(um: isl.UnionMap) -> isl.UnionMap:
        return um.intersect_domain(domain).intersect_range(domain)
    sc = (isl.ScheduleConstraints.on_domain(domain)
          .set_validity(within(deps.validity))
          .set_proximity(within(deps.raw.union(deps.rar) if input_reuse else deps.raw))
          .set_coincidence(within(deps.validity)))
    with context_options(model.ctx, options or {}), \
            operation_budget(model.ctx, max_operations, "compute_schedule"):
        schedule = sc.compute_schedule()
    if first is not None:
        schedule = isl.Schedule.from_domain(first).sequence(schedule)
    check_legal(schedule, deps)
    return schedule


# a statement whose every value feeds this many instances or more of each statement reading it
# is a broadcast (`broadcasts`; schedule/kept.py keeps such blocks when they compute much)
BROADCAST_REUSE = 8
# ... of this many points at most (a row of 32 KiB float32): its values stay cached for readers
BROADCAST_MAX_POINTS = 8192


def broadcasts(model: PolyModel, deps: Deps) -> isl.UnionSet | None:
    """Elementwise statements computed from kernel inputs alone (no dependence into them), of
    BROADCAST_MAX_POINTS points at most, each of whose readers runs BROADCAST_REUSE times their
    points or more: a bias row [N] for a [M, N] matrix. They run first, each in its own loop,
    and isl schedules the rest without them. Given to isl, such a statement joined its readers'
    band, sharing the dim it has and a constant for the dims it lacks; the tree passes fuse only
    members every statement has, and bert's GELU ~8645 lost the loop its bias add and GELU chain
    shared (two passes over the matrix). Nor could isl's answer be cut apart afterwards: with
    the statement in it, isl put a yolo transpose's channel dim first, and without it the batch
    loop that keeps each image's intermediate in cache."""
    size = {s.name: prod(extents(s)) for s in model.statements}
    out = None
    for s in model.statements:
        if s.kind != "compute" or size[s.name] > BROADCAST_MAX_POINTS:
            continue
        mine = isl.UnionSet.from_set(s.domain)
        if not deps.validity.intersect_range(mine).is_empty():
            continue
        readers = {r.get_tuple_name() for r in sets_of(deps.raw.intersect_domain(mine).range())}
        if readers and all(size[r] >= BROADCAST_REUSE * size[s.name] for r in readers):
            out = mine if out is None else out.union(mine)
    return None if out is None or out.is_equal(model.domain) else out


def schedule_text(model: PolyModel, deps: Deps, max_operations: int = DEFAULT_MAX_OPERATIONS,
                  options: dict[str, int] | None = None, input_reuse: bool = True) -> str:
    """compute_schedule as text: what a worker process can send back (isl.Schedule does not pickle)."""
    return compute_schedule(model, deps, max_operations=max_operations, options=options,
                            input_reuse=input_reuse).to_str()


def compute_schedule_bounded(model: PolyModel, deps: Deps, *, timeout_s: float,
                             max_operations: int = DEFAULT_MAX_OPERATIONS,
                             options: dict[str, int] | None = None, input_reuse: bool = True) -> isl.Schedule:
    """compute_schedule in a worker killed after `timeout_s` (TimeoutError); the result is
    read back into model.ctx and checked again here, so nothing unchecked crosses over.

    Needed because the operation budget does not bound wall time: isl's search for constant
    shifts (e.g. a 28-statement LayerNorm of 8192x768) can spend 10 s within 1e6 operations.
    """
    text = run_bounded(schedule_text, timeout_s, model, deps, max_operations, options, input_reuse)
    schedule = schedule_from_text(model.ctx, text)
    check_legal(schedule, deps)
    return schedule


_exiting: list[int] = []  # killed workers not yet collected
_exiting_lock = threading.Lock()


def _reap_later(pid: int) -> None:
    """Collect `pid` once it has exited, and every earlier worker that has, without waiting.

    A worker's exit unmaps its copy of the whole process (TVM and LLVM included); waiting for
    it cost ~7 ms a compile, which the exit now spends on another core while the caller goes
    on to code generation. Each call collects the ones that have finished, so at most a few
    are ever pending."""
    with _exiting_lock:
        _exiting.append(pid)
        still = []
        for p in _exiting:
            try:
                done, _ = os.waitpid(p, os.WNOHANG)
            except ChildProcessError:  # collected elsewhere (SIGCHLD ignored, a waitpid(-1))
                continue
            if done == 0:
                still.append(p)
        _exiting[:] = still


def run_bounded(fn: Callable, timeout_s: float, *args, **kwargs) -> Any:
    """fn(*args, **kwargs) in a forked worker process, killed after `timeout_s` seconds.

    Returns fn's (picklable) result, re-raises its exception, raises TimeoutError on expiry
    and CompileError when the worker dies without answering (a crash in native code).

    A bare os.fork, not multiprocessing: it works inside daemonic processes (multiprocessing
    Pool workers, which may not have children of their own) and needs no pickling of the
    arguments (isl objects do not all pickle); the worker only runs isl, never TVM's pool.
    """
    name = getattr(fn, "__name__", repr(fn))
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # worker: answer through the pipe, then leave without running any cleanup
        os.close(rfd)
        try:
            try:
                msg = (True, fn(*args, **kwargs))
                data = pickle.dumps(msg)
            except BaseException as e:  # noqa: BLE001 - everything goes back to the parent
                try:
                    data = pickle.dumps((False, e))
                except Exception:
                    data = pickle.dumps((False, CompileError(f"{name} worker: {type(e).__name__}: {e}"[:2000])))
            with os.fdopen(wfd, "wb") as w:
                w.write(data)
        finally:
            os._exit(0)
    os.close(wfd)
    chunks, deadline = [], time.monotonic() + timeout_s
    try:
        with os.fdopen(rfd, "rb", buffering=0) as r:
            while True:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([r], [], [], left)[0]:
                    raise TimeoutError(f"{name} did not finish within {timeout_s} s")
                chunk = r.read(1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _reap_later(pid)
    if not chunks:
        raise CompileError(f"{name} worker died without an answer")
    ok, value = pickle.loads(b"".join(chunks))
    if ok:
        return value
    raise value
