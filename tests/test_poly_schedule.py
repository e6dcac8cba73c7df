"""The polyhedral schedule: isl decides fusion, akgpy's passes shape the tree, the loop nest is
generated from isl's AST; or the plain schedule runs and explain() says why. Either way results
match the reference."""
from __future__ import annotations

import re

import numpy as np
import pytest

import akgpy
from akgpy.targets import default_config
from akgpy import GraphBuilder
from akgpy.testing import check_program, workspace_allocations

from .conftest import CORPUS, BARE, WIDE

# the tile planner's decisions for statements of the graph's own dims: without dim collapsing
# (graph/collapse.py), which would merge the runs these graphs are built to have
SHAPED = BARE.replace(collapse_dims=False)


def wide(vector_bytes: int, **facts) -> dict:
    """The host's CPU as a target with its vector width (and any other facts) pinned."""
    return {**WIDE, "vector_bytes": vector_bytes, **facts}


def _softmax(rows=64, cols=128):
    b = GraphBuilder("softmax_poly")
    x = b.input("x", (rows, cols))
    e = b.exp(x - x.max(axis=1, keepdims=True))
    b.output(e / e.sum(axis=1, keepdims=True))
    return b.build()


def _layernorm(rows=64, cols=96):
    b = GraphBuilder("layernorm_poly")
    x = b.input("x", (rows, cols))
    g = b.input("g", (cols,))
    mean = x.sum(axis=1, keepdims=True) * (1.0 / cols)
    xc = x - mean
    var = (xc * xc).sum(axis=1, keepdims=True) * (1.0 / cols)
    b.output(xc * b.rsqrt(var + 1e-5) * g)
    return b.build()


def _batchnorm(n=8, c=16, hw=8):
    """Training BatchNorm over NCHW: statistics per channel, reduced over n, h, w."""
    b = GraphBuilder("batchnorm_poly")
    x = b.input("x", (n, c, hw, hw))
    count = 1.0 / (n * hw * hw)
    mean = x.sum(axis=(0, 2, 3), keepdims=True) * count
    xc = x - mean
    var = (xc * xc).sum(axis=(0, 2, 3), keepdims=True) * count
    b.output(xc * b.rsqrt(var + 1e-5))
    return b.build()


def _top_level(tir: str) -> list[str]:
    body = tir[tir.index("# with T.sblock(\"root\"):"):].splitlines()
    indent = min(len(line) - len(line.lstrip()) for line in body[1:] if line.strip().startswith("for "))
    return [line for line in body if line.strip().startswith("for ") and len(line) - len(line.lstrip()) == indent]


@pytest.mark.parametrize("build", [_softmax, _layernorm, _batchnorm])
def test_row_graphs_become_one_fused_parallel_nest(build):
    g = build()
    prog = akgpy.fuse(g, schedule="poly")
    text = prog.explain()
    assert "schedule path: poly/isl-ast" in text, text.splitlines()[1]
    # the schedule tree: one band over all statements at the top, with a parallel mark
    after = text[text.index("== schedule tree (after passes)"):text.index("== isl AST")].splitlines()[1:]
    assert after[0].startswith("domain") and after[1].strip() == "mark parallel", after[:3]
    assert after[2].strip().startswith("band (1 member(s)"), after[:4]
    # the TIR: one outer loop, parallel
    top = _top_level(prog.kernels[0].tir)
    assert len(top) == 1 and "T.parallel" in top[0], top
    assert not check_program(g, prog)
    plain = akgpy.fuse(g, schedule="plain").kernels[0].tir
    assert plain != prog.kernels[0].tir, "the poly schedule must change the loop nest"


def test_explain_shows_trees_decisions_and_ast():
    text = akgpy.fuse(_layernorm(), schedule="poly").explain()
    for part in ("== isl schedule tree (before passes)", "== schedule tree (after passes)", "== decisions",
                 "fusion:", "parallel:", "== isl AST", "== dependences", "inlined before scheduling"):
        assert part in text, part


def test_fused_intermediates_shrink_to_a_row():
    """TVM's allocation planning puts a fused row's intermediates inside the parallel row loop,
    compacted to one row: (1, 1) instead of (rows, 1)."""
    from tvm import s_tir
    prog = akgpy.fuse(_softmax(rows=64, cols=128), schedule="poly")
    mod = prog.kernels[0]._mod
    for p in (s_tir.transform.PlanAndUpdateBufferAllocationLocation(), s_tir.transform.ConvertBlocksToOpaque(),
              s_tir.transform.CompactBufferAllocation()):
        mod = p(mod)
    allocs = re.findall(r"(\w+) = T.sblock_alloc_buffer\(\(([^)]*)\)", mod.script())
    # (1, 1) for a row statistic, (1, 1, lanes) for its vector partial sums; never 64 rows
    assert allocs and all(shape.replace(" ", "").startswith("1,1") for _, shape in allocs), allocs
    assert any(name.endswith("_rf") for name, _ in allocs), "row reductions should be rfactored"


def _transpose_add():
    b = GraphBuilder("transpose_add")
    x = b.input("x", (64, 96))
    y = b.input("y", (96, 64))
    b.output(b.transpose(x, (1, 0)) + y)
    return b.build()


def test_transpose_is_tiled_by_the_cache_model_and_config_tiles_change_code():
    g = _transpose_add()
    default = akgpy.fuse(g, schedule="poly")
    text = default.explain()
    assert "tiling:" in text and "cache model" in text, text[:2000]
    assert not check_program(g, default)
    seen = {default.kernels[0].tir}
    for tile in [(8, 8), (4, 16)]:
        prog = akgpy.fuse(g, schedule="poly", config=akgpy.ScheduleConfig(tile=tile))
        assert f"of the fused band tiled {list(tile)} (config)" in prog.explain()
        assert not check_program(g, prog), tile
        seen.add(prog.kernels[0].tir)
    assert len(seen) == 3, "other tile sizes must give other loop nests"


def test_loop_order_knob_moves_the_stride1_dim():
    """A column sum: with stride1_innermost the kept (contiguous) dim runs inside the reduction
    loop and is vectorised; without it the original order stays. Both are correct."""
    b = GraphBuilder("colsum")
    x = b.input("x", (256, 64))
    b.output(x.sum(axis=0))
    g = b.build()
    on = akgpy.fuse(g, schedule="poly")
    off = akgpy.fuse(g, schedule="poly", config=akgpy.ScheduleConfig(stride1_innermost=False))
    assert "moved innermost" in on.explain() and "moved innermost" not in off.explain()
    assert "T.vectorized" in on.kernels[0].tir
    assert on.kernels[0].tir != off.kernels[0].tir
    assert not check_program(g, on) and not check_program(g, off)


@pytest.mark.parametrize("dtype,vector_bytes,lanes", [("float16", 64, 64), ("float16", 32, 64), ("float32", 64, 32),
                                                       ("float32", 32, 32)])
def test_column_sums_read_two_cache_lines_per_row_step(dtype, vector_bytes, lanes):
    """bert's GELU-backward column sum ([2048, 3072] float16 -> [3072]) read 4 elements per row
    step (one float64 register of AVX2): each step another page, one add chain, 5.7 ms. The
    block of columns now covers two cache lines of the input per row (128 bytes: 64 float16,
    32 float32) in independent float64 partials; the sums stay exact."""
    b = GraphBuilder("column_sum")
    x = b.input("x", (512, 768), dtype)
    b.output(b.reduce_sum(b.cast(x, "float32") if dtype != "float32" else x, axis=(0,)))
    g = b.build()
    prog = akgpy.fuse(g, config=BARE, target=wide(vector_bytes))
    text = prog.explain()
    regs = lanes * 8 // vector_bytes
    assert re.search(rf"vector: \S+_update: innermost member split by {lanes} lanes \({regs} registers per op: "
                     "each row step reads two whole cache lines", text), text[:3000]
    assert "vector blocks of i0 outermost (parallel), the reduction inside" in text
    assert f"T.vectorized({lanes})" in prog.kernels[0].tir
    assert not check_program(g, prog)


@pytest.mark.parametrize("math", [False, True])
def test_a_column_sum_whose_row_has_a_remainder_runs_in_column_blocks(math):
    """Rows of 2050 float32 (8 x 256 + 2) keep one float64 register per row step: wider vectors
    need whole blocks of two cache lines. That read 32 bytes a row, a new page each step (bert's
    output-bias gradient [1216, 30522]: ~1222 9.4 -> 5.9 ms, case5 11.6 -> 6.5, kernel alone,
    A/B); blocks of a few KB of each row, 8 rows a step, outermost, go through the rows in long
    runs. An exp in the summand keeps one vector per block: its arithmetic bounds it."""
    b = GraphBuilder("odd_column_sum")
    x = b.input("x", (64, 2050))
    b.output(b.reduce_sum(b.exp(x * 0.01) if math else x, axis=(0,)))
    g = b.build()
    prog = akgpy.fuse(g, config=BARE, target=WIDE)
    text = prog.explain()
    assert "split by 8 lanes (256 full, a remainder of 2)" in text, text[:3000]
    blocks = "column blocks of 256 (1024 bytes of each input row) outermost (parallel), 8 rows a step"
    assert (blocks in text) != math, text[:3000]
    assert ("vector blocks of i0 outermost" in text) == math, text[:3000]
    tir = prog.kernels[0].tir
    assert "T.vectorized(8)" in tir and "T.vectorized(2)" in tir, tir
    for _ in range(3):  # blocks run in parallel: a race would show as a wrong sum
        assert not check_program(g, prog)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("math", [False, True])
def test_a_chunked_column_sum_adds_several_rows_a_step(dtype, math):
    """A column sum over few columns runs its rows in parallel chunks (wide&deep's [16000, N]
    float16 bias gradients). One row a step loaded, converted, added and stored each register of
    partials per row; 8 rows a step of 4 registers keep the partials in registers across the
    step ([16000, 512] LLC-resident 0.60 -> 0.29 ms, kernel alone, A/B). An exp in the summand
    keeps one row a step: its arithmetic bounds it."""
    b = GraphBuilder("chunked_column_sum")
    x = b.input("x", (4000, 256), dtype)
    v = b.cast(x, "float32") if dtype == "float16" else x
    b.output(b.reduce_sum(b.exp(v * 0.01) if math else v, axis=(0,)))
    g = b.build()
    prog = akgpy.fuse(g)
    text = prog.explain()
    steps = re.search(r"order: \S+_partial_update: 8 rows of its chunk a step, vectors of (\d+) columns innermost", text)
    if math:
        assert steps is None, text[:3000]
    else:
        assert steps is not None, text[:3000]
        assert "(4 registers per op: independent add chains in each row step of a chunk)" in text
        lanes = int(steps.group(1))
        assert re.search(rf"T.grid\(\d+, \d+, 8\):\s+for \w+ in T.vectorized\({lanes}\)", prog.kernels[0].tir), \
            prog.kernels[0].tir[:3000]
    assert not check_program(g, prog)


def _gradient_and_its_column_sum(rows: int, cols: int, dtype: str):
    """A bias gradient's shape: an elementwise chain over [rows, cols] (a graph output), and its
    sum down the rows (bert's GELU backward ~0750)."""
    b = GraphBuilder("grad_colsum")
    x, dy = b.input("x", (rows, cols), dtype), b.input("dy", (rows, cols), dtype)
    grad = dy * (b.tanh(x * 0.79) * 0.5 + 0.5)
    b.output(grad)
    b.output(b.reduce_sum(b.cast(grad, "float32") if dtype == "float16" else grad, axis=(0,)))
    return b.build()


def _nest_with(ast: str, names: list[str]) -> bool:
    """Does one top-level loop nest of the isl AST (explain()) run every statement in `names`?"""
    nests, depth, cur = [], 0, []
    for line in ast.splitlines()[2:]:
        cur.append(line)
        depth += line.count("{") - line.count("}")
        if depth == 0 and line.strip().startswith(("S_", "}")):
            nests.append("\n".join(cur))
            cur = []
    return any(all(f"{n}(" in nest for n in names) for nest in nests)


@pytest.mark.parametrize("dtype,rows,cols", [("float16", 2048, 2048), ("float32", 1024, 2560)])
def test_a_column_sum_runs_block_by_block_beside_its_producer(dtype, rows, cols, monkeypatch):
    """The producer's rows in per-thread chunks of blocks; each block's rows computed, then
    summed from cache into the chunk's partial row (prepass.chunk_column_sums, poly/chunks.py):
    one nest under a parallel chunk loop, where the producer wrote its output and a second nest
    read it back from memory (~0750: 0.79x, kernel alone, LLC flushed). The chunk count follows
    the thread count the compile sees: 2 here, whatever the machine (on 96 threads 2048 rows
    leave no two blocks of 8 rows per chunk)."""
    monkeypatch.setenv("TVM_NUM_THREADS", "2")
    g = _gradient_and_its_column_sum(rows, cols, dtype)
    prog = akgpy.fuse(g)
    text = prog.explain()
    assert re.search(r"column sums cut into per-chunk partials beside their producer \(rfactor\): \S+ of \S+", text), text[:3000]
    assert "column sums run block by block beside their producer" in text, text[:3000]
    ast = text.split("== isl AST")[1].split("== scheduled TIR")[0]
    producer = re.search(r"with (S_\w+_rf_update)", text).group(1)
    fused = re.search(r"block by block beside their producer \(.*\): (S_\w+) with", text).group(1)
    assert _nest_with(ast, [fused, producer]), ast
    assert re.search(r"// parallel\s+for \(int c0 = 0; c0 <= \d+; c0 \+= 1\)\s+for", ast), ast
    # the partials sum a block's rows with a vector of columns outermost
    assert re.search(rf"order: {producer}: vector blocks of \w+ outermost, the rows", text), text[:3000]
    for _ in range(2):  # chunks run in parallel, each into its own partial row: a race shows as a wrong sum
        assert not check_program(g, prog)


@pytest.mark.parametrize("rows,cols", [(256, 512), (2039, 2048)])
def test_a_small_or_indivisible_column_sum_is_not_chunked(rows, cols):
    """Under 8 MiB of output (the caches keep it between the two nests) or with no chunk count
    that divides the rows (2039 is prime), the sum stays a nest of its own, and correct."""
    g = _gradient_and_its_column_sum(rows, cols, "float16")
    prog = akgpy.fuse(g)
    assert "beside their producer (rfactor): none" in prog.explain()
    assert not check_program(g, prog)


