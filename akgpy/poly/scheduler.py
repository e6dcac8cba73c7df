"""isl's scheduler on a PolyModel, bounded by counts so that a compile does not depend on load.

- isl's search variants (`SEARCHES`: the full search, one without constant shifts, each SCC on
  its own) run in order, each under its own operation budget (Context.set_max_operations):
  a variant that exhausts its budget hands over to the next. Operations are counted by isl
  itself, so the variant that answers depends on the model alone, never on machine load;
  a model with a dependence that mixes dims and large extents skips the full search, whose
  time isl's count does not track there (`MAX_SHIFTED_COEFFICIENT`, `MIXED_MAX_SHIFT`); docs/poly.md ("isl's bounds") has the
  measurements behind both rules;
- a wall-clock guard far above any search the corpus needs (`WALL_CLOCK_GUARD_S`): the
  search runs in a worker process (run_bounded; native code cannot be interrupted from a
  thread) killed past it. A kernel built after the guard fired is not reproducible, and
  `Searched.guard` / SchedulePath say so;
- isl's answers are kept per process (`ANSWERS`), keyed by the schedule constraints' text and
  the variants: tuning reschedules one model under many configs that do not change it.
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
from collections import OrderedDict
from dataclasses import dataclass
from math import prod
from typing import Any, Callable

import islpy as isl

from ..errors import CompileError
from .checks import check_legal
from .deps import Deps
from .access import extents
from .isl_util import BudgetExhausted, context_options, maps_of, operation_budget, schedule_from_text, sets_of
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
    first, sc = schedule_constraints(model, deps, input_reuse)
    schedule = _solve(model.ctx, sc, first, max_operations, options or {})
    check_legal(schedule, deps)
    return schedule


def schedule_constraints(model: PolyModel, deps: Deps, input_reuse: bool = True
                         ) -> tuple[isl.UnionSet | None, isl.ScheduleConstraints]:
    """(the broadcasts that run first, or None; the constraints isl schedules the rest under)."""
    first = broadcasts(model, deps)
    domain = model.domain if first is None else model.domain.subtract(first)

    def within(um: isl.UnionMap) -> isl.UnionMap:
        return um.intersect_domain(domain).intersect_range(domain)
    sc = (isl.ScheduleConstraints.on_domain(domain)
          .set_validity(within(deps.validity))
          .set_proximity(within(deps.raw.union(deps.rar) if input_reuse else deps.raw))
          .set_coincidence(within(deps.validity)))
    return first, sc


def _solve(ctx: isl.Context, sc: isl.ScheduleConstraints, first: isl.UnionSet | None,
           max_operations: int, options: dict[str, int]) -> isl.Schedule:
    """isl's schedule for `sc` under `options` and the budget, after the broadcasts `first`."""
    with context_options(ctx, options), operation_budget(ctx, max_operations, "compute_schedule"):
        schedule = sc.compute_schedule()
    if first is not None:
        schedule = isl.Schedule.from_domain(first).sequence(schedule)
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


@dataclass(frozen=True)
class Search:
    """One variant of isl's search: its scheduler options and its operation budget."""
    name: str
    options: tuple[tuple[str, int], ...]  # isl Context options without set_, as pairs
    max_operations: int
    what: str  # the variant in words, for explain()


# Operation budgets per variant, several times the most any corpus graph uses (docs/poly.md,
# "isl's bounds", has the measurements); a search that exhausts one hands over to the next
FULL_MAX_OPERATIONS = 4_000_000
NO_SHIFTS_MAX_OPERATIONS = 4_000_000
SERIALIZED_MAX_OPERATIONS = 4_000_000
# isl does not count the integer work of the full search where a dependence equality ties dims
# with a coefficient other than 0 or 1 (a Reshape that flattens, a row cut into interleaved
# partials: chunk * 8 + lane): there it ran from 0.01 s to over 20 s within 40k-150k counted
# operations, and no isl option bounded it (docs/poly.md). Such a model skips the full search
# for the one without constant shifts, unless its shifts are bounded by MIXED_MAX_SHIFT: every
# corpus search that slow had shifts up to 768 or more, and the NZ softmaxes (shifts up to 32)
# ran 1.9x slower without theirs
MAX_SHIFTED_COEFFICIENT = 1
MIXED_MAX_SHIFT = 512
# ... and where such a model keeps its full search, that search runs alone under this wall-clock
# safety net (the corpus's answer in 0.06-0.25 s; a 16x13 flatten between computed statements
# ran past 30 s): when it fires, the search goes on without shifts and the kernel is marked
# non-deterministic (never cached)
MIXED_FULL_GUARD_S = 5.0
# far above the slowest search under the budgets above: only a model whose operations do not
# track time (a bug to report) reaches it; a kernel built past it is marked non-deterministic
WALL_CLOCK_GUARD_S = 30.0


def searches(biggest: int) -> tuple[Search, ...]:
    """The variants in the order they are tried; `biggest` (the largest extent of any statement)
    bounds constant shifts: unbounded, isl searched layernorm.json for 10.5 s (0.18 s bounded)."""
    return (Search("full", (("schedule_max_constant_term", biggest),), FULL_MAX_OPERATIONS,
                   f"the full search (constant shifts up to {biggest})"),
            Search("no-shifts", (("schedule_max_constant_term", 0),), NO_SHIFTS_MAX_OPERATIONS,
                   "the search without constant shifts (schedule_max_constant_term 0)"),
            Search("serialized", (("schedule_max_constant_term", biggest), ("schedule_serialize_sccs", 1)),
                   SERIALIZED_MAX_OPERATIONS,
                   "each strongly connected component on its own (schedule_serialize_sccs; akgpy's "
                   "passes fuse from there)"))


