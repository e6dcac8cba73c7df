"""The legality check of the marks the tree passes put: isl proves, on every compile, that no
loop marked parallel or vector carries a dependence, and drops a mark that does (issue 48).
A hook forces such marks (on a reduction's loop, as a faulty pass would) and sees them refused;
the corpus test asserts that the passes' own marks all pass (tests/test_corpus.py)."""
from __future__ import annotations

import islpy as isl
import pytest

import akgpy
import akgpy.schedule.poly as poly
from akgpy import GraphBuilder
from akgpy.poly.checks import carried, legal_marks
from akgpy.poly.deps import Deps
from akgpy.poly.tree import PARALLEL, VECTOR
from akgpy.testing import check_program

LOOP_MARKS = frozenset({PARALLEL, VECTOR})


def _reduction(ctx):
    """S[i, k] accumulates row i over k (RAW k -> k + 1); T[i] reads the row's total."""
    domain = isl.UnionSet("{ S[i, k] : 0 <= i < 4 and 0 <= k < 8; T[i] : 0 <= i < 4 }", context=ctx)
    raw = isl.UnionMap("{ S[i, k] -> S[i, k + 1] : 0 <= i < 4 and 0 <= k < 7; S[i, 7] -> T[i] : 0 <= i < 4 }",
                       context=ctx)
    none = isl.UnionMap("{ }", context=ctx)
    return domain, Deps(raw=raw, war=none, waw=none, live_in=none, validity=raw, rar=none)


def _tree(ctx, domain, row_mark=None, k_mark=None, sequence_mark=None):
    """band i [mark] -> [mark] sequence(S: band k [mark], T)."""
    node = isl.Schedule.from_domain(domain).get_root().child(0)
    node = node.insert_partial_schedule(isl.MultiUnionPwAff.read_from_str(ctx, "[{ S[i, k] -> [(i)]; T[i] -> [(i)] }]"))
    if row_mark:
        node = node.insert_mark(isl.Id(row_mark, context=ctx)).child(0)
    parts = isl.UnionSetList.alloc(ctx, 2).add(isl.UnionSet("{ S[i, k] }", context=ctx)) \
        .add(isl.UnionSet("{ T[i] }", context=ctx))
    node = node.child(0)
    if sequence_mark:
        node = node.insert_mark(isl.Id(sequence_mark, context=ctx)).child(0)
    node = node.insert_sequence(parts).child(0).child(0)
    node = node.insert_partial_schedule(isl.MultiUnionPwAff.read_from_str(ctx, "[{ S[i, k] -> [(k)] }]"))
    if k_mark:
        node = node.insert_mark(isl.Id(k_mark, context=ctx)).child(0)
    return node.get_schedule()


def _marks(schedule: isl.Schedule) -> list[str]:
    found = []

    def visit(node):
        if node.get_type() == isl.schedule_node_type.mark:
            found.append(node.mark_get_id().get_name())
        for c in range(node.n_children()):
            visit(node.child(c))
    visit(schedule.get_root())
    return found


@pytest.mark.parametrize("mark", [PARALLEL, VECTOR])
def test_mark_on_a_loop_that_carries_a_dependence_is_dropped(mark):
    ctx = isl.Context()
    domain, deps = _reduction(ctx)
    checked, notes = legal_marks(_tree(ctx, domain, k_mark=mark), deps, LOOP_MARKS)
    assert _marks(checked) == []
    assert len(notes) == 1 and notes[0].startswith(f"legality: {mark} mark dropped") and "RAW" in notes[0]


def test_mark_on_a_loop_whose_dependences_an_outer_loop_carries_is_kept():
    """The rows are independent: i is parallel although every row is a chain in k; and a mark
    below i is judged only by pairs in one iteration of i."""
    ctx = isl.Context()
    domain, deps = _reduction(ctx)
    tree = _tree(ctx, domain, row_mark=PARALLEL)
    checked, notes = legal_marks(tree, deps, LOOP_MARKS)
    assert (_marks(checked), notes) == ([PARALLEL], [])
    band = checked.get_root().child(0).child(0)
    assert band.get_type() == isl.schedule_node_type.band and carried(band, deps).is_empty()


