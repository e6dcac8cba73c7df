"""Every real subgraph in corpus/ compiles for llvm on the poly path (no plain fallback, no
"isl's tree used as is", no refused mark; contractions on their template) and matches the
numpy reference.

Each graph is its own test with a hard wall-clock bound (pytest-timeout, thread method: a
graph stuck inside TVM or a kernel is really interrupted, the worker process is replaced).
"""
from __future__ import annotations

from pathlib import Path

import pytest

import akgpy
from akgpy.testing import check_program

from .conftest import CORPUS

EXPECTED = 751
# Graphs akgpy does not compile, with the reason. At most 2% of the corpus (15 graphs).
EXCLUDED = {
    "networks/custom/lu.info": "Custom op with a user hybrid-script body (a triangular solve); "
                               "akgpy does not compile user hybrid/ir_builder code",
}


def corpus_files() -> list[Path]:
    if not CORPUS.is_dir():
        return []
    return sorted(p for p in CORPUS.rglob("*") if p.suffix in (".info", ".json"))


FILES = corpus_files()


def test_corpus_is_complete():
    assert CORPUS.is_dir(), f"corpus/ is missing (looked in {CORPUS})"
    assert len(FILES) >= EXPECTED, f"corpus holds {len(FILES)} graphs, expected {EXPECTED}"
    rel = {str(p.relative_to(CORPUS)) for p in FILES}
    assert set(EXCLUDED) <= rel, f"excluded files not in corpus: {set(EXCLUDED) - rel}"
    assert len(EXCLUDED) <= 0.02 * EXPECTED


def test_excluded_graphs_fail_clearly():
    """An excluded graph still loads and is rejected with an akgpy error, not a crash."""
    for rel in EXCLUDED:
        g = akgpy.load_composite(CORPUS / rel)
        with pytest.raises(akgpy.AkgpyError):
            akgpy.fuse(g)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("path", [p for p in FILES if str(p.relative_to(CORPUS)) not in EXCLUDED],
                         ids=lambda p: str(p.relative_to(CORPUS)))
def test_corpus_graph(path: Path):
    g = akgpy.load_composite(path)
    prog = akgpy.fuse(g, target="llvm")
    assert len(prog.kernels) == 1, "a composite graph compiles to exactly one kernel"
    # the poly path does not hide its bugs behind the plain schedule or isl's unshaped tree
    route = prog.kernels[0].schedule_path
    assert route.fallback is None, f"poly fell back to plain: {route.fallback}"
    assert route.isl_tree_as_is is None, f"isl's tree used as is: {route.isl_tree_as_is}"
    assert route.dropped_marks == 0, "the tree passes put a parallel/vector mark on a loop carrying a dependence"
    assert route.path in ("poly/isl-ast", "poly/template"), route
    bad = check_program(g, prog, seed=0)
    assert not bad, "\n".join(f"{m.tensor}: {m.bad}/{m.total} outside tol {m.tol} (max abs {m.max_abs:.3g}), "
                              f"{m.example}" for m in bad)


def test_corpus_checked_count():
    checked = [p for p in FILES if str(p.relative_to(CORPUS)) not in EXCLUDED]
    assert len(checked) == len(FILES) - len(EXCLUDED)
    assert len(checked) >= EXPECTED - len(EXCLUDED)
