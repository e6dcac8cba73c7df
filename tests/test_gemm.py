"""The contraction template (schedule/plain.py `_contraction`): generated MatMul kernels against
the reference over shapes the register tile does not divide, batched and transposed operands,
fused epilogues and float16 inputs, under the default tile and under every tile and packing
choice the tuner's space offers; and the space listing those choices."""
from __future__ import annotations

import pytest

import akgpy
from akgpy import GraphBuilder
from akgpy.schedule.config import ScheduleConfig
from akgpy.schedule.plain import PAD_MAX_VECTORS, PAD_MAX_WASTE, register_tile
from akgpy.targets import default_config
from akgpy.targets.cpu.defaults import WIDE_TILE_VECTORS
from akgpy.testing import check_program
from akgpy.tune.space import space


def _matmul(m, k, n, *, batch=(), ta=False, tb=False, dtype="float32", epilogue=None, name="gemm"):
    b = GraphBuilder(name)
    a = b.input("a", (*batch, k, m) if ta else (*batch, m, k), dtype)
    w = b.input("w", (*batch, n, k) if tb else (*batch, k, n), dtype)
    c = b.matmul(a, w, transpose_a=ta, transpose_b=tb, dst_type="float32" if dtype == "float16" else None)
    if epilogue == "bias_relu":
        c = b.relu(c + b.input("bias", (n,), c.dtype))
    elif epilogue == "bias_gelu":  # erf GELU, as BERT's FFN computes it
        x = c + b.input("bias", (n,), c.dtype)
        c = x * 0.5 * (b.erf(x * 0.7071067811865476) + 1.0)
    b.output(c)
    return b.build()


def _ok(g, **options):
    prog = akgpy.fuse(g, **options)
    assert check_program(g, prog) == []
    return prog


# rows and columns around the tile sizes (8 rows, 16-lane vectors): 1, odd, prime, one past a
# multiple, and a reduction that is no multiple of anything
SHAPES = [(1, 1, 1), (7, 13, 5), (33, 65, 47), (17, 300, 64), (130, 96, 50), (64, 96, 130), (96, 77, 48),
          (129, 33, 80)]


@pytest.mark.parametrize("m,k,n", SHAPES, ids=lambda v: str(v))
@pytest.mark.parametrize("schedule", ["poly", "plain"])
def test_shapes_the_tile_does_not_divide(m, k, n, schedule):
    _ok(_matmul(m, k, n), schedule=schedule)


@pytest.mark.parametrize("ta,tb", [(False, True), (True, False), (True, True)])
def test_transposed_operands(ta, tb):
    _ok(_matmul(40, 72, 96, ta=ta, tb=tb))
    _ok(_matmul(19, 37, 53, ta=ta, tb=tb))


@pytest.mark.parametrize("batch,m,k,n,tb", [((3,), 17, 40, 33, False), ((12,), 128, 64, 128, False),
                                            ((12,), 128, 128, 64, False), ((2, 3), 24, 16, 48, True)])
def test_batched_and_attention_shaped(batch, m, k, n, tb):
    _ok(_matmul(m, k, n, batch=batch, tb=tb))


@pytest.mark.parametrize("epilogue", ["bias_relu", "bias_gelu"])
def test_epilogues_stay_fused_and_correct(epilogue):
    prog = _ok(_matmul(96, 64, 160, epilogue=epilogue))
    assert len(prog.kernels) == 1
    # the epilogue runs on each tile under the contraction's one parallel tile loop, not as a
    # second parallel pass over the whole result
    tir = prog.kernels[0].tir
    assert "poly/template" in tir and tir.count("T.parallel") == 1, tir
    _ok(_matmul(50, 31, 70, epilogue=epilogue))


def test_float16_inputs_are_computed_in_float32():
    _ok(_matmul(64, 96, 128, dtype="float16"))
    _ok(_matmul(33, 40, 48, dtype="float16", tb=True))


