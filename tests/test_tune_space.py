"""akgpy.tune.space: the listed dimensions are exactly those that change a graph's scheduled TIR,
every point sampled from a space compiles to a correct kernel, and illegal points are refused
before anything is built."""
from __future__ import annotations

import hashlib
import random

import pytest

import akgpy
from akgpy import GraphBuilder
from akgpy.errors import CompileError
from akgpy.schedule.config import Choices, Range, ScheduleConfig, Sequence
from akgpy.testing import check_program
from akgpy.tune.space import NOT_SEARCHED, Space, space


def _layernorm():
    b = GraphBuilder("ln_space")
    x = b.input("x", (64, 96))
    gamma, beta = b.input("gamma", (96,)), b.input("beta", (96,))
    mean = x.sum(axis=-1, keepdims=True) * (1.0 / 96)
    xc = x - mean
    var = (xc * xc).sum(axis=-1, keepdims=True) * (1.0 / 96)
    b.output(xc * b.rsqrt(var + 1e-5) * gamma + beta)
    return b.build()


def _transpose():
    b = GraphBuilder("transpose_space")
    x, y = b.input("x", (64, 96)), b.input("y", (96, 64))
    b.output(b.transpose(x, (1, 0)) + y)
    return b.build()


def _column_sum():
    b = GraphBuilder("colsum_space")
    x = b.input("x", (256, 64))
    b.output(b.reduce_sum(x, axis=(0,)))
    return b.build()


def _matmul_relu():
    b = GraphBuilder("matmul_space")
    c = b.matmul(b.input("a", (64, 96)), b.input("w", (96, 128)))
    b.output(b.relu(c + b.input("bias", (128,))))
    return b.build()


def _elementwise():
    b = GraphBuilder("elemwise_space")
    x, y = b.input("x", (32, 48, 16)), b.input("y", (32, 48, 16))
    b.output(x * y + x)
    return b.build()


GRAPHS = {"layernorm": _layernorm, "transpose": _transpose, "column_sum": _column_sum,
          "matmul_epilogue": _matmul_relu, "elementwise": _elementwise}


@pytest.fixture(scope="module")
def spaces():
    cache: dict[str, Space] = {}

    def get(name) -> Space:
        if name not in cache:
            cache[name] = space(GRAPHS[name]())
        return cache[name]
    return get


