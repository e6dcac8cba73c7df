"""akgpy.poly: the polyhedral model, dependences, legality and isl scheduling of lowered graphs.

Expected relations are written by hand in isl notation and compared with isl's is_equal, so
an access or dependence that is only approximately right fails.
"""
from __future__ import annotations

import os
import time

import islpy as isl
import pytest

import akgpy
from akgpy.errors import CompileError
from akgpy.poly import (IllegalSchedule, check_legal, compute_schedule, compute_schedule_bounded, dependences,
                        describe, extract, run_bounded, schedule_text)
from akgpy.poly.isl_util import affine, maps_of, schedule_from_text, union_map
from akgpy.te.lower import lower


def model_of(build):
    b = akgpy.GraphBuilder(build.__name__)
    build(b)
    low = lower(b.build())
    return extract(low.func, low.roles)


def umap(m, text):
    return isl.UnionMap(text, context=m.ctx)


def accesses(m, stmt, kind, array):
    """Statement `stmt`'s read or write relation restricted to one array (isl name)."""
    rel = getattr(m.statement(stmt), kind)
    return union_map(m.ctx, [mp for mp in maps_of(rel) if mp.get_tuple_name(isl.dim_type.out) == array])


def assert_rel(actual, m, expected: str, within=None):
    exp = umap(m, expected) if within is None else umap(m, expected).intersect_domain(within)
    assert actual.is_equal(exp), f"\nactual:   {actual}\nexpected: {exp}"


# -- graphs (one-liners: they are data) --------------------------------------------------

def ew(b): b.output(b.exp(b.input("x", (4, 6))))
def bias_add(b): b.output(b.input("x", (4, 6)) + b.input("bias", (6,)))
def row_sum(b): b.output(b.input("x", (4, 6)).sum(axis=-1))
def transpose(b): b.output(b.input("x", (4, 6)).transpose(1, 0))
def flatten(b): b.output(b.input("x", (4, 6)).reshape(24))
def regroup(b): b.output(b.input("x", (2, 3, 4)).reshape(4, 6))


def producer_consumer(b):
    y = b.exp(b.input("x", (4, 6)))
    b.output(y * y.transpose(1, 0).transpose(1, 0))


def regroup_reuse(b):
    x = b.input("x", (2, 3, 4))
    b.output(b.exp(x))
    b.output(x.reshape(4, 6) * 2.0)


def softmax(b, n=64, m=128):
    x = b.input("x", (n, m))
    e = b.exp(x - x.max(axis=-1, keepdims=True))
    b.output(e / e.sum(axis=-1, keepdims=True))


def layernorm(b, n=64, m=128):
    x, gamma, beta = b.input("x", (n, m)), b.input("gamma", (m,)), b.input("beta", (m,))
    xc = x - x.sum(axis=-1, keepdims=True) * (1.0 / m)
    var = (xc * xc).sum(axis=-1, keepdims=True) * (1.0 / m)
    b.output(xc * b.rsqrt(var + 1e-5) * gamma + beta)


# -- model -----------------------------------------------------------------------------------

def test_elementwise_domain_and_identity_access():
    m = model_of(ew)
    assert [s.name for s in m.statements] == ["S_Exp_0"]
    s = m.statement("S_Exp_0")
    assert (s.kind, s.role, s.reduction) == ("compute", "elemwise", False)
    assert s.domain.is_equal(isl.Set("{ S_Exp_0[i, j] : 0 <= i < 4 and 0 <= j < 6 }", context=m.ctx))
    assert_rel(s.reads, m, "{ S_Exp_0[i, j] -> x[i, j] : 0 <= i < 4 and 0 <= j < 6 }")
    assert_rel(s.writes, m, "{ S_Exp_0[i, j] -> Exp_0[i, j] : 0 <= i < 4 and 0 <= j < 6 }")
    assert m.arrays == {"x": "x", "Exp_0": "Exp_0"}


