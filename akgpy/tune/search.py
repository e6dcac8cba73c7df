"""Searchers: which point of a space to try next, given the times seen so far.

A searcher sees a space as its dimensions (each a name and a list of values, the default
first) and speaks in points ({name: value}). Like AutoTVM, it chooses from a candidate pool:
`candidate_pool` draws distinct points of the space (seeded; the whole space when it is
smaller), the default left out since the tuner runs it as trial 0. `ask()` returns a pool point
not asked before (None once the pool is exhausted); `tell(point, seconds)` reports its time,
None for a failed or illegal point. Every searcher is deterministic for its seed: the same
tells give the same asks. A pool also makes searchers comparable exactly: measure the pool
once, then `replay` each searcher on the recorded times (bench/bench_tune.py).

- "model" (the default): a gradient-boosted tree regressor (lightgbm) on the encoded point,
  trained on the log times measured so far, picks the untried point it predicts fastest; the
  first `startup` points and a seeded fraction `explore` of the rest are random.
- "tpe": optuna's Tree-structured Parzen Estimator over the value indices, its suggestion
  snapped to the nearest untried pool point.
- "random": the pool in a seeded random order.

Failed points are told to the model-based searchers as twice the slowest time seen, so they
learn to avoid them. lightgbm and optuna are the `tune` extra, imported only by their searcher.
"""
from __future__ import annotations

import itertools
import math
import random
from abc import ABC, abstractmethod
from typing import Any, Callable, Sequence

from ..errors import AkgpyError

SEARCHERS = ("model", "tpe", "random")
DEFAULT_SEARCH = "model"
POOL_SIZE = 256  # candidates per tuning run, at least 4x the trials (tuner.py)


def _key(point: dict) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in point.items()))


def _dims(dimensions) -> list[tuple[str, list]]:
    return [(d.name, list(d.values)) if hasattr(d, "name") else (d[0], list(d[1])) for d in dimensions]


def candidate_pool(dimensions: Sequence, size: int = POOL_SIZE, seed: int = 0) -> list[dict]:
    """`size` distinct points drawn uniformly from the space (seeded), not the default (each
    dimension's first value); every non-default point, in a seeded order, when there are fewer."""
    dims = _dims(dimensions)
    names = [n for n, _ in dims]
    total = math.prod(len(v) for _, v in dims)
    rng = random.Random(f"pool/{seed}")
    if total <= 4 * size:  # small space: enumerate it, then take a random subset
        pts = [dict(zip(names, c)) for c in itertools.product(*[v for _, v in dims])][1:]
        rng.shuffle(pts)
        return pts[:size]
    default = _key({n: v[0] for n, v in dims})
    seen, pts = {default}, []
    while len(pts) < size:
        p = {n: rng.choice(v) for n, v in dims}
        k = _key(p)
        if k not in seen:
            seen.add(k)
            pts.append(p)
    return pts


class Searcher(ABC):
    """Base: a pool, what was asked and what was told (see the module doc)."""

    def __init__(self, dimensions: Sequence, seed: int = 0, pool: list[dict] | None = None,
                 pool_size: int = POOL_SIZE):
        self.dimensions = _dims(dimensions)
        self.seed = seed
        self.rng = random.Random(seed)
        self.pool = list(pool) if pool is not None else candidate_pool(dimensions, pool_size, seed)
        self.seen: dict[tuple, float | None] = {}  # told: key -> seconds
        self.told: dict[tuple, dict] = {}  # told: key -> point
        self.pending: set = set()  # asked, not yet told
        self.order = list(range(len(self.pool)))
        self.rng.shuffle(self.order)  # the random order every searcher draws its random points in

    def ask(self) -> dict | None:
        i = self._choose([i for i in self.order if _key(self.pool[i]) not in self.seen
                          and _key(self.pool[i]) not in self.pending])
        if i is None:
            return None
        point = self.pool[i]
        self.pending.add(_key(point))
        return point

    @abstractmethod
    def _choose(self, untried: list[int]) -> int | None:
        """The index of the pool point to ask next among `untried` (None: none left)."""

    def tell(self, point: dict, seconds: float | None) -> None:
        key = _key(point)
        self.pending.discard(key)
        self.seen[key] = seconds
        self.told[key] = dict(point)

    def exhausted(self) -> bool:
        return all(_key(p) in self.seen or _key(p) in self.pending for p in self.pool)

    def _values(self) -> list[tuple[dict, float]]:
        """(point, log time) of every told point, in the order told; a failed one as the
        slowest seen + log 2 (none while nothing has succeeded)."""
        ok = [math.log(s) for s in self.seen.values() if s is not None and s > 0]
        worst = max(ok) + math.log(2.0) if ok else None
        out = []
        for k, s in self.seen.items():
            v = math.log(s) if s is not None and s > 0 else worst
            if v is not None:
                out.append((self.told[k], v))
        return out


