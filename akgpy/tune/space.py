"""The search space of one kernel: the schedule choices that change THIS graph's code.

`space(graph, target)` schedules the graph once with the target's default config to find its
bands (poly/tree.BandFacts) and contractions, then probes each candidate dimension: a value is
kept when the scheduled TIR (the module the backend would build, before machine code) differs
from the default's and from every value kept before it, and the schedule stays legal (no
fallback, no tree replaced by isl's, no mark dropped, no override ignored). A dimension is
listed iff some value is kept. Dimensions are probed one at a time from the default, so a
combination may still be illegal: `Space.legal(point)` schedules it (no machine code) and says.
The probes also record which values change which band's loops (`Space.reshapes`), so
`Space.precheck` refuses without scheduling a band order or parallel member combined with a
value that removes the loops it names (most of softmax's pool was such pairs). The tuner runs
`precheck` itself and leaves the scheduling half to its build workers (tune/executor.py), which
can also run space()'s probes in parallel (`probe_many`).

Dimension names: a ScheduleConfig field ("fusion_depth", "min_parallel_work", ...) or
"<band key>/<BandChoice field>" ("own:S_Add_10/vector", "contract:T_matmul_NN/register_tile").
Values are plain JSON values; the default comes first (None for a band: the pass decides).
Not searched: hardware facts (metadata fact=True, they belong to the Target), `inexact_math`
(it changes results, not only speed) and `bands` itself (listed per band).
"""
from __future__ import annotations

import dataclasses
import hashlib
import inspect
import itertools
from dataclasses import dataclass
from typing import Any

from ..errors import CompileError

# fields a tuner must not flip: semantics, not schedule choices
NOT_SEARCHED = ("inexact_math", "bands")
# the most register tiles probed per contraction, and the most loop orders per band
MAX_VALUES = 6
MAX_ORDERS = 6
TILE_SIZES = (8, 16, 32, 64, 128)


@dataclass(frozen=True)
class Dimension:
    name: str
    values: tuple  # the default first


@dataclass
class _Probe:
    script_hash: str
    problem: str | None  # why the schedule is not legal as asked; None when it is
    bands: dict  # band key -> BandFacts
    report: str