def test_fusion_depth_knob_unfuses_and_stays_correct():
    g = _softmax()
    fused = akgpy.fuse(g)
    apart = akgpy.fuse(g, config=akgpy.ScheduleConfig(fusion_depth=0))
    assert len(_top_level(fused.kernels[0].tir)) == 1
    assert len(_top_level(apart.kernels[0].tir)) > 1, apart.kernels[0].tir
    assert "stopped at fusion_depth=0" in apart.explain()
    assert not check_program(g, apart)


def test_isl_budgets_exhausted_fall_back_to_plain_with_the_reason(monkeypatch):
    from akgpy.poly import scheduler
    for name in ("FULL_MAX_OPERATIONS", "NO_SHIFTS_MAX_OPERATIONS", "SERIALIZED_MAX_OPERATIONS"):
        monkeypatch.setattr(scheduler, name, 1)
    g = _layernorm()
    prog = akgpy.fuse(g, schedule="poly")
    line = prog.explain().splitlines()[1]
    assert "poly fell back: every isl search variant exhausted its operation budget" in line, line
    assert prog.kernels[0].schedule_path.deterministic
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
    assert line.startswith("schedule path: poly/isl-ast"), line


def _matmul(name: str, x_shape: tuple, w_shape: tuple, dtype: str = "float32"):
    """The graph of x @ w alone."""
    b = GraphBuilder(name)
    b.output(b.matmul(b.input("x", x_shape, dtype), b.input("w", w_shape, dtype)))
    return b.build()


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
    for cfg, target in [(akgpy.ScheduleConfig(), WIDE),
                        (akgpy.ScheduleConfig(tile_i=2, tile_j_vectors=1), wide(16)),
                        (akgpy.ScheduleConfig(parallel=False, unroll=False), WIDE)]:
        prog = akgpy.fuse(g, schedule=schedule, config=cfg, target=target)
        assert not check_program(g, prog), cfg
        seen.add(prog.kernels[0].tir)
    assert len(seen) == 3, "each config must produce a different loop nest"


def test_config_rejects_nonsense():
    with pytest.raises(akgpy.errors.CompileError, match="tile_i"):
        akgpy.ScheduleConfig(tile_i=0)
    with pytest.raises(akgpy.errors.CompileError, match="chain_registers"):
        akgpy.ScheduleConfig(chain_registers=0)
    with pytest.raises(akgpy.errors.CompileError, match="narrow_transpose_bytes"):
        akgpy.ScheduleConfig(narrow_transpose_bytes=-16)


def test_fused_band_puts_the_stride1_member_innermost():
    """Given a tree whose permutable band runs the contiguous dim outermost (as isl may answer),
    the order pass swaps it innermost; the result is legal and vectorised along it."""
    import islpy as isl

    from akgpy.poly import check_legal, dependences, extract
    from akgpy.poly.tree import TreeOptions, shape
    from akgpy.te.lower import lower
    b = GraphBuilder("scale")
    x = b.input("x", (64, 128))
    b.output(x * 2.0)
    low = lower(b.build())
    model = extract(low.func, low.roles)
    deps = dependences(model)
    (s,) = model.statements
    i, j = s.dims
    band = isl.MultiUnionPwAff.read_from_str(model.ctx, f"[{{ {s.name}[{i}, {j}] -> [({j})] }}, "
                                                         f"{{ {s.name}[{i}, {j}] -> [({i})] }}]")
    node = isl.Schedule.from_domain(model.domain).get_root().child(0).insert_partial_schedule(band)
    node = node.band_set_permutable(1).band_member_set_coincident(0, 1).band_member_set_coincident(1, 1)
    shaped = shape(model, deps, node.get_schedule(), TreeOptions(lanes={s.name: 16}))
    assert any("stride-1 dim; moved innermost" in n for n in shaped.notes), shaped.notes
    check_legal(shaped.schedule, deps)
    from akgpy.poly.explain import tree_lines
    lines = tree_lines(shaped.schedule.get_root())
    innermost = [line for line in lines if "coincident:" in line][-1]
    assert "mark vector" in "\n".join(lines) and f"({j}) mod 16" in innermost, "\n".join(lines)


def test_short_trailing_dims_are_coalesced_into_one_vector_loop():
    """A [..., 3, 3] tail cannot be vectorised dim by dim: the trailing members become one linear
    member, and code generation rebuilds the dims with floordiv/floormod of the linear iterator,
    which TVM folds into a flat address, so the machine code is packed."""
    b = GraphBuilder("short_tail")
    x = b.input("x", (64, 32, 3, 3))
    y = b.input("y", (64, 32, 3, 3))
    b.output(x * 0.5 + y)
    g = b.build()
    prog = akgpy.fuse(g)
    assert "coalesced into one of 288 iterations" in prog.explain()
    assert "T.vectorized" in prog.kernels[0].tir
    asm = prog.kernels[0]._executable.mod.inspect_source("s")
    packed = len(re.findall(r"^\s+v\w+ps\b", asm, re.M))
    scalar = len(re.findall(r"^\s+v\w+ss\b", asm, re.M))
    assert packed > 2 * scalar, (packed, scalar)
    assert not check_program(g, prog)


def test_coalescing_stops_where_a_broadcast_operand_changes():
    """BiasAdd [n, c, 13, 13] + [c, 1, 1]: coalesced across the channels, the bias index would be
    the linear member / 169, loaded lane by lane (alexnet 0.36 ms, plain 0.13); the 169 pixels of
    a channel coalesce, and the bias is one scalar per channel."""
    b = GraphBuilder("bias_rows")
    x = b.input("x", (8, 64, 13, 13))
    w = b.input("w", (64, 1, 1))
    b.output(x + w)
    g = b.build()
    prog = akgpy.fuse(g, config=BARE, target=WIDE)
    text = prog.explain()
    assert "members 2..3 coalesced into one of 169 iterations" in text, text[:3000]
    assert "// 169" not in prog.kernels[0].tir
    assert not check_program(g, prog)


def test_a_scalar_tail_joins_the_batch_even_with_a_broadcast_operand():
    """yolo's [32, 13, 13, 3, 2] tails (1014 = 2 x 507 per batch row) stayed a scalar loop over
    the last dim; joined with the batch they are one vector loop, the [3, 2] anchors read with
    the period 6 every 48 lanes."""
    b = GraphBuilder("anchor_rows")
    x = b.input("x", (32, 13, 13, 3, 2))
    w = b.input("w", (3, 2))
    b.output(x * w + 1.0)
    g = b.build()
    prog = akgpy.fuse(g, config=BARE, target=WIDE)
    text = prog.explain()
    assert "members 0..4 coalesced into one of 32448 iterations" in text, text[:3000]
    assert "T.vectorized" in prog.kernels[0].tir
    assert not check_program(g, prog)


def test_a_tail_with_a_vector_stops_before_an_operand_it_would_gather():
    """yolo's IoU: boxes [n, 13, 13, 3, 1, 2] against truths [n, 1, 1, 1, 50, 2]. The [50, 2]
    tail holds vectors (100 = 6 x 16 + 4); coalesced on through the anchors and the grid, the
    truths' index is the linear member modulo 100, gathered lane by lane, the boxes' one
    divided by 100 (kernel alone, A/B: the three corpus graphs ~9556785, ~1470089, ~3174406
    1.31 -> 0.12, 5.5 -> 0.51 and 21.7 -> 4.3 ms). Only joining the parallel member was checked
    for this before; any member is now."""
    b = GraphBuilder("iou")
    boxes = b.input("boxes", (4, 13, 13, 3, 1, 2))
    truth = b.input("truth", (4, 1, 1, 1, 50, 2))
    b.output(b.maximum(b.minimum(boxes, truth) - b.maximum(boxes * 0.5, truth * 0.5), 0.0))
    g = b.build()
    prog = akgpy.fuse(g, config=BARE, target=WIDE)
    text = prog.explain()
    assert "members 4..5 coalesced into one of 100 iterations" in text, text[:3000]
    assert "% 100" not in prog.kernels[0].tir
    assert not check_program(g, prog)


def test_a_complex_add_gets_the_tree_passes():
    """A complex op reads a value's real and imaginary parts (x[i, j, 0] and x[i, j, 1]) in one
    statement: an access that is not single-valued, which every pass reading it as one index
    expression failed on, leaving isl's tree as it was (serial, scalar). Its pieces are read
    apart, and the kernel runs parallel and vectorised."""
    g = akgpy.load_composite(CORPUS / "composite" / "complex" / "complex_add.info")  # CReal/CImag, Add, Complex
    prog = akgpy.fuse(g, config=BARE, target=WIDE)
    text = prog.explain()
    assert "passes failed" not in text, text[:3000]
    assert "T.vectorized" in prog.kernels[0].tir
    assert not check_program(g, prog)


def test_rows_of_a_bias_are_not_coalesced_with_the_batch():
    """[32, 84] + [84]: the rows hold no power-of-two vector of half a register, but joined with
    the batch the bias would be read as bias[L mod 84], lane by lane; each row stays 5 vectors
    and a remainder, the bias loaded as vectors."""
    b = GraphBuilder("bias_rows_84")
    x = b.input("x", (32, 84))
    w = b.input("w", (84,))
    b.output(x + w)
    g = b.build()
    prog = akgpy.fuse(g, config=BARE, target=WIDE)
    text = prog.explain()
    assert "coalesced" not in text and "a remainder of 4" in text, text[:3000]
    assert not check_program(g, prog)


def test_a_row_with_whole_registers_is_not_coalesced_across_a_bias():
    """yolo's bias + NHWC -> NCHW transpose ~7398551: [32, 26, 26, 255] float16 + [255]. A row
    of 255 holds 7 whole registers and a remainder of 31; coalesced with the pixels into 172380,
    the bias was read as bias[L mod 255] lane by lane (kernel alone, A/B: 4.4 -> 1.0 ms, its
    [32, 52, 52, 255] sibling 9.3 -> 3.7). Rows that hold no register still coalesce (above)."""
    b = GraphBuilder("bias_rows_255")
    x = b.input("x", (2, 6, 6, 255), "float16")
    w = b.input("w", (255,), "float16")
    b.output(b.transpose(x + w, (0, 3, 1, 2)))
    g = b.build()
    prog = akgpy.fuse(g, config=BARE, target=WIDE)
    text = prog.explain()
    assert "coalesced" not in text and "a remainder of 31" in text, text[:3000]
    assert "% 255" not in prog.kernels[0].tir
    assert not check_program(g, prog)


@pytest.mark.parametrize("batch,grid,coalesced", [(4, 52, "members 1..3 coalesced into one of 8112 "),
                                                  (32, 52, "members 1..3 coalesced into one of 8112 "),
                                                  (32, 26, "members 0..3 coalesced into one of 64896 ")])
def test_an_elementwise_band_runs_in_storage_order_and_coalesces_past_unit_dims(batch, grid, coalesced):
    """isl ordered yolo's [32, 52, 52, 3, 1] elementwise pair batch-innermost (every step a jump
    of 8112 floats, and the 3 anchors left as a scalar loop: 1.7x the plain schedule). A
    permutable band of elementwise statements takes the storage order its arrays share, and
    the trailing unit dim (a constant index into a dim of 1) does not stop the coalescing.
    Where a batch row (26 x 26 x 3 = 2028 = 4 x 507) holds no power-of-two vector of half a
    register, the batch joins too (13-lane vectors had run 1.9x the plain schedule)."""
    b = GraphBuilder("unit_tail")
    a, c, d = (b.input(n, (batch, grid, grid, 3, 1)) for n in "acd")
    m = d * (2.0 - a * c)
    b.output(m)
    b.output(m * 0.5)
    g = b.build()
    prog = akgpy.fuse(g, config=BARE, target=WIDE)
    text = prog.explain()
    assert "fused members in the storage order" in text and "['i0', 'i1', 'i2', 'i3']" in text, text[:3000]
    assert coalesced in text, text[:3000]
    assert "T.vectorized" in prog.kernels[0].tir
    assert not check_program(g, prog)


def test_transpose_producer_computes_in_its_own_order():
    """out = transpose(f(a, b)) with the innermost dim moved: inlined, f would run in the
    transposed order (scalar, every operand gathered). The producer stays a statement, the
    band ends where the two statements' stride-1 dims clash; the producer is a vector loop along
    its contiguous dim, the transpose reads the intermediate in register tiles, and the
    intermediate still shrinks to one slab."""
    from tvm import s_tir
    b = GraphBuilder("transpose_math")
    x = b.input("x", (4, 64, 8, 48), "float16")
    y = b.input("y", (4, 64, 8, 48), "float16")
    b.output(b.transpose((x >= y).astype("float16") * x * 0.5, (0, 2, 3, 1)))
    g = b.build()
    prog = akgpy.fuse(g, config=default_config().replace(collapse_dims=False))
    text = prog.explain()
    assert "are stride-1 dims of different statements" in text, text[:3000]
    tir = prog.kernels[0].tir
    blocks = lambda t: len(re.findall(r'T\.sblock\("(?!root)', t))  # noqa: E731
    assert tir.count("T.vectorized") == 1 and blocks(tir) == 1 and "T.Shuffle" in tir, tir
    mod = prog.kernels[0]._mod
    for p in (s_tir.transform.PlanAndUpdateBufferAllocationLocation(), s_tir.transform.ConvertBlocksToOpaque(),
              s_tir.transform.CompactBufferAllocation()):
        mod = p(mod)
    assert re.findall(r"T.sblock_alloc_buffer\(\(([^)]*)\)", mod.script()) == ["1, 64, 1, 48"]
    assert not check_program(g, prog)
    # a transpose that keeps the innermost dim inlines its producer as before
    b = GraphBuilder("transpose_keep_last")
    x = b.input("x", (16, 16, 96), "float16")
    b.output(b.transpose(x * 2.0 + 1.0, (1, 0, 2)))
    g2 = b.build()
    prog2 = akgpy.fuse(g2, config=default_config().replace(collapse_dims=False))
    assert blocks(prog2.kernels[0].tir) == 1
    assert not check_program(g2, prog2)