class RandomSearch(Searcher):
    def _choose(self, untried):
        return untried[0] if untried else None


class _Encoder:
    """A point as numbers: an ordered numeric dimension (more than two numbers) as its value's
    rank, any other as one 0/1 column per value past the first."""

    def __init__(self, dimensions):
        self.cols: list[tuple[str, Callable[[Any], float]]] = []
        for name, values in dimensions:
            if len(values) > 2 and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
                rank = {repr(v): r for r, v in enumerate(sorted(values))}
                self.cols.append((name, lambda v, rank=rank: float(rank[repr(v)])))
            else:
                for v in values[1:]:
                    self.cols.append((name, lambda x, r=repr(v): float(repr(x) == r)))

    def __call__(self, point: dict) -> list[float]:
        return [f(point[name]) for name, f in self.cols]


class ModelSearch(Searcher):
    """AutoTVM-style: a boosted-tree regressor on what was measured ranks the untried pool."""

    def __init__(self, dimensions, seed=0, pool=None, pool_size=POOL_SIZE, *, startup: int = 8,
                 explore: float = 0.1):
        super().__init__(dimensions, seed, pool, pool_size)
        try:
            import lightgbm  # noqa: F401
        except ImportError:
            raise AkgpyError("search='model' needs lightgbm: pip install 'akgpy[tune]' "
                             "(or search='random')") from None
        self.startup, self.explore = startup, explore
        self.encode = _Encoder(self.dimensions)
        self._x = [self.encode(p) for p in self.pool]
        self._fitted_on = -1
        self._pred: list[float] | None = None

    def _choose(self, untried):
        if not untried:
            return None
        data = self._values()
        if len(data) < self.startup or self.rng.random() < self.explore or not self.encode.cols:
            return untried[0]  # the next point of the random order
        if self._fitted_on != len(self.seen):
            self._pred = self._fit_predict(data)
            self._fitted_on = len(self.seen)
        return min(untried, key=lambda i: (self._pred[i], i))

    def _fit_predict(self, data) -> list[float]:
        import numpy as np
        import lightgbm
        x = np.array([self.encode(p) for p, _ in data], dtype=np.float64)
        y = np.array([v for _, v in data], dtype=np.float64)
        if float(y.max() - y.min()) == 0.0:
            return [0.0] * len(self.pool)
        params = {"objective": "regression", "learning_rate": 0.2, "num_leaves": 7, "min_data_in_leaf": 2,
                  "min_data_in_bin": 1, "lambda_l2": 1.0, "seed": self.seed, "deterministic": True,
                  "force_row_wise": True, "num_threads": 1, "verbose": -1}
        model = lightgbm.train(params, lightgbm.Dataset(x, y, params={"verbose": -1}), num_boost_round=64)
        return [float(v) for v in model.predict(np.array(self._x, dtype=np.float64))]