def test_broadcast_read():
    m = model_of(bias_add)
    assert_rel(accesses(m, "S_Add_0", "reads", "bias"), m, "{ S_Add_0[i, j] -> bias[j] : 0 <= i < 4 and 0 <= j < 6 }")
    assert_rel(accesses(m, "S_Add_0", "reads", "x"), m, "{ S_Add_0[i, j] -> x[i, j] : 0 <= i < 4 and 0 <= j < 6 }")


def test_reduction_init_and_update():
    m = model_of(row_sum)
    init, upd = m.statement("S_ReduceSum_0_init"), m.statement("S_ReduceSum_0_update")
    assert (init.kind, upd.kind, init.reduction, upd.reduction) == ("init", "update", True, True)
    assert init.role == upd.role == "reduce"
    assert init.domain.is_equal(isl.Set("{ S_ReduceSum_0_init[i] : 0 <= i < 4 }", context=m.ctx))
    assert upd.domain.is_equal(isl.Set("{ S_ReduceSum_0_update[i, k] : 0 <= i < 4 and 0 <= k < 6 }", context=m.ctx))
    assert_rel(init.reads, m, "{ }")
    assert_rel(init.writes, m, "{ S_ReduceSum_0_init[i] -> ReduceSum_0[i] : 0 <= i < 4 }")
    dom = "0 <= i < 4 and 0 <= k < 6"
    assert_rel(upd.writes, m, f"{{ S_ReduceSum_0_update[i, k] -> ReduceSum_0[i] : {dom} }}")
    assert_rel(upd.reads, m, f"{{ S_ReduceSum_0_update[i, k] -> ReduceSum_0[i] : {dom}; "
                             f"S_ReduceSum_0_update[i, k] -> x[i, k] : {dom} }}")
    # program order: init(i) right before update(i, 0), after update(i - 1, 5)
    lt = m.order.lex_lt_union_map(m.order)
    assert not lt.intersect(umap(m, "{ S_ReduceSum_0_init[i] -> S_ReduceSum_0_update[i, 0] }")).is_empty()
    assert not lt.intersect(umap(m, "{ S_ReduceSum_0_update[1, 5] -> S_ReduceSum_0_init[2] }")).is_empty()


def test_transpose_swaps_indices():
    m = model_of(transpose)
    assert_rel(m.statement("S_Transpose_0").reads, m,
               "{ S_Transpose_0[i, j] -> x[j, i] : 0 <= i < 6 and 0 <= j < 4 }")


def test_reshape_accesses_are_exact():
    m = model_of(flatten)  # [4, 6] -> [24]
    assert_rel(m.statement("S_Reshape_0").reads, m,
               "{ S_Reshape_0[i] -> x[floor(i / 6), i mod 6] : 0 <= i < 24 }")
    m = model_of(regroup)  # [2, 3, 4] -> [4, 6]: a genuinely quasi-affine relation
    assert_rel(m.statement("S_Reshape_0").reads, m,
               "{ S_Reshape_0[i, j] -> x[a, b, c] : 0 <= i < 4 and 0 <= j < 6 and 6i + j = 12a + 4b + c "
               "and 0 <= b < 3 and 0 <= c < 4 }")


def test_non_affine_index_is_refused_with_the_block_name():
    from tvm import tirx
    i, j = tirx.Var("v_i", "int32"), tirx.Var("v_j", "int32")
    env = {"v_i": "i", "v_j": "j"}
    assert affine(tirx.floordiv(i * 4 + j, 3), env, "B") == "floor((((4 * i) + j)) / 3)"
    with pytest.raises(CompileError, match="Mul_7"):
        affine(i * j, env, "Mul_7")
    with pytest.raises(CompileError, match="Mod_1"):
        affine(tirx.truncmod(i, 3), env, "Mod_1")


def test_isl_keyword_names_are_renamed():
    def g(b):
        b.output(b.exp(b.input("mod", (3,))))
    m = model_of(g)
    (name,) = [k for k, v in m.arrays.items() if v == "mod"]
    assert name != "mod"
    assert_rel(m.statement("S_Exp_0").reads, m, f"{{ S_Exp_0[i] -> {name}[i] : 0 <= i < 3 }}")


# -- dependences -----------------------------------------------------------------------------