@pytest.mark.parametrize("reshaped", [False, True])
def test_contraction_epilogue_runs_inside_the_tile_loop(reshaped):
    """bias + ReLU (also read through a reshape of the result, re-indexed first) are computed
    per register tile under the one parallel loop, not in a second pass over the result."""
    b = GraphBuilder("mm_epilogue")
    x = b.input("x", (64, 96))
    w = b.input("w", (96, 128))
    y = b.matmul(x, w)
    if reshaped:
        y = y.reshape(64, 8, 16)
        bias = b.input("bias", (8, 16))
    else:
        bias = b.input("bias", (128,))
    b.output(b.relu(y + bias))
    g = b.build()
    prog = akgpy.fuse(g)
    assert prog.kernels[0].tir.count("T.parallel") == 1, prog.kernels[0].tir
    assert not check_program(g, prog)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_contraction_tile_accumulates_in_registers(dtype):
    """The register tile accumulates in a buffer of its own over the whole reduction, in loops
    of one register's lanes, and is stored once: accumulated in the result itself, each step of
    the reduction loaded and stored the tile (bound by one store a cycle), and TVM had refused
    to vectorise the update (no init left in its block), so LLVM got scalar code to widen. The
    buffer is on the stack (a "local" one was a workspace allocation, a call, per tile)."""
    g = _matmul("mm_tile", (96, 64), (64, 48), dtype)
    prog = akgpy.fuse(g, config=default_config(), target=wide(32))
    tir = prog.kernels[0].tir
    update = tir[tir.index("for k"):]
    update = update[:update.index('T.sblock("', update.index('T.sblock("MatMul_0_update")') + 1)]
    assert "T.vectorized(8)" in update and "MatMul_0_global[v_i0, v_i1] = MatMul_0_global[v_i0, v_i1] +" in update, tir
    heap = workspace_allocations(prog)
    assert not [n for n in heap if n.startswith("MatMul_0_global")], heap
    assert not check_program(g, prog)


def test_register_tile_fits_the_vector_registers_for_float32_operands():
    """float32 operands: the most accumulators that fit with B's vectors and A's broadcast
    (16 registers to AVX2, 32 with AVX-512), then the most rows; float16 operands keep 8 x 2;
    the config's bounds hold. And in the machine code of a float32 GEMM's reduction loop no
    accumulator is reloaded from the stack (with 8 x 2 LLVM reloaded and stored 3 a step)."""
    from akgpy.schedule.plain import register_tile
    # the 3-vector bound of a 16-register target's default (an AVX-512 host's allows 4: test_gemm.py)
    cfg = default_config().replace(tile_j_vectors=3)
    assert register_tile(768, 768, 8, cfg, False, registers=16) == (6, 16)
    assert register_tile(2048, 3072, 8, cfg, False, registers=16) == (4, 24)
    assert register_tile(2048, 3072, 8, cfg, True, registers=16) == (8, 16)
    assert register_tile(2048, 3072, 16, cfg, False, registers=32) == (8, 48)
    assert register_tile(768, 768, 8, cfg.replace(tile_i=2, tile_j_vectors=1), False, registers=16) == (2, 8)
    assert register_tile(32, 26, 8, cfg, False, registers=16) == (8, 13)  # no whole vectors: largest divisors
    # A widened per tile: as many accumulators, the most columns (A is converted once per column tile)
    assert register_tile(1024, 32, 8, cfg, False, registers=16) == (8, 8)
    assert register_tile(1024, 32, 8, cfg, False, widened=True, registers=16) == (4, 16)
    # rows padded: 6 rows x 2 vectors for 128 rows (132 computed), not for 13 (18: too much waste)
    assert register_tile(128, 1024, 8, cfg, False, registers=16) == (8, 8)
    assert register_tile(128, 1024, 8, cfg, False, padded=True, registers=16) == (6, 16)
    assert register_tile(13, 1024, 8, cfg, False, padded=True, registers=16) == \
        register_tile(13, 1024, 8, cfg, False, registers=16)
    g = _matmul("mm_spill", (96, 256), (256, 96))
    prog = akgpy.fuse(g, config=cfg, target=wide(32))
    assert "MatMul_0: register tile 6 rows x 16 columns" in prog.explain()
    asm = prog.kernels[0]._executable.mod.inspect_source("s").splitlines()
    labels = {m.group(1): i for i, ln in enumerate(asm) if (m := re.match(r"^(\.?\w+):", ln))}
    loops = [asm[labels[m.group(1)]:i + 1] for i, ln in enumerate(asm)
             if (m := re.match(r"\s+j\w+\s+(\.?\w+)", ln)) and labels.get(m.group(1), i) < i]
    inner = min((body for body in loops if any("vfmadd" in ln for ln in body)), key=len)
    assert sum("vfmadd" in ln for ln in inner) >= 12 and not any("(%rsp)" in ln for ln in inner), "\n".join(inner)
    assert not check_program(g, prog)


@pytest.mark.parametrize("case", ["matmul", "transpose_a", "transpose_b", "batched", "conv"])
def test_float16_a_is_converted_per_tile_not_per_multiply_add(case):
    """A float16 A is converted to float32 inside each tile, for its rows and a chunk of the
    reduction small enough to stay on the stack, so the tile's multiply-adds read float32:
    read through a conversion, each of them waited on vcvtph2ps (one a cycle on Zen 3). The
    result is unchanged, and no workspace allocation (a call) runs per tile."""
    b = GraphBuilder("mm_widen")
    if case == "conv":
        x = b.input("x", (2, 10, 10, 64), "float16")
        w = b.input("w", (32, 3, 3, 64), "float16")
        b.output(b.relu(b.op("Conv2D", [x, w], (2, 8, 8, 32), "float16", stride=[1, 1, 1, 1])))
        stage, chunk = "Conv2D_0_widenX", None
    else:
        batch = (3,) if case == "batched" else ()
        x = b.input("x", (*batch, 512, 64) if case == "transpose_a" else (*batch, 64, 512), "float16")
        w = b.input("w", (*batch, 48, 512) if case == "transpose_b" else (*batch, 512, 48), "float16")
        b.output(b.matmul(x, w, transpose_a=case == "transpose_a", transpose_b=case == "transpose_b"))
        stage, chunk = "MatMul_0_widenA", "k_0 in range("
    g = b.build()
    prog = akgpy.fuse(g, config=default_config(), target=wide(32))
    tir = prog.kernels[0].tir
    assert "A converted to float32 per tile" in prog.explain()
    widen = tir.index(f'T.sblock("{stage}")')
    assert tir.index("T.parallel") < widen, tir  # inside the tile loop, not a pass before it
    update = tir[tir.index('_update")'):]
    update = update[:update.index("T.sblock(", 1)]
    assert f"{stage}[" in update and 'T.Cast("float32", x[' not in update, update
    if chunk:
        assert chunk in tir, tir
    heap = workspace_allocations(prog)
    assert not [n for n in heap if "widen" in n or n.endswith("_global")], heap  # per tile: stack
    assert not check_program(g, prog)
    assert not check_program(g, prog, seed=1)


@pytest.mark.parametrize("transpose_b,rows", [(False, 256), (True, 256), (False, 64)])
def test_long_rows_of_b_are_packed_into_panels(transpose_b, rows):
    """B with long rows, read by 128 rows of A or more, is laid out as [N / tile, K, tile]
    panels before the tiles run (a kernel input copied, a transposed B written so directly),
    and the result is unchanged (with a ReLU epilogue in the tile loop); 64 rows of A read B
    in place."""
    b = GraphBuilder("mm_panels")
    x = b.input("x", (rows, 96))
    w = b.input("w", (512, 96) if transpose_b else (96, 512))
    b.output(b.relu(b.matmul(x, w, transpose_b=transpose_b)))
    g = b.build()
    prog = akgpy.fuse(g, config=default_config(), target=wide(32))
    tir = prog.kernels[0].tir
    panels = re.findall(r"(\w+) = T.sblock_alloc_buffer\(\((\d+), 96, (\d+)\)", tir)
    if rows >= 128:
        assert len(panels) == 1 and int(panels[0][1]) * int(panels[0][2]) == 512, tir
        assert panels[0][0].endswith("_packB" if transpose_b else "_global"), panels
        assert "B packed into panels" in prog.explain()
    else:
        assert not panels, tir
    assert not check_program(g, prog)
    assert not check_program(g, prog, seed=1)


@pytest.mark.parametrize("case", ["float32", "float16", "transpose_a", "batched", "reshaped", "output"])
def test_rows_no_tile_divides_are_padded(case):
    """128 rows, which 6 does not divide: the contraction computes 132 (A copied per tile and
    chunk with zero rows, TVM's pad_einsum) so 6 x 2 accumulators fit, where the tiles that
    divide have 8; the padded result is cropped inside the tile loop, before the epilogue (also
    one read through a reshape), and every element matches."""
    dt = "float16" if case == "float16" else "float32"
    batch = (2,) if case == "batched" else ()
    b = GraphBuilder("mm_pad_rows")
    x = b.input("x", (*batch, 768, 128) if case == "transpose_a" else (*batch, 128, 768), dt)
    w = b.input("w", (*batch, 768, 256), dt)
    y = b.matmul(x, w, transpose_a=case == "transpose_a")
    if case == "reshaped":
        b.output(b.relu(y.reshape(128, 16, 16) + b.input("bias", (16, 16), dt)))
    elif case == "output":
        b.output(y)
    else:
        b.output(b.relu(y + b.input("bias", (256,), dt)))
    g = b.build()
    prog = akgpy.fuse(g, config=default_config(), target=wide(32))
    text = prog.explain()
    assert "register tile 6 rows x 16 columns" in text and "rows padded to a multiple of 6" in text, text[:1500]
    tir = prog.kernels[0].tir
    crop = tir.index('T.sblock("MatMul_0_pad")')
    assert tir.index('T.sblock("MatMul_0_update")') < crop and "T.parallel" not in tir[crop:], tir  # in the tile loop
    assert "T.where" in tir[crop:], tir  # the last tile's padding rows are not stored
    assert not check_program(g, prog)
    assert not check_program(g, prog, seed=1)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
@pytest.mark.parametrize("k", [4096, 1024])
def test_b_past_the_tlb_reach_is_packed_for_few_rows(k, dtype):
    """A B of 8 MiB or more (past the L2 TLB's reach: in place, each step of the reduction reads
    a row a page further on) that fits the last-level cache is packed into panels even for 32
    rows of A; a smaller one, or one past the LLC (the copy would triple the memory traffic), is
    read in place."""
    g = _matmul("mm_gemv", (32, k), (k, 1024), dtype)
    size = k * 1024 * (2 if dtype == "float16" else 4)
    for llc in (64 << 20, 8 << 20):
        prog = akgpy.fuse(g, config=default_config(), target=wide(32, llc_bytes=llc))
        assert ("B packed into panels" in prog.explain()) == (8 << 20 <= size <= llc), (size, llc)
    assert not check_program(g, prog)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_the_panel_copy_of_b_moves_vectors(dtype):
    """The copy of B into panels runs over each row of B in chunks of a tile's columns, vector
    loads and stores (it had copied one scalar element at a time, index arithmetic per element:
    for 128 rows of A as long as the tiles themselves)."""
    g = _matmul("mm_pack", (128, 768), (768, 3072), dtype)
    prog = akgpy.fuse(g, config=default_config(), target=wide(64))
    assert "B packed into panels" in prog.explain()
    lines = prog.kernels[0].tir.splitlines()
    at = [i for i, line in enumerate(lines) if 'T.sblock("w_global")' in line]
    assert len(at) == 1
    loop = re.search(r"T\.vectorized\((\d+)\)", lines[at[0] - 1])  # the loop right around the copy
    assert loop and int(loop.group(1)) >= 8, lines[at[0] - 1]
    assert not check_program(g, prog)


@pytest.mark.parametrize("schedule", ["poly", "plain"])
@pytest.mark.parametrize("head,tail", [([0, 0], [1, 0]), ([0, 0], [3, 5]), ([2, 0], [1, 0]), ([0, 1], [0, 0])])
def test_padding_a_contraction_writes_every_row_and_column(schedule, head, tail):
    """A PadAkg of a MatMul's result has points that read no element of it. Run inside the
    MatMul's tile loop (reverse_compute_at covers what each tile produced), its tail rows and
    columns were never written: found by the fuzzer as NaN where 0 was due (fuzz seed 45,
    [32, 80] @ [80, 26] padded to [33, 26]). An UnPadAkg beside it (fewer points than the
    tile: guarded) still runs under the tile loop."""
    b = GraphBuilder("mm_pad")
    x = b.input("x", (32, 80))
    w = b.input("w", (80, 26))
    y = b.matmul(x, w)
    shape = (32 + head[0] + tail[0], 26 + head[1] + tail[1])
    b.output(b.op("PadAkg", [y], shape, "float32", head=head, tail=tail, pad_val=0))
    b.output(b.op("UnPadAkg", [y], (15, 16), "float32", tail=[17, 10]))
    g = b.build()
    prog = akgpy.fuse(g, schedule=schedule)
    assert not check_program(g, prog)
    assert not check_program(g, prog, seed=1)


def _asm_counts(prog) -> tuple[int, int]:
    """(packed float instructions, lane inserts: the scalar loads of a gathered vector)."""
    asm = "\n".join(k._executable.mod.inspect_source("s") for k in prog.kernels)
    return (len(re.findall(r"^\s+v\w+ps\b", asm, re.M)),
            len(re.findall(r"^\s+v(?:insertps|pinsrd|pinsrq|movhps|movlps)\b", asm, re.M)))


def test_broadcast_tail_is_coalesced_and_read_through_flat_views():
    """A [..., 3, 2] tail with a [..., 3, 1] operand: the broadcast is no transpose (no tile);
    the tail becomes one linear vector loop, and the arrays it walks in order are read through
    flattened views (one vector load each) instead of mixed-radix digits of the iterator."""
    b = GraphBuilder("broadcast_tail")
    x = b.input("x", (64, 20, 3, 2))
    w = b.input("w", (64, 20, 3, 1))
    y = b.input("y", (64, 20, 3, 2))
    b.output(x * w + y)
    g = b.build()
    prog = akgpy.fuse(g)
    text = prog.explain()
    assert "coalesced into one of 120 iterations" in text and "tiling:" not in text, text[:2500]
    tir = prog.kernels[0].tir
    assert "x_flat" in tir and "y_flat" in tir and "T.vectorized" in tir, tir
    assert not check_program(g, prog)