class Space:
    """The dimensions of one graph's schedule space (see the module doc)."""

    def __init__(self, graph, target, base, dimensions: list[Dimension], bands: dict, contractions: dict, probe):
        self.graph, self.target, self.base = graph, target, base
        self.dimensions = dimensions
        self.bands = bands  # band key -> BandFacts of the default schedule
        self.contractions = contractions  # contraction key -> (rows, cols, lanes, registers)
        self.reshapes: dict = {}  # (dimension, value) -> {band key: choices it invalidates}: _reshapes
        self._probe = probe

    def __repr__(self):
        return f"Space({self.graph.name}, {len(self.dimensions)} dimension(s), {self.size()} point(s))"

    def size(self) -> int:
        n = 1
        for d in self.dimensions:
            n *= len(d.values)
        return n

    def default(self):
        return self.base

    def config(self, point: dict):
        """The ScheduleConfig of `point` ({dimension name: value}; names left out keep the
        default). CompileError naming the dimension for an unknown name or a value outside
        its field's domain."""
        from ..schedule.config import BandChoice
        if not isinstance(point, dict):
            raise CompileError(f"Space.config expects a dict of dimension values, got {type(point).__name__}")
        fields = self.base.domains()
        band_fields = BandChoice.domains()
        glob, per_band = {}, {}
        for name, value in point.items():
            if not isinstance(name, str):
                raise CompileError(f"Space.config: dimension names are strings, got {name!r}")
            if "/" in name:
                key, attr = name.rsplit("/", 1)
                if attr not in band_fields or attr == "key":
                    raise CompileError(f"Space.config: {name!r}: {attr!r} is no BandChoice field")
                value = band_fields[attr].from_json(value) if isinstance(value, list) else value
                per_band.setdefault(key, {})[attr] = value
            elif name in fields and name not in NOT_SEARCHED:
                glob[name] = fields[name].from_json(value) if isinstance(value, list) else value
            else:
                raise CompileError(f"Space.config: unknown dimension {name!r}")
        bands = {c.key: c for c in self.base.bands}
        for key, attrs in per_band.items():
            attrs = {k: v for k, v in attrs.items() if v is not None}
            old = bands.get(key)
            merged = {**(dataclasses.asdict(old) if old else {"key": key}), **attrs}
            bands[key] = BandChoice(**merged)
        bands = {k: c for k, c in bands.items()
                 if any(getattr(c, f) not in (None, ()) for f in band_fields if f != "key")}
        return self.base.replace(**glob, bands=tuple(bands[k] for k in sorted(bands)))

    def legal(self, point) -> tuple[bool, str]:
        """(True, "") when `point` (a dict, or a ScheduleConfig) schedules as asked: its values
        are in their domains, a contraction's register tile divides the product and fits the
        vector registers, and scheduling it (no machine code) falls back nowhere, keeps the
        tree passes' result, ignores no override and drops no parallel/vector mark (each proved
        with isl to carry no dependence); else (False, why)."""
        ok, why, cfg = self.precheck(point)
        if not ok:
            return False, why
        probe = self._probe(cfg)
        return (False, probe.problem) if probe.problem else (True, "")

    # the tuner leaves the scheduling half of `legal` to its build workers (tune/executor.py)
    build_checks_legality = True

    def precheck(self, point) -> tuple[bool, str, Any]:
        """The half of `legal` that schedules nothing: (True, "", config) when `point`'s values
        are in their domains and each contraction's register tile divides its product and fits
        the vector registers; else (False, why, None)."""
        try:
            cfg = point if not isinstance(point, dict) else self.config(point)
        except CompileError as e:
            return False, str(e), None
        if isinstance(point, dict):
            why = self._conflict(point)
            if why:
                return False, why, None
        for c in cfg.bands:
            if c.register_tile and c.key in self.contractions:
                rows, cols, lanes, regs = self.contractions[c.key]
                ti, tv = c.register_tile
                if rows % ti or cols % (tv * lanes):
                    return False, (f"{c.key}: register tile {ti} x {tv * lanes} does not divide the "
                                   f"{rows} x {cols} product"), None
                if ti * tv + tv + 1 > regs:
                    return False, (f"{c.key}: register tile {ti} x {tv} vectors needs {ti * tv + tv + 1} vector "
                                   f"registers, the target has {regs}"), None
        return True, "", cfg

    def _conflict(self, point: dict) -> str | None:
        """Why two values of `point` cannot hold together (see _reshapes); None when they can."""
        for (name, value), hit in self.reshapes.items():
            if name not in point or _hashable(point[name]) != value:
                continue
            for key, facts in hit.items():
                order, par = point.get(f"{key}/order"), point.get(f"{key}/parallel")
                if order is not None and name != f"{key}/order" and (facts is None or facts.dims != self.bands[key].dims):
                    return (f"{name}={value!r} changes the loops of band {key}: {key}/order={order!r} "
                            f"names loops that are not there")
                if par is not None and par >= 0 and name != f"{key}/parallel" and (
                        facts is None or par >= len(facts.coincident) or not facts.coincident[par]):
                    return (f"{name}={value!r} changes the members of band {key}: {key}/parallel={par!r} "
                            f"names no parallel member there")
        return None

    def tir_hash(self, cfg) -> str:
        """SHA-256 of the scheduled TIR of `cfg` (what the backend would build)."""
        return self._probe(cfg).script_hash


