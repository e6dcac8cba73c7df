"""Searchers: which point of a space to try next, given the times seen so far.

A searcher sees a space as its dimensions (each a name and a list of values, the default
first) and speaks in points ({name: value}). `ask()` returns a point not asked before (None
once the space is exhausted); `tell(point, seconds)` reports its time, None for a failed or
illegal point. Every searcher is deterministic for its seed: the same tells give the same asks.

- "random": uniform over the points not yet tried.
- "tpe": optuna's Tree-structured Parzen Estimator over the value indices (numeric
  dimensions ordered, the rest categorical), on log time; failed points told as twice the
  slowest time seen, so it learns to avoid them. optuna is the `tune` extra, imported here only.
"""
from __future__ import annotations

import math
import random
from typing import Any, Sequence

from ..errors import AkgpyError

SEARCHERS = ("random", "tpe")
# asks of a model-based searcher that may repeat a tried point before it falls back to random
REPEATS_BEFORE_RANDOM = 16


def _key(point: dict) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in point.items()))


class Searcher:
    def __init__(self, dimensions: Sequence, seed: int = 0):
        self.dimensions = [(d.name, list(d.values)) for d in dimensions]
        self.size = math.prod(len(v) for _, v in self.dimensions)
        self.rng = random.Random(seed)
        self.seen: dict[tuple, float | None] = {}

    def ask(self) -> dict | None:
        raise NotImplementedError

    def tell(self, point: dict, seconds: float | None) -> None:
        self.seen[_key(point)] = seconds

    def exhausted(self) -> bool:
        return len(self.seen) + self._pending() >= self.size

    def _pending(self) -> int:
        return 0

    def random_unseen(self) -> dict | None:
        """A uniformly random point not asked before (by rejection while the space is large,
        by enumeration of the rest once most of it has been tried)."""
        if self.exhausted():
            return None
        asked = self._asked()
        for _ in range(64):
            point = {name: self.rng.choice(values) for name, values in self.dimensions}
            if _key(point) not in asked:
                return point
        import itertools
        rest = [dict(zip([n for n, _ in self.dimensions], combo))
                for combo in itertools.product(*[v for _, v in self.dimensions])]
        rest = [p for p in rest if _key(p) not in asked]
        return self.rng.choice(rest) if rest else None

    def _asked(self) -> set:
        return set(self.seen)


class RandomSearch(Searcher):
    def __init__(self, dimensions, seed=0):
        super().__init__(dimensions, seed)
        self.pending: set = set()

    def ask(self):
        point = self.random_unseen()
        if point is not None:
            self.pending.add(_key(point))
        return point

    def tell(self, point, seconds):
        self.pending.discard(_key(point))
        super().tell(point, seconds)

    def _pending(self):
        return len(self.pending)

    def _asked(self):
        return set(self.seen) | self.pending


class TPESearch(Searcher):
    def __init__(self, dimensions, seed=0, *, startup: int = 8):
        super().__init__(dimensions, seed)
        try:
            import optuna
        except ImportError:
            raise AkgpyError("search='tpe' needs optuna: pip install 'akgpy[tune]' (or search='random')") from None
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self._optuna = optuna
        self._dists, self._order = {}, {}
        for name, values in self.dimensions:
            if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values) and len(values) > 2:
                order = sorted(range(len(values)), key=lambda i: values[i])
                self._dists[name] = optuna.distributions.IntDistribution(0, len(values) - 1)
            else:
                order = list(range(len(values)))
                self._dists[name] = optuna.distributions.CategoricalDistribution(list(range(len(values))))
            self._order[name] = order
        sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup, multivariate=True,
                                             constant_liar=True)
        self.study = optuna.create_study(direction="minimize", sampler=sampler)
        self.trials: dict[tuple, Any] = {}  # point key -> optuna trial (asked, not yet told)
        self.worst = None

    def _point(self, params: dict) -> dict:
        return {name: values[self._order[name][params[name]]] for name, values in self.dimensions}

    def _params(self, point: dict) -> dict:
        return {name: self._order[name].index(values.index(point[name])) for name, values in self.dimensions}

    def ask(self):
        if self.exhausted():
            return None
        for _ in range(REPEATS_BEFORE_RANDOM):
            trial = self.study.ask(self._dists)
            point = self._point(trial.params)
            key = _key(point)
            if key not in self.seen and key not in self.trials:
                self.trials[key] = trial
                return point
            # a repeat: tell optuna what that point gave (a running point: failed, for now)
            value = self._value(self.seen[key]) if key in self.seen else None
            if value is None:
                self.study.tell(trial, state=self._optuna.trial.TrialState.FAIL)
            else:
                self.study.tell(trial, value)
        point = self.random_unseen()
        if point is not None:
            self.study.enqueue_trial(self._params(point))
            trial = self.study.ask(self._dists)
            self.trials[_key(self._point(trial.params))] = trial
        return point

    def _value(self, seconds):
        if seconds is None:
            return self.worst + math.log(2.0) if self.worst is not None else None
        return math.log(seconds)

    def tell(self, point, seconds):
        key = _key(point)
        trial = self.trials.pop(key, None)
        super().tell(point, seconds)
        if seconds is not None:
            self.worst = max(self.worst, math.log(seconds)) if self.worst is not None else math.log(seconds)
        if trial is None:  # a point the tuner chose itself (the default): add it as a finished trial
            value = self._value(seconds)
            if value is not None:
                self.study.add_trial(self._optuna.trial.create_trial(
                    params=self._params(point), distributions=self._dists, value=value))
            return
        value = self._value(seconds)
        if value is None:
            self.study.tell(trial, state=self._optuna.trial.TrialState.FAIL)
        else:
            self.study.tell(trial, value)

    def _pending(self):
        return len(self.trials)

    def _asked(self):
        return set(self.seen) | set(self.trials)


def make_searcher(name: str, dimensions: Sequence, seed: int = 0) -> Searcher:
    if name == "random":
        return RandomSearch(dimensions, seed)
    if name == "tpe":
        return TPESearch(dimensions, seed)
    raise AkgpyError(f"unknown search {name!r}; available: {', '.join(SEARCHERS)}")