@pytest.mark.parametrize("shape,axis", [((16, 52, 3, 2), (0, 1, 2, 3)), ((16, 16, 57, 57), (0, 2, 3))],
                         ids=["loss_sum", "channel_sum"])
def test_short_row_sum_runs_as_interleaved_vector_partials(shape, axis):
    """A sum whose contiguous chunks end in a dim too short or too odd for a vector loop
    ([.., 52, 3, 2] to a scalar; a BatchNorm channel sum over 19 x 57 blocks, 1083 terms):
    each chunk sums as 8 interleaved partials over its flat offset (the last 1083 mod 8 terms
    apart); isl proves the offset's digits affine, so the loads are vector loads of a
    flattened view."""
    b = GraphBuilder("short_row_sum")
    x = b.input("x", shape)
    y = b.input("y", shape)
    b.output(b.reduce_sum(x * y, axis=axis))
    g = b.build()
    prog = akgpy.fuse(g)
    text = prog.explain()
    assert re.search(r"vector: \S+_lanes_update: innermost member split by 8 lanes", text), text[:3000]
    tir = prog.kernels[0].tir
    assert "x_flat0[" in tir and "y_flat0[" in tir, tir
    if len(axis) == len(shape):  # no remainder: every load of the kernel is a packed one
        packed, inserts = _asm_counts(prog)
        assert inserts == 0 and packed > 0, (packed, inserts)
    else:
        assert "_tail" in tir
    assert not check_program(g, prog)


def test_odd_extent_vectorises_full_registers_and_a_remainder():
    """255 columns have no power-of-two divisor: the vector split takes whole registers anyway
    and isl's AST isolates the full blocks, so the remainder is a shorter vector loop of its
    own (f64 column sums: 31 x 8 + 7, not 51 x 5). The parallel mark stays on the full blocks'
    loop: the remainder's loops below it are the reduction's, never parallel."""
    b = GraphBuilder("odd_columns")
    x = b.input("x", (96, 40, 255))
    y = b.input("y", (96, 40, 255))
    b.output(b.reduce_sum(x, axis=(0, 1)))
    b.output(x * 2.0 + y)
    g = b.build()
    prog = akgpy.fuse(g, config=akgpy.ScheduleConfig(min_parallel_work=256))  # threads on the sum of partials too
    text = prog.explain()
    assert "split by 8 lanes (31 full, a remainder of 7)" in text, text[:4000]
    assert "split by 16 lanes (15 full, a remainder of 15)" in text, text[:4000]
    tir = "\n".join(k.tir for k in prog.kernels)
    assert "T.vectorized(7)" in tir and "T.vectorized(15)" in tir, tir
    ast = text[text.index("== isl AST"):text.index("== scheduled TIR")]
    marks = len(re.findall(r"// parallel\n\s*(?:\{\n\s*)?for", ast))
    assert tir.count("T.parallel(") == marks, (marks, tir)  # one parallel loop per mark
    for _ in range(3):  # a reduction loop run in parallel would race: repeat the check
        assert not check_program(g, prog)


def test_statements_sharing_only_inputs_fuse():
    """Outputs that share inputs but not values: RAW proximity alone leaves them in separate
    nests over all rows (each input read again); read-after-read proximity (input fusion) puts
    them in one loop nest. The knob turns it off, and both stay correct."""
    b = GraphBuilder("shared_inputs")
    x = b.input("x", (64, 256))
    y = b.input("y", (64, 256))
    b.output(x * y)
    b.output(x + y)
    b.output((x - y).astype("float16"))
    g = b.build()
    fused = akgpy.fuse(g)
    assert "3 statement(s) fused under 2 shared loop(s)" in fused.explain(), fused.explain()[:3000]
    apart = akgpy.fuse(g, config=akgpy.ScheduleConfig(input_fusion=False))
    assert "isl split the kernel into 3 parts" in apart.explain(), apart.explain()[:3000]
    assert fused.kernels[0].tir.count("T.parallel") == 1 and apart.kernels[0].tir.count("T.parallel") == 3
    assert not check_program(g, fused) and not check_program(g, apart)


def test_a_sum_and_a_gradient_of_one_input_share_the_batch_loop():
    """yolo's loss graphs (~3153): a loss sum (chunked, summed in lane partials, then its final
    scalar sum) and an elementwise gradient, both of x and z. isl ran the gradient last, after
    the final sum, so no merge could reach the sum's chunk loop, and their loops matched in no
    position ((chunk, batch) against (batch, ...)). The gradient moves up beside the sum (no
    dependence either way), and the member under which both read each element of x in one
    iteration is found in any order: one parallel batch loop runs both, the gradient reading
    what the sum just read."""
    b = GraphBuilder("loss_and_grad")
    shape = (8, 26, 26, 3, 2)
    x, z = b.input("x", shape), b.input("z", shape)
    w = b.input("w", shape[:-1] + (1,))
    b.output((w * (b.maximum(x, 0.0) - x * z + b.log(b.exp(-b.abs(x)) + 1.0))).sum())
    b.output((1.0 / (b.exp(-x) + 1.0) - z) * w)
    g = b.build()
    prog = akgpy.fuse(g, config=BARE, target=WIDE)
    text = prog.explain()
    part = re.search(r"parallel: part (\d+): member 0 \(i0 of S_Mul_\d+\)", text)
    assert part, text[:3000]
    assert re.search(rf"fusion: part {part[1]}\.\d+: .* of S_ReduceSum_\d+_lanes_init\)", text), text[:3000]
    assert not check_program(g, prog)


def test_long_rows_split_into_chunks_still_sum_in_vector_partials():
    """A row longer than one accumulation block (8192 > 2048) sums in chunks whose input index
    is chunk * 2048 + k; k still walks the input with stride 1, so the chunk's loop is split
    into vector partial sums (it had stayed a scalar loop of libm exps: 6.9 -> 1.4 ms here),
    64 of them since the summed value is vector math (4 float32 registers a step), one vector."""
    b = GraphBuilder("long_rows")
    x = b.input("x", (64, 8192))
    b.output(b.reduce_sum(b.exp(x * 0.01), axis=(1,)))
    g = b.build()
    prog = akgpy.fuse(g, config=BARE, target=WIDE)
    text = prog.explain()
    assert "rfactor): ReduceSum_2_partial" in text, text[:2000]
    assert re.search(r"vector: \S+_partial_rf_update: innermost member split by 64 lanes", text), text[:3000]
    assert not check_program(g, prog)


def test_long_rows_without_a_fitting_divisor_stay_whole_and_sum_in_lanes():
    """A row whose largest divisor up to the accumulation block is tiny (6 x 2053: chunks of 6)
    is not chunked: 2053 chunks of 6 terms each summed as a scalar chain of exps (a log-softmax
    over bert's 30522-word vocabulary, 6 x 5087: 122 -> 50 ms, kernel alone). Whole, the row
    sums in vector lanes with a short tail."""
    b = GraphBuilder("odd_long_rows")
    x = b.input("x", (64, 6 * 2053))
    b.output(b.reduce_sum(b.exp(x * 0.01), axis=(1,)))
    g = b.build()
    prog = akgpy.fuse(g, config=BARE, target=WIDE)
    tir = prog.kernels[0].tir
    assert "_partial" not in tir and "ReduceSum_2_lanes" in tir, prog.explain()[:3000]
    assert re.search(r"vector: \S+_lanes_update: innermost member split by \d+ lanes", prog.explain())
    assert not check_program(g, prog)


def test_a_float16_max_over_an_odd_row_takes_float32_lanes():
    """A float16 accumulator takes no interleaved lanes (each compare would convert). Over a row
    that no vector width divides that left a scalar chain: bert's log-softmax max over 30522
    words (with the sum above: 50 -> 28 ms). The max is exact in float32, so it accumulates
    there, and that row takes float32 lanes and a tail; -inf rows stay -inf."""
    b = GraphBuilder("odd_max")
    x = b.input("x", (16, 6 * 2053), "float16")
    b.output(x.max(axis=(1,), keepdims=True))
    g = b.build()
    prog = akgpy.fuse(g, config=BARE, target=WIDE)
    assert re.search(r"vector: \S*ReduceMax\S*_lanes_update: innermost member split by \d+ lanes", prog.explain())
    assert not check_program(g, prog)
    v = np.random.default_rng(1).standard_normal((16, 6 * 2053)).astype(np.float16)
    v[3] = -np.inf
    v[5, -1] = np.float16(60000.0)  # in the tail
    (got,) = prog(v)
    assert np.array_equal(got, v.max(axis=1, keepdims=True))


def test_a_float16_max_over_rows_a_vector_divides_has_float32_partials():
    """The row rfactor of a float16 max kept float16 partials: each compare converted its lanes
    back to float16, and the final reduction was a chain of 32 such steps per row (softmax over
    [16, 16, 128, 128] 3.05 -> 1.96 ms, kernel alone, A/B). The max is exact in float32, so its
    partials are float32; -inf rows stay -inf and the largest float16 survives."""
    b = GraphBuilder("row_max")
    x = b.input("x", (64, 128), "float16")
    b.output(x.max(axis=(1,), keepdims=True))
    g = b.build()
    prog = akgpy.fuse(g, config=BARE, target=WIDE)
    tir = prog.kernels[0].tir
    # float32 is TVMScript's default dtype, which it leaves out
    assert re.search(r'ReduceMax_\w*_rf = T\.sblock_alloc_buffer\(\(64, 1, 16\)\)', tir), tir[:2000]
    assert not check_program(g, prog)
    v = np.random.default_rng(2).standard_normal((64, 128)).astype(np.float16)
    v[3] = -np.inf
    v[5, 77] = np.float16(65504.0)
    (got,) = prog(v)
    assert np.array_equal(got, v.max(axis=1, keepdims=True))


@pytest.mark.parametrize("dtype,lanes", [("int32", True), ("int64", True), ("int8", False), ("uint8", False)])
def test_integer_sums_take_lanes_only_with_wide_accumulators(dtype, lanes):
    """int8 sums accumulate in int8: 8 lanes of one byte ran slower than the scalar chain."""
    b = GraphBuilder("int_rows")
    b.output(b.reduce_sum(b.input("x", (64, 999), dtype), axis=(1,)))
    g = b.build()
    prog = akgpy.fuse(g, config=BARE, target=WIDE)
    assert ("_lanes = T.sblock_alloc_buffer" in prog.kernels[0].tir) is lanes
    assert not check_program(g, prog)


@pytest.mark.parametrize("shape", [(32, 256, 14, 14), (16, 64, 28, 28), (64, 32, 7, 7)])
def test_a_channel_sum_over_nchw_sums_each_image_in_lanes(shape):
    """A BatchNorm channel sum whose images are too small for one accumulation block had
    blocks of several images (not contiguous: channels lie between) and summed them as one
    scalar chain: [32, 256, 14, 14] 0.99 -> 0.21 ms with one image's H x W per block, summed in
    interleaved lanes (corpus ReduceSum_Inplac ~2355 0.34 -> 0.10 ms, ~8065 0.46 -> 0.14)."""
    b = GraphBuilder("bn_sums")
    x = b.input("x", shape)
    b.output(b.reduce_sum(x, axis=(0, 2, 3)))
    b.output(b.reduce_sum(x * x, axis=(0, 2, 3)))
    g = b.build()
    prog = akgpy.fuse(g, config=BARE, target=WIDE)
    text = prog.explain()
    assert len(re.findall(r"vector: \S+_lanes_update: innermost member split by \d+ lanes", text)) == 2, text[:3000]
    assert re.search(rf"_lanes = T.sblock_alloc_buffer\(\({shape[0]}, {shape[1]}, \d+\)", prog.kernels[0].tir)
    assert not check_program(g, prog)


@pytest.mark.parametrize("shape,axis,dtype", [((512, 999), (1,), "float16"), ((64, 1001), (1,), "float32"),
                                               ((999,), None, "float32"), ((8, 16, 13, 13), (2, 3), "float32")])
def test_a_sum_whose_row_no_vector_divides_sums_in_interleaved_lanes(shape, axis, dtype):
    """A sum of one accumulation block or less (no chunks) whose row no vector width divides
    (999 float16) was one scalar chain of float64 adds: [8192, 999] took 12.5 ms. It sums in
    interleaved lanes over the flat block plus a tail, like a chunked sum (mobilenet's ReduceMean
    ~7537 9.57 -> 0.86 ms)."""
    b = GraphBuilder("odd_rows")
    x = b.input("x", shape, dtype)
    b.output(b.reduce_sum(x * 2.0, axis=axis))
    g = b.build()
    prog = akgpy.fuse(g, config=BARE, target=WIDE)
    text = prog.explain()
    assert re.search(r"vector: \S+_lanes_update: innermost member split by \d+ lanes", text), text[:3000]
    assert "_tail = T.sblock_alloc_buffer" in prog.kernels[0].tir
    assert not check_program(g, prog)


@pytest.mark.parametrize("shape,axis,partials", [((256, 1000), (1,), 8), ((1000, 1000), None, 8),
                                                 ((64, 1000), (1,), 8), ((64, 1024), (1,), 16)])
def test_a_row_that_does_not_fill_whole_registers_reduces_in_fewer_partials(shape, axis, partials):
    """A float32 max over rows of 1000 (8 x 125) had no rfactor (16 lanes do not divide it) and
    ran as one scalar chain: the partials halve until they divide the row (corpus
    ReduceSum_Inplac ~3827 1.14 -> 0.32 ms, Cast_Add_ReduceMax ~0380 2.92 -> 1.43)."""
    b = GraphBuilder("row_max")
    x = b.input("x", shape)
    b.output(b.reduce_max(x * 2.0, axis=axis))
    g = b.build()
    prog = akgpy.fuse(g, config=BARE, target=WIDE)
    assert re.search(r"rfactor\): ReduceMax_1\b", prog.explain()), prog.explain()[:2000]
    assert re.search(rf"_rf = T.sblock_alloc_buffer\(\([^)]*\b{partials},?\)", prog.kernels[0].tir), \
        prog.kernels[0].tir[:1500]
    assert not check_program(g, prog)