def space(graph, target=None, *, probe_many=None) -> Space:
    """The search space of `graph` (a Graph or composite JSON) on `target` (see the module doc).
    `probe_many(configs) -> [_Probe or None]`: where the candidate values are probed (the
    tuner's build workers, in parallel: tune/executor.py ProbeJob); None: here, one at a time.
    A value it returns None for is probed here."""
    from ..frontends.composite import load_composite
    from ..graph.ir import Graph
    from ..target import resolve_target

    g = graph if isinstance(graph, Graph) else load_composite(graph)
    tgt = resolve_target(target)
    base = _default_config(tgt)
    probe = _Prober(g, tgt)
    first = probe(base)  # here: the bands it finds choose the candidates
    contractions = _contractions(probe, base, tgt)
    space_ = Space(g, tgt, base, [], first.bands, contractions, probe)
    # (name, default, candidate values, config of a value), in the order dimensions are listed
    asks: list = []
    for name, dom in base.domains().items():
        if name not in NOT_SEARCHED and not _is_fact(name):
            asks.append((name, getattr(base, name), _candidates(dom, getattr(base, name)),
                         lambda v, name=name: base.replace(**{name: v})))
    band_values = [(f"{key}/{attr}", values) for key, facts in first.bands.items()
                   for attr, values in _band_candidates(facts).items()]
    for key, (rows, cols, lanes, regs) in contractions.items():
        tiles = [(ti, tv) for tv in range(1, 9) for ti in range(1, 17)
                 if rows % ti == 0 and cols % (tv * lanes) == 0 and ti * tv + tv + 1 <= regs]
        tiles = sorted(tiles, key=lambda t: (-t[0] * t[1], -t[0]))[:MAX_VALUES]
        band_values += [(f"{key}/register_tile", tiles), (f"{key}/pack", [True, False])]
    asks += [(name, None, values, lambda v, name=name: space_.config({name: v})) for name, values in band_values]
    if probe_many is not None:
        probe.prefill([cfg for name, default, values, make in asks for cfg in _configs(values, default, make)],
                      probe_many)
    dims: list[Dimension] = []
    probes: dict = {}
    for name, default, values, make in asks:
        d = _probed(probe, first, base, name, default, values, make, probes)
        if d is not None:
            dims.append(d)
    space_.dimensions = dims
    space_.reshapes = _reshapes(first.bands, probes)
    return space_


def _configs(values, default, make) -> list:
    out = []
    for v in values:
        if v != default:
            try:
                out.append(make(v))
            except CompileError:
                pass
    return out


def prober_for(cache: dict, graph_text: str, target) -> "_Prober":
    """The _Prober of composite JSON `graph_text` on `target` (a Target's JSON or a spec), kept
    in `cache` (one graph at a time: a build worker's) so its lowering and probes are reused."""
    from ..frontends.composite import load_composite
    from ..target import Target, resolve_target
    import json
    key = (hashlib.sha256(graph_text.encode()).hexdigest(), json.dumps(target, sort_keys=True, default=str))
    if key not in cache:
        cache.clear()
        tgt = Target.from_json(target) if isinstance(target, dict) and "vector_bytes" in target else target
        cache[key] = _Prober(load_composite(graph_text), resolve_target(tgt))
    return cache[key]


def _reshapes(bands: dict, probes: dict) -> dict:
    """{(dimension, value): {band key: its BandFacts under that value, None where the band is
    gone}} for the bands a value changes. A per-band order indexes the band's loops and a
    parallel choice its generated members: with a value that changes the loops (a global fusion
    depth, a tile) or makes the member carry a dependence (another order), such a choice names
    loops that are not there, and the pair is illegal in any combination (Space._conflict)."""
    out: dict = {}
    for (name, value), p in probes.items():
        hit = {key: p.bands.get(key) for key, b in bands.items() if p.bands.get(key) != b}
        if hit:
            out[(name, _hashable(value))] = hit
    return out


def _hashable(v):
    return tuple(_hashable(x) for x in v) if isinstance(v, (list, tuple)) else v


def _default_config(tgt):
    """The target's default config, from its backend."""
    from ..targets import backend_for
    return backend_for(tgt).default_config(tgt)