def test_mark_above_a_sequence_is_judged_by_the_first_loop_below_it():
    """Code generation marks the first loop under a mark: here S's loop over k."""
    ctx = isl.Context()
    domain, deps = _reduction(ctx)
    checked, notes = legal_marks(_tree(ctx, domain, sequence_mark=VECTOR), deps, LOOP_MARKS)
    assert _marks(checked) == [] and len(notes) == 1


def test_other_marks_are_not_judged():
    ctx = isl.Context()
    domain, deps = _reduction(ctx)
    checked, notes = legal_marks(_tree(ctx, domain, k_mark="transpose"), deps, LOOP_MARKS)
    assert (_marks(checked), notes) == (["transpose"], [])


# -- the whole compile, a faulty pass simulated ----------------------------------------------

def _mark_sequential_bands(mark: str):
    """A shape() that puts `mark` on every band whose first member isl found sequential (a
    reduction's loop), or moves the parallel marks down onto one: what a wrong pass would do."""
    real = poly.shape

    def marked(node):
        t = isl.schedule_node_type
        if mark == PARALLEL and node.get_type() == t.mark and node.mark_get_id().get_name() == PARALLEL:
            node = node.delete()  # one parallel loop per nest: TVM refuses nested ones
            return marked(node)
        if node.get_type() == t.band and not node.band_member_get_coincident(0) \
                and node.parent().get_type() != t.mark:
            return marked(node.insert_mark(isl.Id(mark, context=node.get_ctx())).child(0)).parent()
        for c in range(node.n_children()):
            node = marked(node.child(c)).parent()
        return node

    def shape(model, deps, tree, opts):
        shaped = real(model, deps, tree, opts)
        shaped.schedule = marked(shaped.schedule.get_root()).get_schedule()
        return shaped
    return shape


def _column_reduction(kind: str):
    b = GraphBuilder(f"forced_{kind}")
    x = b.input("x", [512, 64])
    b.output(b.reduce_sum(x, 0) if kind == "sum" else b.reduce_max(x, 0))
    return b.build()


@pytest.mark.parametrize("mark", [PARALLEL, VECTOR])
@pytest.mark.parametrize("kind", ["sum", "max"])
def test_forced_mark_on_a_reduction_loop_is_refused(mark, kind, monkeypatch):
    """Without the check the compile fails in LLVM (nested parallel or vectorised reduction
    loops) or runs threads on one accumulator; with it the marks go and explain() says so."""
    monkeypatch.setattr(poly, "shape", _mark_sequential_bands(mark))
    g = _column_reduction(kind)
    prog = akgpy.fuse(g)
    path = prog.kernels[0].schedule_path
    assert path.path == "poly/isl-ast" and path.isl_tree_as_is is None and path.dropped_marks >= 1
    assert f"legality: {mark} mark dropped, its loop carries a RAW" in prog.explain()
    assert not check_program(g, prog, seed=0)


def test_passes_marks_are_proved_legal():
    """Unforced, nothing is dropped and explain() says the proof ran."""
    b = GraphBuilder("softmax")
    x = b.input("x", [256, 384])
    e = b.op("Exp", [x - b.reduce_max(x, 1, keepdims=True)], [256, 384], "float32")
    b.output(e / b.reduce_sum(e, 1, keepdims=True), b.reduce_sum(x, 0), x.transpose(1, 0))
    g = b.build()
    prog = akgpy.fuse(g)
    assert prog.kernels[0].schedule_path.dropped_marks == 0
    assert "parallel and vector loops proved to carry none" in prog.explain()
    assert not check_program(g, prog, seed=0)