def test_producer_consumer_raw():
    m = model_of(producer_consumer)
    d = dependences(m)
    exp_stmt = "S_Exp_0"
    consumers = {mp.get_tuple_name(isl.dim_type.out) for mp in maps_of(d.raw) if mp.get_tuple_name(isl.dim_type.in_) == exp_stmt}
    assert consumers == {"S_Transpose_1", "S_Mul_3"}
    assert_rel(d.raw.intersect_domain(m.statement(exp_stmt).domain).intersect_range(m.statement("S_Mul_3").domain),
               m, "{ S_Exp_0[i, j] -> S_Mul_3[i, j] : 0 <= i < 4 and 0 <= j < 6 }")
    assert_rel(d.raw.intersect_domain(m.statement(exp_stmt).domain)
               .intersect_range(m.statement("S_Transpose_1").domain),
               m, "{ S_Exp_0[i, j] -> S_Transpose_1[j, i] : 0 <= i < 4 and 0 <= j < 6 }")
    assert d.raw.is_subset(d.validity) and d.war.is_empty() and d.waw.is_empty()
    assert_rel(d.live_in, m, "{ S_Exp_0[i, j] -> x[i, j] : 0 <= i < 4 and 0 <= j < 6 }")


def test_reduction_self_dependence_along_k():
    m = model_of(row_sum)
    d = dependences(m)
    init, upd = m.statement("S_ReduceSum_0_init").domain, m.statement("S_ReduceSum_0_update").domain
    assert_rel(d.raw.intersect_domain(upd).intersect_range(upd), m,
               "{ S_ReduceSum_0_update[i, k] -> S_ReduceSum_0_update[i, k + 1] : 0 <= i < 4 and 0 <= k < 5 }")
    assert_rel(d.raw.intersect_domain(init), m,
               "{ S_ReduceSum_0_init[i] -> S_ReduceSum_0_update[i, 0] : 0 <= i < 4 }")
    assert_rel(d.waw.intersect_domain(upd), m,
               "{ S_ReduceSum_0_update[i, k] -> S_ReduceSum_0_update[i, k2] : 0 <= i < 4 and 0 <= k < k2 < 6 }")
    assert_rel(d.war, m,
               "{ S_ReduceSum_0_update[i, k] -> S_ReduceSum_0_update[i, k2] : 0 <= i < 4 and 0 <= k < k2 < 6 }")
    assert_rel(d.raw.intersect_range(m.statement("S_ReduceSum_0_cast").domain), m,
               "{ S_ReduceSum_0_update[i, 5] -> S_ReduceSum_0_cast[i] : 0 <= i < 4 }")


def shared_input(b):
    x, w = b.input("x", (4, 6)), b.input("w", (6,))
    b.output(b.exp(x))
    b.output(x * w)


def test_read_after_read_pairs_two_statements_only():
    """rar (input fusion's proximity) pairs reads of one element by two statements; a
    statement re-reading a broadcast element (w[j] for every i) is not paired with itself."""
    m = model_of(shared_input)
    d = dependences(m)
    (e,) = [s.name for s in m.statements if s.name.startswith("S_Exp")]
    (k,) = [s.name for s in m.statements if s.name.startswith("S_Mul")]
    assert_rel(d.rar, m, f"{{ {e}[i, j] -> {k}[i, j] : 0 <= i < 4 and 0 <= j < 6 }}")
    assert not d.rar.is_subset(d.validity)  # not a dependence: no order is forced by it


def test_read_after_read_pairs_drop_existential_divs():
    """Proximity is a cost, not a constraint, so rar may over-approximate: a Reshape's exact
    pairs (6 i + j = 12 a + 4 b + c) need existential divs, which kept isl's search on yolo
    ~3153 at 2.9 s; without them it took 0.35 s for the same schedule."""
    m = model_of(regroup_reuse)
    d = dependences(m)
    reads = accesses(m, "S_Exp_0", "reads", "x").apply_range(accesses(m, "S_Reshape_1", "reads", "x").reverse())
    assert any(bm.dim(isl.dim_type.div) for mp in maps_of(reads) for bm in mp.get_basic_maps())
    assert reads.is_subset(d.rar) and not reads.is_equal(d.rar)
    assert not any(bm.dim(isl.dim_type.div) for mp in maps_of(d.rar) for bm in mp.get_basic_maps())