class TPESearch(Searcher):
    """optuna's TPE; each suggestion becomes the nearest untried pool point (index distance,
    ordered dimensions scaled to [0, 1], others 0/1), which is what is told back."""

    def __init__(self, dimensions, seed=0, pool=None, pool_size=POOL_SIZE, *, startup: int = 8):
        super().__init__(dimensions, seed, pool, pool_size)
        try:
            import optuna
        except ImportError:
            raise AkgpyError("search='tpe' needs optuna: pip install 'akgpy[tune]' (or search='random')") from None
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._optuna = optuna
        self._dists, self._order, self._ordered = {}, {}, {}
        for name, values in self.dimensions:
            ordered = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values) and len(values) > 2
            order = sorted(range(len(values)), key=lambda i: values[i]) if ordered else list(range(len(values)))
            self._dists[name] = (optuna.distributions.IntDistribution(0, len(values) - 1) if ordered else
                                 optuna.distributions.CategoricalDistribution(list(range(len(values)))))
            self._order[name], self._ordered[name] = order, ordered
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, multivariate=True)
        self.study = optuna.create_study(direction="minimize", sampler=sampler)
        self._params_of = [self._params(p) for p in self.pool]
        self._added = 0

    def _params(self, point: dict) -> dict:
        return {name: self._order[name].index(values.index(point[name])) for name, values in self.dimensions}

    def _choose(self, untried):
        if not untried:
            return None
        self._sync()
        trial = self.study.ask(self._dists)
        want = trial.params
        # the suggestion itself is never measured: optuna learns only from the snapped points
        self.study.tell(trial, state=self._optuna.trial.TrialState.FAIL)

        def dist(i):
            got = self._params_of[i]
            d = 0.0
            for name, values in self.dimensions:
                if self._ordered[name]:
                    d += abs(got[name] - want[name]) / (len(values) - 1)
                else:
                    d += float(got[name] != want[name])
            return d
        return min(untried, key=lambda i: (dist(i), untried.index(i)))

    def _sync(self):
        """Add the tells optuna has not seen as finished trials (in the order they came)."""
        data = self._values()
        if len(data) == self._added:
            return
        # values of failed points move as the slowest time does: rebuild the study's history
        self.study = self._optuna.create_study(direction="minimize", sampler=self.study.sampler)
        for point, v in data:
            self.study.add_trial(self._optuna.trial.create_trial(
                params=self._params(point), distributions=self._dists, value=v))
        self._added = len(data)


def make_searcher(name: str, dimensions: Sequence, seed: int = 0, *, pool: list[dict] | None = None,
                  pool_size: int = POOL_SIZE) -> Searcher:
    classes = {"model": ModelSearch, "tpe": TPESearch, "random": RandomSearch}
    if name not in classes:
        raise AkgpyError(f"unknown search {name!r}; available: {', '.join(SEARCHERS)}")
    return classes[name](dimensions, seed, pool, pool_size)


def replay(name: str, dimensions: Sequence, table: dict, trials: int, seed: int = 0, *,
           pool: list[dict], default: dict | None = None, batch: int = 2) -> list[tuple[dict, float | None]]:
    """Run searcher `name` against recorded results instead of a machine, as tune() would:
    `table` maps a point's key (`point_key`) to its time in seconds, None (failed) or "illegal"
    (rejected before the build; not a trial). The default is told first (trial 0); points are
    asked `batch` at a time before their results are told. Returns the trials in order, the
    default first."""
    s = make_searcher(name, dimensions, seed, pool=pool)
    dims = _dims(dimensions)
    default = default if default is not None else {n: v[0] for n, v in dims}
    out = [(default, table.get(_key(default)))]
    s.tell(default, out[0][1])
    while len(out) < trials:
        asked = []
        while len(asked) < min(batch, trials - len(out)):
            p = s.ask()
            if p is None:
                break
            r = table.get(_key(p), None)
            if r == "illegal":
                s.tell(p, None)
                continue
            asked.append((p, r))
        if not asked:
            break
        for p, r in asked:
            s.tell(p, r)
            out.append((p, r))
    return out


point_key = _key