@pytest.mark.parametrize("row,partials", [(240, 48), (256, 64), (192, 64), (80, 16), (32, 16), (48, 16),
                                          (64, 32), (128, 64)])
def test_row_sums_of_vector_math_step_over_several_registers(row, partials):
    """The partial sums of an exp/log row sum cover up to ScheduleConfig.math_registers float32
    registers per step, the widest the row length allows (whole registers, two steps a row at
    least: 80 = 5 x 16 and 48 keep one, 64 takes two), and they run as one vector, so the math of
    every register interleaves (softplus sum, rows of 256: 59 -> 43 cycles per 16 elements with a
    loop over the registers, 41 as one vector); math_registers=1 keeps one register."""
    b = GraphBuilder("softplus_rows")
    x, z = b.input("x", (64, row)), b.input("z", (64, row))
    b.output(b.reduce_sum(b.maximum(x, 0.0) - x * z + b.log(b.exp(-b.abs(x)) + 1.0), axis=(1,)))
    g = b.build()
    for regs, want in [(4, partials), (1, 16)]:
        prog = akgpy.fuse(g, config=BARE.replace(math_registers=regs), target=WIDE)
        assert re.search(rf"_rf = T.sblock_alloc_buffer\(\(64, {want}\), \"float64\"\)", prog.kernels[0].tir), \
            prog.kernels[0].tir[:1500]
        assert f"_rf_update: innermost member split by {want} lanes" in prog.explain(), prog.explain()[:3000]
        assert not check_program(g, prog)


@pytest.mark.parametrize("shape,regs", [((512, 256), 4), ((16, 768), 1), ((64, 40, 40), 1)])
def test_elementwise_vector_math_runs_several_registers_per_op(shape, regs):
    """An elementwise statement of exp/log math with enough elements (WIDE_MATH_INSTANCES) runs
    math_registers registers per vector op, so LLVM emits each op for every register side by
    side and the chains of several registers interleave ([4096, 256] softplus 0.35 -> 0.25 ms);
    a small one (12288 elements) keeps one register, its wider body cost more than it saved;
    an extent no four registers divide (40 x 40 = 100 x 16) keeps one; math_registers=1 is off."""
    b = GraphBuilder("softplus_ew")
    x, z = b.input("x", shape), b.input("z", shape)
    b.output(b.maximum(x, 0.0) - x * z + b.log(b.exp(-b.abs(x)) + 1.0))
    g = b.build()
    prog = akgpy.fuse(g, config=BARE, target=WIDE)
    wide = "split by 64 lanes (4 registers per op: a latency-bound chain of vector math" in prog.explain()
    assert wide == (regs == 4), prog.explain()[:3000]
    assert ("T.vectorized(64)" in prog.kernels[0].tir) == (regs == 4)
    assert not check_program(g, prog)
    off = akgpy.fuse(g, config=BARE.replace(math_registers=1), target=WIDE)
    assert "registers per op" not in off.explain() and "T.vectorized(64)" not in off.kernels[0].tir
    assert not check_program(g, off)


@pytest.mark.parametrize("shape,regs,partials,axis", [((64, 3, 80), 8, 80, None), ((32, 2, 128), 8, 128, None),
                                                      ((32, 3, 160), 8, 80, None), ((64, 3, 80), 4, 16, None),
                                                      ((64, 3, 80), 5, 80, None), ((64, 3, 80), 8, 80, (1, 2)),
                                                      ((64, 3, 80), 8, 16, (2,))])
def test_math_sums_over_several_axes_take_more_registers_of_partials(shape, regs, partials, axis):
    """Partials that also sum over other reduced axes (a full sum) add up their lanes once, not
    once per row, so they cover up to sum_math_registers float32 registers a step and may take a
    whole row: a yolo-style loss sum over [.., 3, 80] runs 80 partials, one vector of 5 registers
    (yolo ~2380 11.5 -> 7.8 ms), not 16; rows of 128 take 8 registers. A row sum (one reduced
    axis) keeps math_registers and two steps a row (test above); two rows or more per result do
    not ([64, 3, 80] over its last two axes)."""
    b = GraphBuilder("loss_total")
    x, z = b.input("x", shape), b.input("z", shape)
    w = b.input("w", shape[:-1] + (1,))
    b.output((w * (b.maximum(x, 0.0) - x * z + b.log(b.exp(-b.abs(x)) + 1.0))).sum(axis=axis))
    g = b.build()
    prog = akgpy.fuse(g, config=BARE.replace(sum_math_registers=regs), target=WIDE)
    tir = prog.kernels[0].tir
    assert re.search(rf"_rf = T.sblock_alloc_buffer\(\([^)]*, {partials}\), \"float64\"\)", tir), tir[:1500]
    assert f"_rf_update: innermost member split by {partials} lanes" in prog.explain(), prog.explain()[:3000]
    assert not check_program(g, prog)


@pytest.mark.parametrize("shape", [(1024, 240), (245760,), (4, 64, 96)])
def test_a_full_sum_to_a_scalar_sums_in_vector_partials(shape):
    """A sum over every axis without keep_dims has a 0-d result, a block with no loop. TVM's
    rfactor fails an internal check on any block of such a function, so the sum stayed a scalar
    loop of scalar exp/log (690 cycles per 16 elements of this softplus, against 43 with
    keep_dims): the 0-d blocks get a unit loop first (prepass._loop_scalars)."""
    b = GraphBuilder("softplus_total")
    x, z = b.input("x", shape), b.input("z", shape)
    b.output((b.maximum(x, 0.0) - x * z + b.log(b.exp(-b.abs(x)) + 1.0)).sum())
    g = b.build()
    assert g.tensors[g.outputs[0]].shape == ()
    prog = akgpy.fuse(g, config=BARE, target=WIDE)
    text = prog.explain()
    assert re.search(r"rfactor\): \S+_partial\b", text), text[:2000]
    assert re.search(r"vector: \S+_partial_rf_update: innermost member split by \d+ lanes", text), text[:3000]
    assert not check_program(g, prog)


def _compacted_allocations(prog) -> dict[str, tuple[int, ...]]:
    """Each local buffer's shape once TVM has placed it inside the loops that use it and cut it
    to what one iteration of them touches (what the lowered kernel allocates)."""
    from tvm import s_tir
    mod = prog.kernels[0]._mod
    for p in (s_tir.transform.PlanAndUpdateBufferAllocationLocation(), s_tir.transform.ConvertBlocksToOpaque(),
              s_tir.transform.CompactBufferAllocation()):
        mod = p(mod)
    return {name: tuple(int(x) for x in shape.split(",") if x.strip())
            for name, shape in re.findall(r"(\w+) = T.sblock_alloc_buffer\(\(([^)]*)\)", mod.script())}


@pytest.mark.parametrize("scales", [(26,), (13,), (26, 13), (52, 26, 13)])
def test_a_chunked_loss_sum_keeps_each_chunks_lane_partials_in_registers(scales):
    """yolo's loss sums (~2380): a full sum of vector math over [batch, hw, hw, 3, 80], chunked
    into one partial per (batch, row, 13 columns) and each partial split into 80 float64 lane
    partials. isl answered with the chunk partials and the final sum in sequence under each
    independent sum (read as no band: every statement ran its own loop nest; now read part by
    part, `tree._top_groups`), or with the final sum folded into the chunk loops as a serial
    band (its first member not every statement's dim: the same; now split, `parts.split_serial`).
    Either way the lane partials of every chunk went through memory (~2380: 13.8 MB of float64
    written and read back). Now each chunk's 80 lanes are one chunk's buffer, under parallel
    chunk loops in storage order."""
    b = GraphBuilder("loss_sums")
    for n, hw in enumerate(scales):
        shape = (8, hw, hw, 3, 80)
        x, z = b.input(f"x{n}", shape), b.input(f"z{n}", shape)
        w = b.input(f"w{n}", shape[:-1] + (1,))
        b.output((w * (b.maximum(x, 0.0) - x * z + b.log(b.exp(-b.abs(x)) + 1.0))).sum())
    g = b.build()
    prog = akgpy.fuse(g, config=BARE, target=WIDE)
    rf = {n: s for n, s in _compacted_allocations(prog).items() if n.endswith("_partial_rf")}
    assert len(rf) == len(scales) and all(s == (1, 1, 1, 80) for s in rf.values()), rf
    text = prog.explain()
    assert len(re.findall(r"4 statement\(s\) fused under 3 shared loop\(s\) \(i\d, i\d, i\d of S_\w+_partial_rf_init",
                          text)) == len(scales), text[:3000]
    # the chunk loops in storage order, batch outermost and parallel (isl's order was (i1, i2, i0)
    # for some; the lane sum, which reads no argument, had vetoed the reorder)
    assert len(re.findall(r"parallel: part \d+: member 0 \(i0 of S_\w+_partial_rf_init\)", text)) == len(scales)
    assert prog.kernels[0].tir.count("T.parallel(8)") == len(scales)
    assert not check_program(g, prog)


def test_a_split_serial_band_schedules_each_statement_once():
    """A band isl made serial in its first member is cut in two (`parts.split_serial`): the
    statements that carry nothing along it, then the rest. isl's filters name whole statement
    spaces, and the rest was the filter minus the first half's domains: a statement of the first
    half stayed in it over the complement of its domain, empty, and a later pass scheduled it
    there too (coalesced, 18 lanes) while the first half kept its three loops. The loop nest
    came from the first, the loop bindings from the second: a float16 cast of 36 elements
    wrote indices up to 57 and left 30 unwritten (found by the hypothesis test, seed 1959)."""
    b = GraphBuilder("split_serial_once")
    x = b.input("x0", (4, 3, 3))
    top = b.reduce_max(x + (-1.25), [2, 1, 0], False).reshape((1,))
    b.output(x.astype("float16"), top)
    g = b.build()
    prog = akgpy.fuse(g, schedule="poly")
    text = prog.explain()
    split = [ln for ln in text.splitlines() if "serial in its first member" in ln and "_tail_init" in ln]
    assert len(split) == 1 and "S_Cast" not in split[0], text[:3000]  # the cast is not in the rest
    after = text.split("== schedule tree (after passes)")[1].split("== isl AST")[0]
    assert len(re.findall(r"filter \{ S_Cast_\d+\[", after)) == 1, after
    assert not check_program(g, prog)


@pytest.mark.parametrize("shape,perm,dtype,cast,tile", [
    ((16, 9, 512), (0, 2, 1), "float16", None, "32 x 9"),  # rows of 9: each tile's output is one block
    ((4, 3, 3, 256), (0, 3, 1, 2), "float16", None, "32 x 9"),  # yolo's [.., 3, 3, 512] pattern
    ((4, 64, 96), (0, 2, 1), "float32", None, "16 x 16"),  # long rows both ways: 16 stores of 16 lanes
    # 30: no power-of-two part; whole rows (2 registers each) leave room for 3 rows, half-rows
    # of 15 for 9: the tile's output one block of 9 rows (tiles.SHORT_SIDE)
    ((6, 3, 3, 30), (0, 3, 1, 2), "float32", None, "15 x 9"),
    ((2, 3, 64, 64), (0, 2, 3, 1), "float32", "float16", "32 x 3"),  # vgg: cast + NCHW -> NHWC
    ((4, 64, 96, 1), (0, 2, 1, 3), "float32", None, "16 x 16"),  # a trailing unit dim
    # 85 rows: 16 (the last tile, 5 rows, apart), not 3 of them
    ((2, 3, 85, 26, 26), (0, 3, 4, 1, 2), "float16", None, "26 x 16"),
])
def test_transposes_run_in_registers(shape, perm, dtype, cast, tile):
    """A transposing copy is tiled W (read along its rows) x R (written rows) and each tile is
    transposed in registers: R vector loads, shuffles, vector stores (schedule/transpose.py)."""
    b = GraphBuilder("transpose_registers")
    x = b.input("x", shape, dtype)
    b.output(b.transpose(b.cast(x, cast) if cast else x, perm))
    g = b.build()
    prog = akgpy.fuse(g, schedule="poly", config=SHAPED, target=WIDE)
    text = prog.explain()
    assert f"each tile ({tile}) is transposed in registers" in text, text[:3000]
    assert "codegen:" not in text and "T.Shuffle" in prog.kernels[0].tir
    assert not check_program(g, prog)


@pytest.mark.parametrize("shape,perm,dtype,tile,groups", [
    # 9 rows = 8 + 1; the output is one block, so a 32-lane store spans two registers of the 8
    ((16, 9, 512), (0, 2, 1), "float16", "32 x 9", 3),
    ((2, 13, 13, 255), (0, 3, 1, 2), "float16", "17 x 13", 3),  # 13 = 8 + 4 + 1, 17 lanes padded to 32
    ((2, 3, 85, 26, 26), (0, 3, 4, 1, 2), "float16", "26 x 16", 2),  # the last tile's 5 rows: 4 + 1
    ((4, 64, 96), (0, 2, 1), "float32", "16 x 16", 1),
])
def test_register_transpose_interleaves_rows_before_storing(shape, perm, dtype, tile, groups):
    """From 4 rows up a tile's rows go through rounds of two-register interleaves, so each
    store shuffles a register or two per power-of-two group of rows, not all R rows (which LLVM
    scalarises for odd tiles: yolo ~1373's 32 x 9 tiles 5.2 -> 4.0 ms)."""
    b = GraphBuilder("transpose_network")
    x = b.input("x", shape, dtype)
    b.output(b.transpose(x, perm))
    g = b.build()
    prog = akgpy.fuse(g, schedule="poly", config=SHAPED, target=WIDE)
    assert f"each tile ({tile}) is transposed in registers" in prog.explain()
    tir = prog.kernels[0].tir
    rounds = re.findall(r"trn\w+: T\.let\[[\w.]+\] = T\.Shuffle\(\[(\w+), (\w+)\]", tir)
    assert rounds, tir[:3000]
    stores = [len(m.split(", ")) for m in re.findall(r"^\s*Transpose\w*\[.*\] = T\.Shuffle\(\[([^\]]*)\]", tir, re.M)]
    assert stores and max(stores) <= groups, (stores, tir[:3000])
    if groups == 1:  # rows go in bit-reversed, so they come out in order: stores take lanes as they are
        masks = re.findall(r"^\s*Transpose\w*\[.*\] = T\.Shuffle\(\[\w+\], \[([^\]]*)\]", tir, re.M)
        assert masks and all(m == ", ".join(map(str, range(16))) for m in masks), masks[:3]
    assert not check_program(g, prog)