@pytest.mark.parametrize("graph", [layernorm, softmax, producer_consumer])
def test_dependences_match_the_order_of_every_statement_pair(graph):
    """deps orders only the statement pairs it is asked about; the same as lex_lt over the whole
    program order (which builds every pair: 1.4 s on the 54 statements of yolo ~2380)."""
    m = model_of(graph)
    d = dependences(m)
    lt = m.order.lex_lt_union_map(m.order)
    assert d.waw.is_equal(m.writes.apply_range(m.writes.reverse()).intersect(lt))
    assert d.war.is_equal(m.reads.apply_range(m.writes.reverse()).intersect(lt))


# -- legality ----------------------------------------------------------------------------------

def test_legality_accepts_original_and_isl_schedules():
    m = model_of(producer_consumer)
    d = dependences(m)
    check_legal(m.order, d)
    sched = compute_schedule(m, d)
    check_legal(sched, d)  # an isl.Schedule
    check_legal(sched.get_map(), d)


def test_legality_rejects_consumer_before_producer():
    m = model_of(producer_consumer)
    d = dependences(m)
    bad = m.order.subtract(umap(m, "{ S_Exp_0[i, j] -> [a, b, c, e] }")).union(
        umap(m, "{ S_Exp_0[i, j] -> [9, i, j, 0] : 0 <= i < 4 and 0 <= j < 6 }"))  # producer moved last
    with pytest.raises(IllegalSchedule, match=r"RAW dependence S_Exp_0 -> S_(Mul_3|Transpose_1)") as ei:
        check_legal(bad, d)
    assert isinstance(ei.value, CompileError)


def test_legality_rejects_reversed_reduction_and_missing_statements():
    m = model_of(row_sum)
    d = dependences(m)
    rev = umap(m, "{ S_ReduceSum_0_init[i] -> [0, i, 0]; S_ReduceSum_0_update[i, k] -> [0, i, 10 - k]; "
                  "S_ReduceSum_0_cast[i] -> [1, i, 0] }")
    with pytest.raises(IllegalSchedule, match="S_ReduceSum_0_update -> S_ReduceSum_0_update"):
        check_legal(rev, d)
    with pytest.raises(IllegalSchedule):  # a schedule that forgets a statement orders nothing for it
        check_legal(umap(m, "{ S_ReduceSum_0_init[i] -> [0, i, 0]; S_ReduceSum_0_update[i, k] -> [0, i, 1 + k] }"), d)
    # different time-vector lengths are padded, not treated as unordered
    check_legal(umap(m, "{ S_ReduceSum_0_init[i] -> [i, 0]; S_ReduceSum_0_update[i, k] -> [i, 1 + k, 0]; "
                        "S_ReduceSum_0_cast[i] -> [i, 7] }"), d)
    with pytest.raises(IllegalSchedule, match="S_ReduceSum_0_update -> S_ReduceSum_0_cast"):
        check_legal(umap(m, "{ S_ReduceSum_0_init[i] -> [i, 0]; S_ReduceSum_0_update[i, k] -> [i, 1 + k, 0]; "
                            "S_ReduceSum_0_cast[i] -> [i] }"), d)  # cast padded to [i, 0, 0]: too early


# -- scheduling ------------------------------------------------------------------------------

@pytest.mark.parametrize("graph", [softmax, layernorm])
def test_row_graphs_fuse_into_one_outer_band(graph):
    m = model_of(graph)
    d = dependences(m)
    t0 = time.perf_counter()
    sched = compute_schedule(m, d)
    ms = 1e3 * (time.perf_counter() - t0)
    print(f"{graph.__name__}: {len(m.statements)} statements, compute_schedule {ms:.1f} ms")
    band = sched.get_root().child(0)
    assert band.get_type() == isl.schedule_node_type.band, describe(m, d, sched)
    assert band.get_domain().is_equal(m.domain)  # every statement passes through this band
    rows = "; ".join(f"{s.name}[{', '.join(s.dims)}] -> [{s.dims[0]}]" for s in m.statements)
    outer = isl.UnionMap.from_union_pw_aff(band.band_get_partial_schedule().get_at(0)).intersect_domain(m.domain)
    assert_rel(outer, m, "{ " + rows + " }", within=m.domain)  # the shared loop is the row index of every statement
    assert band.band_member_get_coincident(0)  # and rows are independent: a parallel loop
    assert ms < 5000