def _values(dom, default) -> list:
    """The test's own sample of a field's domain: every choice, a range's ends and a few
    points around the default, a few tile tuples."""
    if isinstance(dom, Choices):
        return list(dom.values)
    if isinstance(dom, Sequence):
        return [(), (8,), (32,), (8, 8), (16, 32), (64, 64)]
    assert isinstance(dom, Range)
    if not dom.integer:
        return [dom.lo, (dom.lo + dom.hi) / 2, dom.hi]
    d = max(int(default), 1)
    pts = {int(dom.lo), int(dom.hi), d // 8, d // 2, d - 1, d + 1, d * 2, d * 8}
    return sorted(v for v in pts if dom.contains(v))[:10]


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_listed_dimensions_change_the_tir_and_unlisted_fields_do_not(spaces, name):
    sp = spaces(name)
    g = sp.graph
    base = sp.default()
    default_hash = sp.tir_hash(base)
    # the space's prober schedules as the compiler does: the default's TIR is the kernel's
    prog = akgpy.fuse(g, config=base)
    assert hashlib.sha256(prog.kernels[0].tir.encode()).hexdigest() == default_hash
    assert sp.dimensions, f"{name}: no dimension listed"
    for d in sp.dimensions:
        assert d.values[0] == (getattr(base, d.name) if "/" not in d.name else None), d
        assert len(d.values) >= 2 and len(set(map(repr, d.values))) == len(d.values), d
        for v in d.values[1:]:
            assert sp.tir_hash(sp.config({d.name: v})) != default_hash, (name, d.name, v)
    listed = {d.name for d in sp.dimensions}
    facts = {f for f, dom in base.domains().items() if f in NOT_SEARCHED}
    checked = 0
    for field, dom in base.domains().items():
        if field in listed or field in facts:
            continue
        for v in _values(dom, getattr(base, field)):
            cfg = base.replace(**{field: v})
            ok, why = sp.legal(cfg)
            assert not ok or sp.tir_hash(cfg) == default_hash, (name, field, v)
            checked += 1
    assert checked


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_points_sampled_from_the_space_are_correct(spaces, name):
    sp = spaces(name)
    rng = random.Random(7)
    tried = 0
    for _ in range(20):
        if tried == 2:
            break
        point = {d.name: rng.choice(d.values) for d in sp.dimensions if rng.random() < 0.5}
        ok, why = sp.legal(point)
        if not ok:
            continue
        tried += 1
        cfg = sp.config(point)
        prog = akgpy.fuse(sp.graph, config=cfg)
        assert not check_program(sp.graph, prog), (name, point)
    assert tried == 2, f"{name}: no legal point among 20 samples"


def test_band_overrides_show_in_explain_in_the_same_terms(spaces):
    sp = spaces("transpose")
    tile = next(d for d in sp.dimensions if d.name.endswith("/tile"))
    point = {tile.name: tile.values[1]}
    assert sp.legal(point) == (True, "")
    text = akgpy.fuse(sp.graph, config=sp.config(point)).explain()
    key = tile.name.rsplit("/", 1)[0].split(":", 1)[1]
    assert f"tile {'x'.join(map(str, tile.values[1]))} (tuned)" in text, text[:3000]
    assert f"band [{key}]" in text
    assert "who decides: isl's scheduler chooses which statements fuse" in text


def test_a_parallel_mark_on_a_dependence_carrying_member_is_illegal(spaces):
    sp = spaces("column_sum")
    own = [b for b in sp.bands.values() if b.key.startswith("own:") and b.may_parallel
           and not all(b.coincident)]
    assert own, sp.bands
    band = own[0]
    carried = band.coincident.index(False)  # the reduction's loop
    ok, why = sp.legal({f"{band.key}/parallel": carried})
    assert not ok and "carries" in why, why
    # each listed parallel value is legal on its own
    for d in sp.dimensions:
        if d.name.endswith("/parallel"):
            for v in d.values[1:]:
                assert sp.legal({d.name: v}) == (True, ""), (d.name, v)


def test_a_build_worker_refuses_what_legal_refuses(spaces):
    """run_build with BuildJob.legal judges the schedule it builds by Space.legal's rule: the
    dependence-carrying parallel mark comes back "illegal" with no artifact, a listed value builds."""
    from akgpy.tune.executor import BuildJob, config_to_json, run_build
    sp = spaces("column_sum")
    band = next(b for b in sp.bands.values() if b.key.startswith("own:") and b.may_parallel
                and not all(b.coincident))
    text = sp.graph.to_composite()
    bad = {f"{band.key}/parallel": band.coincident.index(False)}
    r = run_build(BuildJob(1, text, config_to_json(sp.config(bad)), legal=True))
    assert r.status == "illegal" and r.artifact is None and "carries" in r.error, (r.status, r.error)
    assert run_build(BuildJob(1, text, config_to_json(sp.config(bad)), legal=False)).status == "ok"
    good = next(d for d in sp.dimensions if d.name.endswith("/parallel"))
    r = run_build(BuildJob(2, text, config_to_json(sp.config({good.name: good.values[1]})), legal=True))
    assert r.status == "ok" and r.manifest, (r.status, r.error)


def test_probes_on_the_build_workers_give_the_same_space(spaces):
    """space(probe_many=...) with the tuner's probes on LocalExecutor's workers lists the same
    dimensions and reshapes as probing here, and every probe came back from a worker."""
    from akgpy.tune.executor import LocalExecutor
    from akgpy.tune.tuner import _probe_many
    g = GRAPHS["layernorm"]()
    answers = []
    with LocalExecutor(2) as ex:
        pm = _probe_many(ex, g.to_composite(), None)
        sp = space(g, probe_many=lambda cfgs: answers.extend(pm(cfgs)) or answers[-len(cfgs):])
    want = spaces("layernorm")
    assert len(answers) > 10 and all(a is not None for a in answers)
    assert sp.dimensions == want.dimensions
    assert sp.reshapes.keys() == want.reshapes.keys()


def test_a_band_choice_another_value_reshapes_is_refused_before_scheduling(spaces):
    """A band's order (or parallel member) combined with a value that changes that band's loops
    is refused by precheck, and scheduling the pair confirms it is illegal."""
    pairs = []
    for name in sorted(GRAPHS):
        sp = spaces(name)
        listed = {d.name: d.values for d in sp.dimensions}
        for (dim, value), hit in sp.reshapes.items():
            for key in hit:
                for attr in ("order", "parallel"):
                    other = f"{key}/{attr}"
                    for v in listed.get(other, ())[1:]:
                        if other != dim and (attr == "order" or v >= 0):
                            pairs.append((sp, {dim: value, other: v}))
    refused = [(sp, p) for sp, p in pairs if not sp.precheck(p)[0]]
    assert refused, "no test graph has a band choice that another value reshapes"
    for sp, p in refused[:4]:
        ok, why = sp.legal(p)
        assert not ok and "changes the" in why, (p, why)
        cfg = sp.config(p)
        assert sp._probe(cfg).problem, (p, "precheck refused a pair that schedules as asked")


def test_contraction_register_tile_and_packing_are_dimensions(spaces):
    sp = spaces("matmul_epilogue")
    names = {d.name.rsplit("/", 1)[1] for d in sp.dimensions if d.name.startswith("contract:")}
    assert "register_tile" in names, [d.name for d in sp.dimensions]
    key = next(k for k in sp.contractions)
    rows, cols, lanes, regs = sp.contractions[key]
    ok, why = sp.legal({f"{key}/register_tile": (16, 2)})  # divides, 35 registers
    assert not ok and "registers" in why, why
    ok, why = sp.legal({f"{key}/register_tile": (5, 1)})
    assert not ok and "divide" in why, why


def test_bad_points_name_what_is_wrong(spaces):
    sp = spaces("elementwise")
    with pytest.raises(CompileError, match="no_such"):
        sp.config({"no_such": 1})
    with pytest.raises(CompileError, match="inexact_math"):
        sp.config({"inexact_math": True})  # changes results: not a schedule choice
    with pytest.raises(CompileError, match="parallel"):
        sp.config({"own:S_x/parallel": -5})
    band = next(d.name.rsplit("/", 1)[0] for d in sp.dimensions if d.name.endswith("/order"))
    ok, why = sp.legal({f"{band}/order": (0, 0, 0)})  # no permutation of the band's members
    assert not ok and "ignored" in why, why
    assert isinstance(sp.default(), ScheduleConfig)