def largest_coefficient(deps: Deps) -> int:
    """The largest coefficient (in absolute value) of an input or output dim in an equality of a
    dependence: 1 for dependences between equal or shifted points, 13 for S[i, j] -> T[13i + j]."""
    out = 1
    for m in maps_of(deps.validity):
        for bm in m.get_basic_maps():
            for c in bm.get_constraints():
                if c.is_equality():
                    out = max([out, *(abs(int(c.get_coefficient_val(t, i).to_python()))
                                      for t in (isl.dim_type.in_, isl.dim_type.out) for i in range(m.dim(t)))])
    return out


@dataclass(frozen=True)
class Searched:
    """What the search in order gave: isl's schedule, the variant that answered, the ones that
    exhausted their budgets before it, and why a variant was not tried (None: all were)."""
    schedule: isl.Schedule
    search: Search
    exhausted: tuple[Search, ...]
    skipped: str | None = None
    guard: str | None = None  # the time bound that decided (not reproducible), None when counts did

    def lines(self) -> list[str]:
        """explain()'s account of the choice, in terms of the budgets."""
        out = [f"isl search: {self.skipped}"] if self.skipped else []
        out += [f"isl search: not deterministic: {self.guard}"] if self.guard else []
        out += [f"isl search: {s.name} exhausted its budget of {s.max_operations:,} operations"
                for s in self.exhausted]
        return [*out, f"isl search: {self.search.name} answered within its budget of "
                      f"{self.search.max_operations:,} operations: {self.search.what}"]


class GuardFired(TimeoutError):
    """The wall-clock guard stopped isl: what follows depends on the machine's load."""


# isl's answers in this process: (constraints text, broadcasts text, variants) -> (index of the
# variant that answered, schedule text); tuning probes reschedule one model under many configs
ANSWERS: OrderedDict[tuple, tuple[int, str]] = OrderedDict()
ANSWERS_MAX = 64
_answers_lock = threading.Lock()


def _search_in_order(ctx: isl.Context, sc: isl.ScheduleConstraints, first: isl.UnionSet | None,
                     order: tuple[Search, ...]) -> tuple[int, str]:
    """In the worker: (index of the variant that answered, its schedule as text)."""
    for n, s in enumerate(order):
        try:
            return n, _solve(ctx, sc, first, s.max_operations, dict(s.options)).to_str()
        except BudgetExhausted:
            if n == len(order) - 1:
                raise
    raise CompileError("no isl search variant given")


def schedule_in_order(model: PolyModel, deps: Deps, *, biggest: int, input_reuse: bool = True) -> Searched:
    """isl's schedule from the first variant of `searches(biggest)` that answers within its
    operation budget; the full search is skipped where a dependence's coefficient exceeds
    MAX_SHIFTED_COEFFICIENT and shifts would go above MIXED_MAX_SHIFT. BudgetExhausted when none answers; GuardFired past
    WALL_CLOCK_GUARD_S (read at call time, so a test can lower it)."""
    order, skipped = searches(biggest), None
    coefficient = largest_coefficient(deps)
    if coefficient > MAX_SHIFTED_COEFFICIENT and biggest > MIXED_MAX_SHIFT:
        skipped = (f"{order[0].name} not tried: a dependence ties dims with coefficient {coefficient} and "
                   f"shifts go up to {biggest}, above {MIXED_MAX_SHIFT}, where isl's search for them takes "
                   "time its operation count does not show")
        order = order[1:]
    first, sc = schedule_constraints(model, deps, input_reuse)
    key = (sc.to_str(), "" if first is None else first.to_str(),
           tuple((s.name, s.options, s.max_operations) for s in order))
    with _answers_lock:
        answer = ANSWERS.get(key)
        if answer is not None:
            ANSWERS.move_to_end(key)
    fired = None
    if answer is None:
        answer, fired = _search_guarded(model, sc, first, order, mixed=coefficient > MAX_SHIFTED_COEFFICIENT)
        if fired is None:
            with _answers_lock:
                ANSWERS[key] = answer
                while len(ANSWERS) > ANSWERS_MAX:
                    ANSWERS.popitem(last=False)
    n, text = answer
    schedule = schedule_from_text(model.ctx, text)
    check_legal(schedule, deps)
    return Searched(schedule, order[n], order[:n], skipped, fired)


def _search_guarded(model: PolyModel, sc, first, order: tuple[Search, ...], *, mixed: bool):
    """((index of the variant that answered, schedule text), the safety net that fired or None).
    A mixed-dims model's full search runs alone under MIXED_FULL_GUARD_S; the rest under
    WALL_CLOCK_GUARD_S (GuardFired past it)."""
    start, fired = 0, None
    if mixed and order[0].name == "full" and len(order) > 1:
        try:
            return run_bounded(_search_in_order, MIXED_FULL_GUARD_S, model.ctx, sc, first, order[:1]), None
        except BudgetExhausted:
            start = 1
        except TimeoutError:
            start, fired = 1, (f"the full search of a mixed-dims model ran past its {MIXED_FULL_GUARD_S} s "
                               "safety net; the search without shifts answered instead")
    guard = WALL_CLOCK_GUARD_S
    try:
        n, text = run_bounded(_search_in_order, guard, model.ctx, sc, first, order[start:])
    except TimeoutError:
        raise GuardFired(f"the wall-clock guard ({guard} s) stopped isl's search before any variant "
                         "answered or exhausted its operation budget") from None
    return (n + start, text), fired


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