@pytest.mark.parametrize("dtype,narrow,tile,vector", [
    ("float16", 16, "8 x 9", "float16x8"),  # AVX2's default: no 16-bit permute across register halves
    ("float16", 0, "16 x 9", "float16x16"),  # 0: the vector width
    ("float32", 16, "8 x 9", "float32x8"),  # 32-bit elements keep whole registers
])
def test_narrow_elements_transpose_in_narrower_registers(dtype, narrow, tile, vector):
    b = GraphBuilder("narrow_transpose")
    x = b.input("x", (4, 3, 3, 256), dtype)
    b.output(b.transpose(x, (0, 3, 1, 2)))
    g = b.build()
    prog = akgpy.fuse(g, config=akgpy.ScheduleConfig(narrow_transpose_bytes=narrow),
                      target=wide(32))
    assert f"each tile ({tile}) is transposed in registers" in prog.explain()
    assert f"T.let[T.{vector}]" in prog.kernels[0].tir
    assert not check_program(g, prog)


@pytest.mark.parametrize("mcpu,want", [("znver5", 64), ("skylake-avx512", 16), ("sapphirerapids", 16),
                                       ("znver3", 16)])
def test_default_narrow_transpose_width_follows_the_cpu(mcpu, want):
    """The narrow-transpose width is a per-CPU default (measured: 16 on a Xeon, 64 on Zen 5);
    it changes the transposed tile, and the kernel stays correct either way."""
    cfg = default_config({"kind": "llvm", "mcpu": mcpu})
    assert cfg.narrow_transpose_bytes == want
    b = GraphBuilder("narrow_transpose_cpu")
    x = b.input("x", (4, 3, 3, 256), "float16")
    b.output(b.transpose(x, (0, 3, 1, 2)))
    g = b.build()
    prog = akgpy.fuse(g, config=cfg, target=wide(64))
    assert f"each tile ({want // 2} x 9) is transposed in registers" in prog.explain()
    assert not check_program(g, prog)


def test_only_copies_transpose_in_registers():
    """A broadcast-and-divide written in transposed order is math, not a copy: it keeps its
    vector loops (the register transpose moves loads, it computes nothing). The quotient does
    not vary along its innermost dim, so it is inlined into the transpose, whose loop order reads
    x contiguously: resnet's average-pool gradient x[n, c] / 49 -> NHWC (~9849), kept as its own
    statement, was written whole with 7-lane vectors and gathered back (1.74 ms, plain 0.11)."""
    b = GraphBuilder("broadcast_divide_transpose")
    x = b.input("x", (4, 256), "float16")
    y = b.broadcast_to(b.reshape(x, (4, 256, 1, 1)), (4, 256, 7, 7)) / 49.0
    b.output(b.transpose(y, (0, 2, 3, 1)))
    g = b.build()
    prog = akgpy.fuse(g, schedule="poly")
    text, tir = prog.explain(), prog.kernels[0].tir
    assert "codegen:" not in text and "T.vectorized" in tir
    assert not re.search(r'sblock\("RealDiv\w*"\)', tir) and "T.vectorized(7)" not in tir, tir[:3000]
    assert not check_program(g, prog)


def test_a_value_computed_from_its_innermost_index_is_not_a_broadcast():
    """OneHot along its last axis compares idx[n, i] with the axis index j itself: no load is
    indexed by j, yet the value varies along it, so it stays a statement of its own (vector
    loops in its own order) ahead of the transpose, as any math feeding one does."""
    b = GraphBuilder("onehot_transpose")
    idx = b.input("idx", (4, 64), "int32")
    on, off = b.input("on", (1,), "float32"), b.input("off", (1,), "float32")
    b.output(b.transpose(b.op("OneHot", [idx, on, off], (4, 64, 32), "float32", depth=32, axis=-1), (0, 2, 1)))
    g = b.build()
    prog = akgpy.fuse(g, schedule="poly")
    assert re.search(r'sblock\("OneHot\w*"\)', prog.kernels[0].tir), prog.kernels[0].tir[:3000]
    assert not check_program(g, prog)


def _yolo_transpose_of_math():
    b = GraphBuilder("transpose_math_registers")
    x, y = b.input("x", (2, 64, 13, 26), "float16"), b.input("y", (2, 64, 13, 26), "float16")
    m = (x >= y).astype("float16") * x
    b.output(x - m)
    b.output(b.transpose(m * 0.1, (0, 2, 3, 1)))
    return b.build()


def test_transpose_of_a_computed_value_reads_the_intermediate_in_registers():
    """yolo's `(x >= y) * x * 0.1` then NCHW -> NHWC: the producer runs in its own order into an
    intermediate, the transpose statement reads that intermediate tile by tile in registers,
    and the other output, computed in the same loops as the producer, shares its loop nest."""
    g = _yolo_transpose_of_math()
    prog = akgpy.fuse(g, schedule="poly")
    text = prog.explain()
    assert "transposed in registers" in text and "codegen:" not in text, text[:3000]
    assert re.search(r"S_\w+ runs in the loops of S_\w+", text), text[:3000]
    assert not check_program(g, prog)


def test_math_cast_then_transpose_keeps_the_math_vectorised():
    """yolo's gradient AddN -> Cast -> Transpose: the cast between the sum and the transpose
    moves nothing, so the sum stays a statement of its own (vector loads along its stride-1
    dim) and the transpose reads it tile by tile in registers; inlined through the cast, all
    four operands were gathered element by element (~7823228: 31 -> 16 ms)."""
    b = GraphBuilder("addn_cast_transpose")
    xs = [b.input(f"x{i}", (2, 13, 13, 3, 85), "float32") for i in range(4)]
    b.output(b.transpose(b.addn(*xs).astype("float16"), (0, 3, 4, 1, 2)))
    g = b.build()
    prog = akgpy.fuse(g, schedule="poly")
    text, tir = prog.explain(), prog.kernels[0].tir
    assert "transposed in registers" in text and "codegen:" not in text, text[:3000]
    assert re.search(r'sblock\("AddN\w*"\)', tir) and "T.vectorized" in tir and "T.Shuffle" in tir, tir[:3000]
    assert not check_program(g, prog)


def test_a_transpose_producer_with_a_short_row_coalesces_its_loops():
    """Rows of 26 float16 below a fusion cut: LLVM splits a 26-lane vector into 16 + 8 + 2 with
    scalar moves (yolo ~4991: 75% of its time in that loop). The producer's contiguous dims
    run as one linear loop of full 32-lane vectors instead; the other output shares it."""
    g = _yolo_transpose_of_math()
    prog = akgpy.fuse(g, schedule="poly", config=SHAPED, target=WIDE)
    text = prog.explain()
    assert re.search(r"order: S_\w+: members 0\.\.2 coalesced into one of 21632 iterations", text), text[:3000]
    assert re.search(r"S_\w+ runs in the loops of S_\w+", text), text[:3000]
    assert "T.vectorized(32)" in prog.kernels[0].tir and "T.vectorized(26)" not in prog.kernels[0].tir
    # the producers store whole 32-lane vectors (16: the transpose's rows of 13 tiles)
    assert set(re.findall(r"store <(\d+) x half>", prog.kernels[0].source)) <= {"32", "16"}
    assert not check_program(g, prog)


@pytest.mark.parametrize("shape,perm,dtype,tile,how", [
    ((16, 9, 512), (0, 2, 1), "float16", (32, 9), "read"),  # rows of 9 to write: vectors along the read
    ((4, 64, 96), (0, 2, 1), "float32", (16, 16), "written"),  # contiguous stores, gathered loads
    ((6, 3, 3, 30), (0, 3, 1, 2), "float32", (30, 3), None),  # tiles of 30: no whole register, scalar
])
def test_config_tiled_transposes_vectorise_their_tiles(shape, perm, dtype, tile, how):
    """With tiles from the config (a tuner's choice) the register transpose steps aside; the
    tile's point loops are vectorised along the written rows, or along the read rows when the
    written ones are short."""
    b = GraphBuilder("transpose_vector")
    x = b.input("x", shape, dtype)
    b.output(b.transpose(x, perm))
    g = b.build()
    prog = akgpy.fuse(g, schedule="poly", config=akgpy.ScheduleConfig(tile=tile))
    text = prog.explain()
    assert "tiling:" in text and "in registers" not in text
    if how is None:
        assert "T.vectorized" not in prog.kernels[0].tir and "tile member" not in text
    else:
        assert f"({how} with stride 1) innermost" in text, text[:3000]
        assert "T.vectorized" in prog.kernels[0].tir
    assert not check_program(g, prog)


def _gelu_tanh(dtype):
    b = GraphBuilder(f"gelu_{dtype}")
    x = b.input("x", (32, 512), dtype)
    inner = (x + x * x * x * 0.044715) * 0.7978845608
    b.output(x * (b.tanh(inner) + 1.0) * 0.5)
    return b.build()


def test_float16_rounding_chains_get_wider_vectors():
    """Every float16 op rounds (a conversion pair with long latency): an elementwise statement
    with many of them runs 4 registers per vector op, so more independent lanes are in flight;
    the knob turns it off, and float32 math (no roundings) keeps one register."""
    g = _gelu_tanh("float16")
    wide = akgpy.fuse(g, schedule="poly", config=BARE, target=WIDE)
    assert "split by 128 lanes (4 registers per op" in wide.explain()
    assert "T.vectorized(128)" in wide.kernels[0].tir
    assert not check_program(g, wide)
    narrow = akgpy.fuse(g, schedule="poly", config=BARE.replace(chain_registers=1), target=WIDE)
    assert "registers per op" not in narrow.explain() and "T.vectorized(32)" in narrow.kernels[0].tir
    assert not check_program(g, narrow)
    assert "registers per op" not in akgpy.fuse(_gelu_tanh("float32"), schedule="poly", config=BARE, target=WIDE).explain()


@pytest.mark.parametrize("schedule", ["poly", "plain"])
def test_a_float16_value_widened_and_narrowed_again_costs_no_conversion(schedule):
    """AddN of float16 tensors rounds each partial sum, but its first term went float16 ->
    float32 -> float16 (an exact round trip, two conversions per element): lowering drops the
    pair, so the kernel rounds once per add."""
    b = GraphBuilder("addn_f16")
    xs = [b.input(f"x{i}", (64, 256), "float16") for i in range(4)]
    b.output(b.addn(*xs))
    g = b.build()
    prog = akgpy.fuse(g, schedule=schedule)
    tir = prog.kernels[0].tir
    assert not re.search(r'T\.Cast\("float16", T\.Cast\("float32", x0\[[^\]]*\]\)\)', tir), tir
    assert tir.count('T.Cast("float16"') == 3, tir
    assert not check_program(g, prog)


@pytest.mark.parametrize("shape,kept", [((512, 1000), True), ((4096, 21), True), ((32, 1001), False),
                                        ((64, 26, 26, 3, 2), False)])
def test_softmax_computes_its_exp_once(shape, kept):
    """Softmax's exp feeds the row sum and the division: inlined into both, it ran twice per
    element. A math block used twice or more, once by a reduction along its row, stays a
    statement of its own ([8192, 1000] 3.76 -> 2.46 ms); not for rows shorter than a register
    (yolo's [.., 3, 2] tails vectorise only coalesced with their consumers) nor small kernels."""
    b = GraphBuilder("softmax_once")
    x = b.input("x", shape)
    e = b.exp(x - x.max(axis=-1, keepdims=True))
    b.output(e / e.sum(axis=-1, keepdims=True))
    g = b.build()
    prog = akgpy.fuse(g, config=BARE, target=WIDE)
    tir = prog.kernels[0].tir
    assert ('T.sblock("Exp_2")' in tir) == kept, tir[:3000]
    if kept:  # the division reads the exp back: none of its lets (te/fastmath.py) in there
        assert "fm_1" not in tir[tir.index('T.sblock("RealDiv_4")'):]
    assert not check_program(g, prog)


@pytest.mark.parametrize("shape,sibling,kept", [((128, 768), "beside", True), ((16, 768), "beside", False),
                                                ((128, 8), "beside", False), ((128, 768), "after", False)])
def test_a_row_sums_float16_operand_shared_with_siblings_is_computed_once(shape, sibling, kept):
    """bert's layernorm backward sums a float16 product p = (a + b) * w * x along the row while
    other outputs need (a + b) * w: inlined, the sum recomputed the shared chain, three
    roundings, in a loop of its own. Kept, p is computed in the row loop beside its siblings
    and the sum reads it back from cache (bert ~3896 1.15-1.31x, ~8077 1.00-1.14x faster). Not
    for small kernels, rows shorter than a register, nor where the sharer needs the sum
    (softmax backward: it runs after the sum, and p kept would only be stored and read)."""
    b = GraphBuilder("shared_f16_chain")
    a, c, x = (b.input(n, shape, "float16") for n in ("a", "c", "x"))
    w = b.input("w", shape[-1:], "float16")
    m = (a + c) * w
    p = m * x
    total = b.cast(p, "float32").sum(axis=-1, keepdims=True)
    b.output(b.cast(m, "float32") if sibling == "beside" else b.cast(m, "float32") * total)
    b.output(total)
    g = b.build()
    prog = akgpy.fuse(g, config=BARE, target=WIDE)
    inlined = next(line for line in prog.explain().splitlines() if line.startswith("inlined before scheduling"))
    assert ("Mul_2" not in inlined) == kept, inlined
    if kept:  # the sum reads p back: no float16 rounding left in its update
        tir = prog.kernels[0].tir
        update = tir[re.search(r'T\.sblock\("ReduceSum_\d+_rf_update"\)', tir).start():]
        assert 'T.Cast("float16"' not in update[:update.index("T.sblock", 10)], update[:2000]
    assert not check_program(g, prog)


