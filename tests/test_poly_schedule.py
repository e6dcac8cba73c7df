"""The opt-in polyhedral schedule (schedule="poly"): isl decides row fusion, s_tir realises it,
or the plain schedule runs and explain() says why. Either way results match the reference."""
from __future__ import annotations

import re

import pytest

import akgpy
from akgpy import GraphBuilder
from akgpy.testing import check_program

from .conftest import CORPUS


def _softmax(rows=16, cols=64):
    b = GraphBuilder("softmax_poly")
    x = b.input("x", (rows, cols))
    e = b.exp(x - x.max(axis=1, keepdims=True))
    b.output(e / e.sum(axis=1, keepdims=True))
    return b.build()


def _layernorm(rows=16, cols=96):
    b = GraphBuilder("layernorm_poly")
    x = b.input("x", (rows, cols))
    g = b.input("g", (cols,))
    mean = x.sum(axis=1, keepdims=True) * (1.0 / cols)
    xc = x - mean
    var = (xc * xc).sum(axis=1, keepdims=True) * (1.0 / cols)
    b.output(xc * b.rsqrt(var + 1e-5) * g)
    return b.build()


@pytest.mark.parametrize("build", [_softmax, _layernorm])
def test_row_graphs_become_one_fused_parallel_nest(build):
    g = build()
    prog = akgpy.fuse(g, schedule="poly")
    text = prog.explain()
    assert "schedule path: poly/s_tir" in text, text.splitlines()[1]
    tir = prog.kernels[0].tir
    body = tir[tir.index("# with T.sblock(\"root\"):"):]
    top_loops = re.findall(r"^        for ", body, flags=re.M)
    assert len(top_loops) == 1, f"expected one outer loop nest, got {len(top_loops)}:\n{body}"
    assert "T.parallel" in body.splitlines()[body.splitlines().index(next(
        line for line in body.splitlines() if line.startswith("        for ")))]
    assert not check_program(g, prog)
    plain = akgpy.fuse(g, schedule="plain").kernels[0].tir
    assert plain != tir, "the poly schedule must change the loop nest"


def test_fallback_is_explained_and_correct():
    b = GraphBuilder("two_outputs")
    x = b.input("x", (8, 32))
    s = x.sum(axis=1, keepdims=True)
    b.output(x * 2.0, x - s)  # an output block that is not a producer of the last block
    g = b.build()
    prog = akgpy.fuse(g, schedule="poly")
    text = prog.explain()
    assert "schedule path: plain (poly fell back: " in text.splitlines()[1]
    assert not check_program(g, prog)


def test_unknown_schedule_is_an_error():
    with pytest.raises(akgpy.errors.CompileError, match="unknown schedule"):
        akgpy.fuse(_softmax(), schedule="fancy")


STITCH = sorted(p for d in ("composite/stitch_adapt", "composite/ascend_ci")
                for p in (CORPUS / d).glob("*") if p.suffix in (".info", ".json"))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("path", STITCH, ids=lambda p: p.name[:60])
def test_corpus_stitch_graphs_with_poly(path):
    g = akgpy.load_composite(path)
    prog = akgpy.fuse(g, schedule="poly")
    assert not check_program(g, prog)


def test_corpus_stitch_set_present():
    assert len(STITCH) == 46


def _fuse_in_worker(_):
    prog = akgpy.fuse(_softmax(), schedule="poly")
    return prog.explain().splitlines()[1]


def test_poly_works_inside_a_daemonic_pool_worker():
    """Pool workers may not start multiprocessing children: the bounded isl run must still work."""
    import multiprocessing as mp
    with mp.get_context("fork").Pool(1) as pool:
        (line,) = pool.map(_fuse_in_worker, [0])
    assert line.startswith("schedule path: poly/s_tir"), line


def _matmul_bias():
    b = GraphBuilder("mm_cfg")
    a = b.input("a", (64, 48), "float16")
    w = b.input("w", (48, 96), "float16")
    bias = b.input("bias", (96,), "float32")
    c = b.matmul(a, w, dst_type="float32")
    b.output(c + bias)
    return b.build()


@pytest.mark.parametrize("schedule", ["plain", "poly"])
@pytest.mark.parametrize("build", [_softmax, _matmul_bias])
def test_config_changes_code_and_stays_correct(schedule, build):
    """The knobs are real: other tiles / vector width / no threads give another loop nest,
    and every one of them still matches the reference."""
    g = build()
    seen = set()
    for cfg in [akgpy.ScheduleConfig(),
                akgpy.ScheduleConfig(vector_bytes=16, tile_i=2, tile_j_vectors=1),
                akgpy.ScheduleConfig(parallel=False, unroll=False)]:
        prog = akgpy.fuse(g, schedule=schedule, config=cfg)
        assert not check_program(g, prog), cfg
        seen.add(prog.kernels[0].tir)
    assert len(seen) == 3, "each config must produce a different loop nest"


def test_config_rejects_nonsense():
    with pytest.raises(akgpy.errors.CompileError, match="tile_i"):
        akgpy.ScheduleConfig(tile_i=0)