def test_every_listed_register_tile_and_packing_is_correct():
    """Each register tile and packing value the space lists for a product large enough to pack
    B compiles and matches the reference; `legal` agrees that they hold."""
    g = _matmul(256, 96, 384, name="gemm_space")
    sp = space(g)
    dims = {d.name: d for d in sp.dimensions}
    key = next(iter(sp.contractions))
    tiles = dims[f"{key}/register_tile"].values
    assert len(tiles) >= 3, tiles
    packs = dims[f"{key}/pack"].values  # None: the template's own choice (here: packed)
    assert False in packs and len(packs) >= 2, packs
    tirs = set()
    for tile in [t for t in tiles if t is not None][:4]:
        for pack in packs:
            point = {f"{key}/register_tile": tile, f"{key}/pack": pack}
            ok, why = sp.legal(point)
            assert ok, (point, why)
            prog = _ok(g, config=sp.config(point))
            lanes = sp.contractions[key][2]
            assert f"register tile {tile[0]} rows x {tile[1] * lanes} columns (tuned)" in prog.explain()
            tirs.add(prog.kernels[0].tir)
    assert len(tirs) == 4 * len(packs)  # each choice its own loop nest


def test_space_lists_the_tile_and_packing_of_batched_and_epilogue_products():
    for g in (_matmul(64, 32, 96, batch=(4,), name="bmm"), _matmul(128, 64, 256, epilogue="bias_gelu", name="ffn")):
        sp = space(g)
        names = {d.name.rsplit("/", 1)[1] for d in sp.dimensions if d.name.startswith("contract:")}
        assert "register_tile" in names, [d.name for d in sp.dimensions]


@pytest.mark.parametrize("rows,cols,registers,want", [
    # AVX-512 (32 registers, tiles of up to 4 vectors): the most accumulators that divide, a tie
    # to the fewest loads a step (6 x 4 over 8 x 3, 4 x 4 over 8 x 2); 512 rows are not padded to
    # a 6 x 4 tile (PAD_MAX_VECTORS)
    (768, 3072, 32, (6, 4)),
    (512, 2752, 32, (4, 4)),   # 2752 = 172 vectors (4 x 43)
    (128, 768, 32, (8, 3)),    # 6 does not divide 128
    (504, 2752, 32, (6, 4)),
    # AVX2's 16 registers keep the most rows among ties (6 x 2 over 4 x 3)
    (768, 3072, 16, (6, 2)),
])
def test_default_tile(rows, cols, registers, want):
    cfg = default_config().replace(tile_j_vectors=WIDE_TILE_VECTORS if registers >= 32 else 3)
    ti, tj = register_tile(rows, cols, 16, cfg, False, padded=True, registers=registers)
    tv = tj // 16
    assert (ti, tv) == want
    assert ti * tv + tv + 1 <= registers  # accumulators, one vector of B per column, A's broadcast
    assert rows % ti == 0 or (tv <= PAD_MAX_VECTORS and -rows % ti <= rows // PAD_MAX_WASTE)
    assert cols % tj == 0


def test_avx512_targets_default_to_four_vector_tiles():
    from akgpy.target import resolve_target
    host = resolve_target(None)
    want = WIDE_TILE_VECTORS if host.vector_registers >= 32 else ScheduleConfig().tile_j_vectors
    assert default_config(host).tile_j_vectors == want


def test_reshaped_residual_epilogue_runs_inside_the_tile_loop():
    """A 1x1 convolution's GEMM in NHWC with bias and residual, through the reshapes the ONNX
    import leaves ([M, N] -> [1, H, W, N] -> [M, N]): the inlined reshape indices simplify to
    the tile's own iterators, so the epilogue runs under the one parallel tile loop (its second
    pass had gathered element by element: MobileNetV2's [3136, 144] x [144, 24] 6.4 -> 0.26 ms)."""
    h, w, k, n = 14, 12, 40, 24
    b = GraphBuilder("conv1x1_residual")
    x = b.input("x", (h * w, k))
    wt = b.input("w", (k, n))
    bias = b.input("bias", (1, 1, 1, n))
    res = b.input("res", (1, h, w, n))
    y = b.reshape(b.matmul(x, wt), (1, h, w, n)) + bias
    b.output(b.reshape(res + y, (h * w, n)))
    prog = _ok(b.build())
    tir = prog.kernels[0].tir
    assert tir.count("T.parallel") == 1, tir