@pytest.mark.parametrize("rows,bias,kept", [(64, 4096, True), (4, 8192, False), (64, 512, False), (8192, 4, False)])
def test_a_float16_bias_cast_from_float32_is_rounded_once_per_column(rows, bias, kept):
    """bert's GELU ~8645 adds a float32 bias cast to float16 to a [2048, 3072] matrix: inlined,
    the cast (a conversion pair) ran once per element, 2048 times per bias value. A broadcast
    operand whose computation costs more than a load and whose readers use each value 8 times
    or more is computed once, and the fused loop over the matrix reads it. Given to isl, the
    bias statement joined the matrix's band with a constant for the rows it lacks, which cost
    the bias add and the GELU chain their shared loop: it runs first, outside isl's search
    (poly/scheduler.broadcasts), on one thread. Not for few rows (each value used 4 times),
    a small kernel (32768 elements: the extra loop and buffer cost more) nor a bias narrower
    than a register."""
    b = GraphBuilder("bias_cast")
    x = b.input("x", (rows, bias), "float16")
    w = b.input("w", (bias,), "float32")
    y = x + b.cast(w, "float16")
    b.output(y)
    b.output(y * (b.tanh(y * 0.79785) + 1.0) * 0.5)
    g = b.build()
    prog = akgpy.fuse(g, config=BARE, target=WIDE)
    explain = prog.explain()
    inlined = next(line for line in explain.splitlines() if line.startswith("inlined before scheduling"))
    assert ("Cast_0" not in inlined) == kept, inlined
    if kept:
        ast = explain.split("== isl AST")[1]
        # the bias first, on its own; then one parallel loop nest running the add and the GELU
        assert ast.index("S_Cast_0(") < ast.index("// parallel"), ast  # and not itself parallel
        assert ast.count("// parallel") == 1 and re.search(r"S_Add_1\([^)]*\);\s*S_Mul_\d+\(", ast), ast
        tir = prog.kernels[0].tir
        fused = tir[tir.index('T.sblock("Add_1")'):]
        assert 'T.Cast("float16", w[' not in fused and "Cast_0[" in fused, fused[:1500]
    assert not check_program(g, prog)


@pytest.mark.parametrize("shape,dtype,lanes", [((64, 999), "float32", True), ((16, 37), "int32", True),
                                               ((65, 49), "float32", True), ((64, 999), "float16", True),
                                               ((128, 24), "float32", False)])
def test_a_max_over_rows_no_vector_divides_runs_in_interleaved_lanes(shape, dtype, lanes):
    """A max over rows of 999 (no lane count divides them, so no row rfactor) was one scalar
    chain of compares, 2.1 ms for [8192, 999] and most of a softmax over 999 classes: it now
    runs in interleaved lanes plus a tail, as sums do (0.37 ms; softmax 3.8 -> 2.0 ms). A
    float16 max does so in float32 lanes (exact; in float16 each compare would convert its
    lanes): [8192, 999] 5.9 -> 0.40 ms, [1824, 30522] 24.8 -> 3.2 ms, kernel alone, A/B. Not
    for a block under 32 terms."""
    b = GraphBuilder("odd_max")
    x = b.input("x", shape, dtype)
    b.output(x.max(axis=-1, keepdims=True) if shape != (65, 49) else x.max())
    g = b.build()
    prog = akgpy.fuse(g, config=BARE, target=WIDE)
    assert ("_lanes = T.sblock_alloc_buffer" in prog.kernels[0].tir) == lanes, prog.kernels[0].tir[:2000]
    assert not check_program(g, prog)


@pytest.mark.parametrize("schedule", ["poly", "plain"])
@pytest.mark.parametrize("kind", ["sum", "max"])
@pytest.mark.parametrize("shape,axis", [((64, 100), (1,)), ((64, 1024), (0,)), ((8, 3), (0, 1)), ((64, 999), (1,))])
def test_reductions_of_bools_are_any(schedule, kind, shape, axis):
    """A ReduceSum of bools is a bool (the graph validator keeps the dtype): numpy's count, then
    != 0; a ReduceMax of bools is "any" too. The sum failed an LLVM check and the max found no
    minimum value for bool, both CompileErrors; they now count in int32 / int8."""
    b = GraphBuilder("bool_reduce")
    x = b.input("x", shape, "bool")
    b.output(b.reduce_sum(x, axis=axis) if kind == "sum" else b.reduce_max(x, axis=axis))
    g = b.build()
    prog = akgpy.fuse(g, schedule=schedule)
    assert not check_program(g, prog)
    a = np.zeros(shape, np.bool_)
    a.flat[::7] = True  # some rows all False, counts of 2 and more elsewhere (a low bit alone is wrong)
    np.testing.assert_array_equal(prog(a)[0], a.any(axis=axis))


def test_sums_of_vector_math_keep_wider_float64_partials():
    """A row sum of exp/log math accumulates 64 float64 partials (4 float32 registers of math, one
    vector), so the float32 math runs at full register width and several chains are in flight; a
    plain cast-sum keeps one register of 8."""
    def row_sum(kind):
        b = GraphBuilder(f"row_sum_{kind}")
        x = b.input("x", (64, 1024), "float32" if kind == "math" else "float16")
        y = b.log(b.exp(-b.abs(x)) + 1.0) if kind == "math" else b.cast(x, "float32")
        b.output(y.sum(axis=1))
        return b.build()
    for kind, lanes in [("math", 64), ("cast", 8)]:
        g = row_sum(kind)
        prog = akgpy.fuse(g, schedule="poly", config=BARE, target=WIDE)
        assert re.search(rf"vector: S_\w+_rf_update: innermost member split by {lanes} lanes", prog.explain()), kind
        assert not check_program(g, prog)


@pytest.mark.parametrize("shape,unused", [((2, 2, 2), 0), ((2, 2, 3), 5)])
def test_small_full_reductions_beside_coalesced_outputs(shape, unused):
    """Found by the property test. A max over 2x2x2 to one value: coalescing its dependences
    made isl's scheduler fail ("unable to carry dependences"). Beside five coalesced outputs, a
    degenerate vector-split loop read the iterator c1 of an earlier, unrelated loop ("cannot
    find variable c1" in LLVM): loop iterators are visible only inside their loops."""
    b = GraphBuilder("small_full_reduction")
    x = b.input("x0", shape)
    for _ in range(unused):
        b.output(-x)
    b.output(b.reshape(x.max(axis=tuple(range(len(shape)))), (1,)))
    g = b.build()
    prog = akgpy.fuse(g, schedule="poly")
    assert "schedule path: poly/isl-ast" in prog.explain()
    assert not check_program(g, prog)


def test_isl_parts_sharing_their_rows_run_under_one_loop():
    """bert's layernorm backward: isl returns the elementwise outputs and the row sum as two
    parts, each over all 2048 rows; merged, each row is read once for both."""
    path = next((CORPUS / "networks" / "bert_base").glob("*_15797801861397653896.info"))
    g = akgpy.load_composite(path)
    prog = akgpy.fuse(g, config=BARE, target=WIDE)
    text = prog.kernels[0].explain()
    assert "top-level parts share their outer loops" in text and "merged into 1" in text
    ast = text[text.index("== isl AST"):text.index("== scheduled TIR")]
    assert ast.count("// parallel") == 1 and ast.count("for (int c0 = 0; c0 <= 2047") == 1
    assert re.search(r"S_Sub_0\(c0, \d+ \* c1 \+ c2\)", ast), ast  # the elementwise part keeps its fused vector loop
    assert not check_program(g, prog)


def test_dependent_parts_share_every_loop_they_both_have():
    """bert ~4253: the [16, 128, 768] elementwise outputs and the sum of each 768-row are two isl
    parts; both run batch and row loops, and the row sum depends on its producers only within a
    row, so both loops are shared: the sum reads the row just written, not a row 128 rows back."""
    path = next((CORPUS / "networks" / "bert_base").glob("*_10656283499187844253.info"))
    g = akgpy.load_composite(path)
    prog = akgpy.fuse(g, config=BARE, target=WIDE)
    text = prog.kernels[0].explain()
    assert "merged into 1, each part's statements run per iteration of them: 2 loop(s)" in text
    ast = text[text.index("== isl AST"):text.index("== scheduled TIR")]
    assert ast.count("for (int c1 = 0; c1 <= 127") == 1  # one row loop around both parts
    assert not check_program(g, prog)


def test_independent_parts_share_only_their_outer_loop():
    """Parts that only read the same input (yolo ~1373's seven transposes) keep one shared loop:
    two made them 1.4x slower (10.6 against 7.6 ms)."""
    path = next((CORPUS / "networks" / "yolov3_darknet53").glob("*_4455637876939621373.info"))
    text = akgpy.fuse(akgpy.load_composite(path), config=BARE, target=WIDE).kernels[0].explain()
    got = re.search(r"merged into \d+, each part's statements run per iteration of them: (.*)", text)
    assert got and set(re.findall(r"(\d+) loop\(s\)", got.group(1))) == {"1"}, got


def test_parts_merged_over_every_dim_become_one_vectorised_band():
    """deep_fm ~5606: isl returns its [8000]-row elementwise statements as two parts that share
    every loop; as nested single loops each statement was a scalar loop, as one fused band
    they vectorise (0.134 -> 0.078 ms, kernel alone)."""
    path = next((CORPUS / "networks" / "deep_fm").glob("*_16800194281393845606.info"))
    g = akgpy.load_composite(path)
    prog = akgpy.fuse(g, config=BARE, target=WIDE)
    text = prog.kernels[0].explain()
    assert "merged into 1" in text and re.search(r"fusion: part 0: \d+ statement\(s\) fused under 1 shared loop", text)
    assert "vector: part 0: innermost member split by" in text
    tir = text[text.index("== scheduled TIR"):]
    assert "T.vectorized(" in tir
    assert not check_program(g, prog)


def test_merged_parts_still_coalesce_short_trailing_dims():
    """yolo's batchnorm graph: five [.., 3]-tailed elementwise parts merged under one row loop
    keep their vector loops: the trailing dims coalesce down to the part's first loop, since
    the shared loop outside already runs in parallel (they had become scalar loops)."""
    path = next((CORPUS / "networks" / "yolov3_darknet53").glob("*_17202220326050881751.info"))
    text = akgpy.fuse(akgpy.load_composite(path), config=BARE, target=WIDE).kernels[0].explain()
    merged = [ln for ln in text.splitlines() if re.match(r"(vector|order): part \d+\.\d+:", ln)]
    assert merged and not any("scalar" in ln for ln in merged), "\n".join(merged)
    assert any("members 0..2 coalesced" in ln for ln in merged)


def test_channel_sum_walks_its_input_in_storage_order():
    """A BatchNorm channel sum over NCHW: the interleaved partials' chunks (n, c, row chunk)
    run n, c, chunk, the input's storage order, so consecutive blocks are adjacent in memory
    (isl gave n, chunk, c: each block a plane away from the next). stride1_innermost=False
    keeps isl's order; both match the reference."""
    b = GraphBuilder("channel_sum")
    x = b.input("x", (8, 16, 57, 57))
    b.output(b.reduce_sum(x, axis=(0, 2, 3)))
    g = b.build()
    prog = akgpy.fuse(g, config=BARE, target=WIDE)
    text = prog.explain()
    hit = re.search(r"order: (\S+_lanes_update): outer parallel dims by their stride in its largest array: "
                    r"\['i0', 'i2', 'i1', 'kf'\]", text)
    assert hit, text[:4000]
    ast = text[text.index("== isl AST"):text.index("== scheduled TIR")]
    assert re.search(rf"{hit.group(1)}\(c0, c2, c1, c\d, c3\)", ast), ast
    off = akgpy.fuse(g, config=akgpy.ScheduleConfig(stride1_innermost=False))
    assert "outer parallel dims" not in off.explain()
    assert not check_program(g, prog) and not check_program(g, off)


def test_fused_reduction_rows_walk_the_input_in_storage_order():
    """yolo's loss ~3153: the sum's partials and their init fuse under isl's (chunk, batch)
    band. The band is permutable, so its members run in the order of their strides in the
    summed input, batch outermost: each chunk follows the previous one in memory, and the 32
    batch rows (not 13 chunks) are what the threads share. stride1_innermost=False keeps isl's
    order; both match the reference."""
    path = next((CORPUS / "networks" / "yolov3_darknet53").glob("*_12524199302917293153.info"))
    g = akgpy.load_composite(path)
    prog = akgpy.fuse(g, config=BARE, target=WIDE)
    text = prog.kernels[0].explain()
    # batch outermost: reordered in the sum's own band, or (since the gradient shares the sum's
    # batch loop, parts.merge_parts) the shared loop, with the chunks inside it
    assert re.search(r"order: part \d+: fused members by their stride in \S+_lanes_update's largest read "
                     r"\(the band is permutable\): \['i0', 'i1'\]", text) or \
        re.search(r"fusion: part \d+\.\d+: 2 statement\(s\) fused under 1 shared loop\(s\) \(i1 of \S+_lanes_init\)",
                  text), text[:3000]
    assert re.search(r"parallel: part \d+: member 0 \(i0 of \S+_lanes_init\)", text), text[:3000]
    off = akgpy.fuse(g, config=akgpy.ScheduleConfig(stride1_innermost=False))
    assert "fused members by their stride" not in off.explain()
    assert not check_program(g, prog) and not check_program(g, off)


def _flatten_between_computed(rows=16, cols=13):
    """-x flattened and negated again, the unflattened -x an output too: two computed statements
    tied by S[i, j] -> T[13i + j]. isl's default search ran past any bound on this."""
    b = GraphBuilder("flatten")
    x = b.input("x", (rows, cols))
    y = -x
    b.output(-b.reshape(y, (rows * cols,)), y)
    return b.build()


def test_flatten_between_computed_statements_stays_on_the_poly_path():
    """A Reshape between computed statements ties dims (coefficient 13): isl's full search here
    runs for minutes without counting operations, so it runs alone under the mixed-dims safety
    net, which fires; the search without shifts answers and the passes take it from there: no
    plain fallback, and the kernel says it is not deterministic (so no cache keeps it)."""
    g = _flatten_between_computed()
    prog = akgpy.fuse(g, schedule="poly")
    text = prog.explain()
    assert text.splitlines()[1].startswith("schedule path: poly/isl-ast"), text[:1500]
    path = prog.kernels[0].schedule_path
    assert not path.deterministic and "mixed-dims" in path.guard, path
    assert not check_program(g, prog)