def _is_fact(name: str) -> bool:
    from ..schedule.config import ScheduleConfig
    f = next(f for f in dataclasses.fields(ScheduleConfig) if f.name == name)
    return bool(f.metadata.get("fact"))


def _probed(probe, first: _Probe, base, name: str, default, values, make, probes: dict) -> Dimension | None:
    """The dimension `name` with the values (default first) whose legal schedules differ from
    the default's and from each other; None when no value does. Each kept value's probe goes
    into `probes[(name, value)]`."""
    seen = {first.script_hash}
    kept = []
    for v in values:
        if v == default:
            continue
        try:
            cfg = make(v)
        except CompileError:
            continue
        p = probe(cfg)
        if p.problem or p.script_hash in seen:
            continue
        seen.add(p.script_hash)
        kept.append(v)
        probes[(name, v)] = p
    return Dimension(name, (default, *kept)) if kept else None


def _candidates(dom, default) -> list:
    """A few values of a field's domain around its default (at most 9)."""
    from ..schedule.config import Choices, Range, Sequence
    if isinstance(dom, Choices):
        return [v for v in dom.values if v != default]
    if isinstance(dom, Sequence):  # tile sizes: square tiles of one or two members
        return [(t,) * n for n in (1, 2) for t in (16, 32, 64)]
    if isinstance(dom, Range):
        if not dom.integer:
            vals = [dom.lo, (dom.lo + dom.hi) / 2, dom.hi]
        else:  # the ends, the neighbours, and factors of 2 to 64 around the default
            d = max(int(default), 1)
            vals = [int(dom.lo), int(dom.hi), d - 1, d + 1, d // 8, d // 2, d * 2, d * 8, d * 64]
        out = []
        for v in vals:
            if v is not None and dom.contains(v) and v != default and v not in out:
                out.append(v)
        return out
    return []


def _band_candidates(b) -> dict[str, list]:
    """{BandChoice field: values to probe} for the band of BandFacts `b`."""
    out: dict[str, list] = {}
    kind = b.key.split(":", 1)[0]
    n = len(b.dims)
    if kind == "shared" and b.isl_members:
        out["fusion_depth"] = list(range(0, b.isl_members + 1))
    if n >= 2:
        perms = [p for p in itertools.permutations(range(n)) if p != b.order]
        if len(perms) > MAX_ORDERS:  # each member innermost once, the others as they were
            perms = [tuple(q for q in b.order if q != m) + (m,) for m in b.order[:-1]]
        out["order"] = perms[:MAX_ORDERS]
    if kind == "shared" and n >= 2:
        out["tile"] = [(t, t) for t in TILE_SIZES] + [(t,) for t in TILE_SIZES[1:4]]
    if b.may_parallel:
        vector_member = b.members - 1 if b.vector else None
        out["parallel"] = [-1] + [q for q in range(b.members) if b.coincident[q] and q != vector_member
                                  and q != b.parallel]
    if b.vector:
        out["vector"] = [False]
    return out


def _contractions(probe, base, tgt) -> dict:
    """contraction key -> (rows, cols, lanes, vector registers) of each MatMul/Conv2D block."""
    from ..schedule.plain import contraction_key, root_blocks
    low, _ = probe.lowered(base.collapse_dims)
    out = {}
    lanes = max(tgt.vector_bytes // 4, 1)
    regs = getattr(tgt, "vector_registers", 32 if tgt.vector_bytes >= 64 else 16)
    for blk in root_blocks(low.func):
        if low.roles.get(blk.name_hint) != "contract":
            continue
        spatial = [int(iv.dom.extent) for iv in blk.iter_vars if int(iv.iter_type) == 0]
        if len(spatial) >= 2:
            out[contraction_key(blk.name_hint)] = (spatial[-2], spatial[-1], lanes, int(regs))
    return out


class _Prober:
    """Schedules the graph for a config without building machine code; the lowering is
    computed once per `collapse_dims` value and every result is remembered by config."""

    def __init__(self, graph, target):
        self.graph, self.target = graph, target
        self._low: dict[bool, Any] = {}
        self._seen: dict[str, _Probe] = {}

    def lowered(self, collapse: bool):
        if collapse not in self._low:
            from ..graph.collapse import collapse_dims
            from ..te.lower import lower
            kg = (collapse and collapse_dims(self.graph) or (self.graph, None))[0]
            low = lower(kg, vector_math=True)
            scalar = []

            def relower():
                if not scalar:
                    scalar.append(lower(kg, vector_math=False))
                return scalar[0]
            self._low[collapse] = (low, relower)
        return self._low[collapse]

    def __call__(self, cfg) -> _Probe:
        key = self._key(cfg)
        if key not in self._seen:
            self._seen[key] = self._run(cfg)
        return self._seen[key]

    @staticmethod
    def _key(cfg) -> str:
        import json
        return json.dumps(cfg.to_json(), sort_keys=True)

    def prefill(self, cfgs: list, probe_many) -> None:
        """Probe the configs not seen yet through `probe_many` (elsewhere, in parallel) and
        remember what it answered; a config it answers None for is probed here when asked."""
        todo = {}
        for cfg in cfgs:
            todo.setdefault(self._key(cfg), cfg)
        todo = {k: c for k, c in todo.items() if k not in self._seen}
        if not todo:
            return
        for key, p in zip(todo, probe_many(list(todo.values()))):
            if p is not None:
                self._seen[key] = p

    def _run(self, cfg) -> _Probe:
        from ..schedule.poly import schedule_path
        low, relower = self.lowered(cfg.collapse_dims)
        decided: dict = {}
        mod, report = _schedule(low, cfg, self.target, relower, decided)
        mod = _prepare(mod, low, cfg, self.target)
        problem = problem_of(schedule_path(mod["main"]), report)
        digest = hashlib.sha256(mod.script().encode()).hexdigest()
        return _Probe(digest, problem, decided, report)


def problem_of(path, report: str | None) -> str | None:
    """Why a kernel scheduled with a tuned config is not what the config asked for, from its
    SchedulePath and the poly scheduler's report; None when it is. The probes and the build
    workers (tune/executor.py run_build) judge legality by this one rule."""
    report = report or ""
    if path.fallback:
        return f"the poly schedule fell back to plain: {path.fallback}"
    if path.isl_tree_as_is:
        return f"the tree passes' result was not used: {path.isl_tree_as_is}"
    if path.dropped_marks:
        return "; ".join(l for l in report.splitlines() if l.startswith("legality:")) or \
            f"{path.dropped_marks} parallel/vector mark(s) dropped"
    ignored = [l for l in report.splitlines() if "(tuned)" not in l and " ignored" in l and "tuned" in l]
    return "; ".join(ignored) or None


def _schedule(low, cfg, target, relower, decided):
    """poly_schedule as the pipeline calls it (the one place that follows its signature)."""
    from ..schedule.poly import poly_schedule
    params = inspect.signature(poly_schedule).parameters
    if "target" not in params:
        return poly_schedule(low, cfg, relower=relower, decided=decided)
    kw = {}
    if "streams" in params:
        kw["streams"] = _streams(low, cfg, target)
    return poly_schedule(low, cfg, target, relower=relower, decided=decided, **kw)


def _streams(low, cfg, target) -> bool:
    from ..targets import backend_for
    return bool(backend_for(target).streams(low, cfg, target))


def _prepare(mod, low, cfg, target):
    """The scheduled module as the backend builds it: outputs stacked, then the target's marks
    (streaming stores, prefetch)."""
    from dataclasses import replace
    from ..te.abi import stack_outputs
    (gv, func), = mod.functions_items()
    func, params = stack_outputs(func, low.params, low.output_stacks, low.index_dtype)
    mod, passed = mod.__class__({gv: func}), replace(low, func=func, params=params)
    from ..targets import backend_for
    return backend_for(target).prepare(mod, passed, cfg, target)[0]