def test_budget_exhaustion_is_a_compile_error():
    m = model_of(softmax)
    d = dependences(m)
    with pytest.raises(CompileError, match="budget"):
        compute_schedule(m, d, max_operations=1000)
    compute_schedule(m, d)  # the context is usable afterwards


def test_describe_shows_statements_dependences_and_tree():
    m = model_of(row_sum)
    d = dependences(m)
    text = describe(m, d, compute_schedule(m, d))
    for part in ("S_ReduceSum_0_init", "S_ReduceSum_0_update", "read", "write", "RAW", "WAR", "WAW",
                 "schedule tree", "band", "coincident", "filter"):
        assert part in text, part


# -- bounded runs ------------------------------------------------------------------------------

def test_run_bounded_schedule_text_round_trip():
    m = model_of(layernorm)
    d = dependences(m)
    text = run_bounded(schedule_text, 30, m, d)
    assert isinstance(text, str)
    back = schedule_from_text(m.ctx, text)
    direct = compute_schedule(m, d)
    assert back.plain_is_equal(direct) and back.get_map().is_equal(direct.get_map())
    check_legal(back, d)
    assert compute_schedule_bounded(m, d, timeout_s=30).plain_is_equal(direct)


def test_run_bounded_times_out_and_propagates_failures():
    t0 = time.perf_counter()
    with pytest.raises(TimeoutError):
        run_bounded(time.sleep, 0.5, 30)
    assert time.perf_counter() - t0 < 2.0
    with pytest.raises(ValueError):
        run_bounded(int, 10, "not a number")
    with pytest.raises(CompileError, match="died"):
        run_bounded(os._exit, 10, 3)
    assert run_bounded(pow, 10, 2, 10) == 1024


def test_run_bounded_workers_are_collected_without_waiting_for_them():
    """run_bounded does not wait for a worker's exit (it unmaps a copy of the whole process);
    each later call collects the ones that have finished, so none is left a zombie for long."""
    from akgpy.poly import scheduler
    workers = {run_bounded(os.getpid, 10) for _ in range(20)}
    assert os.getpid() not in workers and len(workers) == 20
    time.sleep(0.5)
    run_bounded(pow, 10, 2, 3)
    assert len(scheduler._exiting) <= 1, scheduler._exiting  # the last one may still be exiting
    for pid in workers - set(scheduler._exiting):  # collected: no longer a child of ours
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def test_fast_legality_test_agrees_with_the_exact_order():
    """check_legal's pair-only test (time differences lexicographically positive) and the exact
    subtraction from the order between all statement pairs agree, legal or not."""
    from akgpy.poly.checks import violations
    from akgpy.poly.isl_util import flat_schedule_map
    seen = set()
    for build in (producer_consumer, softmax, row_sum):
        m = model_of(build)
        d = dependences(m)
        n = maps_of(m.order)[0].dim(isl.dim_type.out)
        t = [f"t{q}" for q in range(n)]
        flip = isl.UnionMap(f"{{ [{', '.join(t)}] -> [{', '.join(['t0'] + ['-' + x for x in t[1:]])}] }}",
                            context=m.ctx)
        reversed_k = m.order.apply_range(flip)  # every statement's loops run backwards
        for sched in (m.order, compute_schedule(m, d).get_map(), reversed_k):
            smap = flat_schedule_map(sched)
            exact = d.validity.subtract(smap.lex_lt_union_map(smap))
            assert violations(sched, d).is_empty() == exact.is_empty()
            seen.add(exact.is_empty())
    assert seen == {True, False}