def test_intermediate_made_and_used_in_one_vector_loop_is_not_one_element():
    """exp(-|x|) is kept as a statement before the transpose (its math would otherwise run in
    the transposed order); on [1, 1, 4] both share one vector loop. TVM allocated the
    intermediate inside that loop, one element, and gave all 4 lanes the same value; the loop
    is now distributed, so the intermediate lives outside it (a random-graph test found this)."""
    b = GraphBuilder("unit_transpose")
    x = b.input("x", (1, 1, 4))
    b.output(b.transpose(b.exp(-b.abs(x)), (0, 2, 1)))
    g = b.build()
    prog = akgpy.fuse(g, schedule="poly")
    assert "vector: loop c1 distributed into 2 loops" in prog.explain()
    assert not check_program(g, prog)


def test_independent_parts_do_not_share_a_stride1_loop():
    """resnet ~2248: seven independent elementwise parts ([1024, 256, 1, 1] and [256, 1024, 1, 1]
    writes, no input in common). isl's band for each starts with the dim each walks with stride
    1; sharing that as the merged outer loop left every statement a scalar inner loop across
    rows (7.7 ms, 13x the plain schedule). Independent parts share no stride-1 loop, so each
    keeps its vector loop; the dependent merge of the layernorm tests still shares rows."""
    path = next(CORPUS.rglob("*_14906309916422562248.info"))
    g = akgpy.load_composite(path)
    prog = akgpy.fuse(g, schedule="poly")
    tir = prog.kernels[0].tir
    assert tir.count("T.vectorized") >= 7, tir[:3000]
    assert not check_program(g, prog)


@pytest.mark.parametrize("channels,tile", [(255, "26 x 16"), (256, "26 x 16")])
def test_transpose_tile_width_leaves_room_for_rows(channels, tile):
    """yolo's [N, 255, 52, 52] float16 -> NHWC: 52-element rows take two registers each, so
    only 5 of 255's divisors fit, and every output row was a 10-byte store. Half-rows of 26
    leave registers for 16 rows (255's last tile of 15 apart). With 256 channels 52 x 8 and
    26 x 16 tie on size; the one with more rows stores longer pieces."""
    b = GraphBuilder("transpose_short_side")
    x = b.input("x", (2, channels, 52, 52), "float16")
    b.output(b.transpose(x, (0, 2, 3, 1)))
    g = b.build()
    prog = akgpy.fuse(g, config=SHAPED, target=WIDE)
    assert f"each tile ({tile}) is transposed in registers" in prog.explain()
    assert not check_program(g, prog)


@pytest.mark.parametrize("rows,full,last", [(85, 16, 5), (255, 16, 15), (40, 16, 8), (17, 16, 1), (64, 16, 0)])
def test_transpose_rows_without_a_fitting_divisor_take_a_partial_last_tile(rows, full, last):
    """Rows along a dim with no divisor that fills the registers (85 = 5 x 17, 17 prime) tile by
    the power of two that does; isl's AST runs the last tile apart (an isolated band), with its
    own constant extent, so it too is a register transpose unless it is a single row (17 rows
    had no register transpose at all). 64 rows divide: no tile apart. NCHW -> NHWC float16
    ~9919 (85 rows) 52 x 5 -> 52 x 8: 0.41x."""
    b = GraphBuilder("transpose_partial_rows")
    x = b.input("x", (2, rows, 26, 26), "float16")
    b.output(b.transpose(x, (0, 2, 3, 1)))
    g = b.build()
    prog = akgpy.fuse(g, config=SHAPED, target=WIDE)
    text = prog.explain()
    assert f"each tile (26 x {full}) is transposed in registers" in text, text[:3000]
    assert bool(re.search(rf"the last tile along \w+ \({last} rows\) runs apart", text)) == bool(last), text[:3000]
    tir = prog.kernels[0].tir
    # lanes of each vector store: `out[..] = T.Shuffle([registers], [lanes])`
    pieces = {len(m.split(",")) for m in re.findall(r"^\s*Transpose\w*\[.*\] = T\.Shuffle\(\[[^\]]*\], \[([^\]]*)\]", tir, re.M)}
    assert pieces == {full} | ({last} if last > 1 else set()), (pieces, tir[:3000])
    assert not check_program(g, prog)


def _compacted_allocs(prog) -> list[str]:
    from tvm import s_tir
    mod = prog.kernels[0]._mod
    for p in (s_tir.transform.PlanAndUpdateBufferAllocationLocation(), s_tir.transform.ConvertBlocksToOpaque(),
              s_tir.transform.CompactBufferAllocation()):
        mod = p(mod)
    return re.findall(r"T.sblock_alloc_buffer\(\(([^)]*)\)", mod.script())


def _transposed_product(shape):
    """yolo's `(x >= y) * x` beside `x - that` and `that * 0.1` NCHW -> NHWC, float16."""
    b = GraphBuilder("transposed_product")
    x, y = b.input("x", shape, "float16"), b.input("y", shape, "float16")
    m = (x >= y).astype("float16") * x
    b.output(x - m)
    b.output(b.transpose(m * 0.1, (0, 2, 3, 1)))
    return b.build()


def test_a_transpose_and_its_producer_share_the_transposed_dim_in_blocks():
    """yolo ~4991's pattern: the producer computes along w, the transpose writes along c. The
    shared loops end above c, so one batch's whole [c, h, w] intermediate was written before the
    transpose read it (1.4 MB there, past L2). Blocked in c, the intermediate of a block fits
    half of L2 and is read back from it; the block is a multiple of the transpose's tile rows."""
    g = _transposed_product((2, 256, 26, 26))
    prog = akgpy.fuse(g, config=SHAPED, target={**WIDE, "l2_bytes": 256 << 10})
    text = prog.explain()
    got = re.search(r"the transposed dim \(i1 of \w+, 256\) shared in blocks of (\d+)", text)
    assert got, text[:3000]
    block = int(got.group(1))
    rows = int(re.search(r"each tile \(\d+ x (\d+)\) is transposed in registers", text).group(1))
    assert 256 % block == 0 and block % rows == 0 and block * 26 * 26 * 2 <= 128 << 10, (block, rows)
    assert _compacted_allocs(prog) == [f"1, {block}, 26, 26"]
    assert not check_program(g, prog)
    # an L2 too small for one block's intermediate: the whole plane, as before
    whole = akgpy.fuse(g, config=SHAPED, target={**WIDE, "l2_bytes": 4 << 10})
    assert "shared in blocks of" not in whole.explain() and _compacted_allocs(whole) == ["1, 256, 26, 26"]
    assert whole.kernels[0].tir != prog.kernels[0].tir
    assert not check_program(g, whole)


@pytest.mark.parametrize("shape,perm,dtype,vector_bytes,narrow,cached_tile,streamed_tile", [
    ((4, 256, 26, 26), (0, 2, 3, 1), "float16", 64, 0, "26 x 16", "13 x 32"),
    ((128, 3, 3, 512), (0, 3, 1, 2), "float16", 64, 16, "8 x 9", "32 x 9"),
    ((4, 3, 256, 256), (0, 2, 3, 1), "float16", 32, 0, "16 x 3", "64 x 3"),
    ((4, 3, 256, 256), (0, 2, 3, 1), "float32", 32, 0, "16 x 3", "64 x 3"),  # cast to float16 first
    ((4, 256, 32, 32), (0, 2, 3, 1), "float16", 32, 16, "8 x 16", "4 x 32")])
def test_a_streamed_transpose_stores_whole_cache_lines(shape, perm, dtype, vector_bytes, narrow, cached_tile,
                                                       streamed_tile):
    """Streamed (non-temporal) stores must fill whole lines, and a line read before a partial
    write costs a read: where the output streams, a tile writes whole lines. NCHW -> NHWC:
    32 float16 rows from 13-element reads instead of the 26 x 16 it takes when the output stays
    cached. [.., 9, 512] -> [.., 512, 9] with narrow (16-byte) registers: 8 x 9 tiles write
    144-byte blocks, so the streamed tile takes full-width registers (32 x 9: nine lines). 3
    channels with 32-byte registers: a 16 x 3 tile writes 96 float16 (a line and a half), so it
    widens along the read rows until its block is whole lines (64 x 3: six). 256 channels with
    16-byte registers: 8 x 16 stores 32 bytes of each output row and no wider tile fits the
    registers with whole lines; it narrows to 4 x 32 (yolo's [32, 256, 52, 52] transposes:
    0.67-0.94x, kernel alone)."""
    b = GraphBuilder("transpose_lines")
    x = b.input("x", shape, dtype)  # over 1 MiB: outputs of 1 MiB or more stream
    b.output(b.transpose(b.cast(x, "float16") if dtype != "float16" else x, perm))
    g = b.build()
    cfg = SHAPED.replace(narrow_transpose_bytes=narrow)
    cached = akgpy.fuse(g, config=cfg, target=wide(vector_bytes))
    assert f"each tile ({cached_tile}) is transposed in registers" in cached.explain()
    streamed = akgpy.fuse(g, config=cfg.replace(stream_min_bytes=1 << 10), target=wide(vector_bytes))
    text = streamed.explain()
    assert f"each tile ({streamed_tile}) is transposed in registers" in text, text[:3000]
    assert "streaming stores: candidates" in text
    if llvm_is_x86():
        assert streamed.kernels[0].source.count("!nontemporal") > 0
    assert not check_program(g, cached) and not check_program(g, streamed)


def llvm_is_x86() -> bool:
    return akgpy.resolve_target(None).is_x86


def test_transpose_blocks_with_a_batch_of_one_run_one_parallel_loop():
    """With a batch of one isl keeps no shared loop but the block one, which then takes the
    thread pool; the statements' own loops below it stay serial (a nested parallel loop is an
    LLVM codegen error in TVM's thread pool)."""
    g = _transposed_product((1, 256, 13, 13))
    prog = akgpy.fuse(g, config=BARE, target=WIDE)
    text = prog.explain()
    assert re.search(r"parallel: part 0: member 0 \(floor\(\(i1\) / \d+\)", text), text[:3000]
    assert prog.kernels[0].tir.count("T.parallel") == 1
    assert not check_program(g, prog)




def _loss_graph(share: bool):
    """yolo's loss pattern (`~5495`): t = log(x / a) - y summed as w * t * t over every element,
    and an elementwise output from the same t (or, not sharing, from exp(x))."""
    b = GraphBuilder("loss_rider")
    x, a = b.input("x", (2, 16, 16, 3, 2)), b.input("a", (3, 2))
    y, w, c = b.input("y", (2, 16, 16, 3, 2)), b.input("w", (2, 16, 16, 3, 1)), b.input("c", (2, 16, 16, 3, 2))
    t = b.log(x / a) - y
    b.output(b.neg((t if share else b.exp(x)) * c), (w * (t * t)).sum())
    return b.build()


def test_an_output_sharing_a_sums_math_runs_in_its_loops():
    """The elementwise output rides in the sum's partial loops (poly/riders.py): one loop body,
    its flat offset the sum's mixed radix (chunk, step, lane), and LLVM computes the shared
    log(x / a) - y once: half the divisions of the two-loop code (`share_math=False`), which
    computed it in both."""
    g = _loss_graph(share=True)
    prog = akgpy.fuse(g, schedule="poly")
    text = prog.explain()
    assert re.search(r"S_Neg_\d+ runs in the loops of S_ReduceSum_\d+_lanes_update: both evaluate Log_\d+", text), text[:4000]
    ast = text.split("== isl AST")[1].split("streaming stores")[0]
    calls = [ln.strip().split("(")[0] for ln in ast.splitlines() if ln.strip().startswith("S_")]
    k = next(q for q, n in enumerate(calls) if n.startswith("S_Neg_"))
    assert {calls[k - 1], calls[k + 1]} & {n for n in calls if n.endswith("_lanes_update")}, ast  # one loop body
    assert not check_program(g, prog)

    def divisions(p) -> int:
        return len(re.findall(r"\sv?divps\s", "".join(k._executable.mod.inspect_source("asm") for k in p.kernels)))
    apart = akgpy.fuse(g, schedule="poly", config=default_config().replace(share_math=False))
    assert "both evaluate" not in apart.explain() and not check_program(g, apart)
    assert 0 < divisions(prog) < divisions(apart), (divisions(prog), divisions(apart))


def test_an_output_with_math_of_its_own_keeps_its_loop():
    """Riding pays through the shared math alone: the same loops over the same rows with
    different math measured 1.01-1.04x (yolo ~3153), so such an output keeps its own loop."""
    g = _loss_graph(share=False)
    prog = akgpy.fuse(g, schedule="poly")
    assert "both evaluate" not in prog.explain()
    assert not check_program(g, prog)


def _loss_sigmoid_graph(n: int, h: int, w: int):
    """yolo's `~3153` pattern: weighted softplus terms summed whole, the sigmoid gradient an output."""
    b = GraphBuilder("loss_sigmoid")
    x, z, wt = b.input("x", (n, h, w, 3, 2)), b.input("z", (n, h, w, 3, 2)), b.input("w", (n, h, w, 3, 1))
    loss = wt * (b.log(b.exp(-b.abs(x)) + 1.0) + b.maximum(x, 0.0) - x * z)
    b.output(loss.sum(), 1.0 / (b.exp(-x) + 1.0) - z)
    return b.build()


@pytest.mark.parametrize("n,h,w", [(1, 8, 8), (3, 26, 26), (4, 7, 9), (5, 16, 16), (2, 32, 32), (6, 13, 26)])
@pytest.mark.parametrize("pattern", ["shared_log", "sigmoid"])
def test_loss_graphs_match_the_reference_with_or_without_riders(pattern, n, h, w):
    """Riders (and the share_exp rewrite kept only with one) over shapes whose sums cover their
    rows exactly, leave tails, or have one batch row: every result matches the reference."""
    if pattern == "shared_log":
        b = GraphBuilder("loss_log")
        x, a = b.input("x", (n, h, w, 3, 2)), b.input("a", (3, 2))
        y, wt, c = b.input("y", (n, h, w, 3, 2)), b.input("w", (n, h, w, 3, 1)), b.input("c", (n, h, w, 3, 2))
        t = b.log(x / a) - y
        b.output(b.neg(t * c), (wt * (t * t)).sum())
        g = b.build()
    else:
        g = _loss_sigmoid_graph(n, h, w)
    for cfg in (default_config(), default_config().replace(inexact_math=True)):  # share_exp only with the latter
        assert not check_program(g, akgpy.fuse(g, schedule="poly", config=cfg))
