"""Loop-carried vector partials of a width that is not a power of two are updated in
register-sized chunks (targets/split_accumulators), so LLVM keeps each chunk in one register
across the reduction loop instead of taking a `<48 x double>` apart every iteration."""
from __future__ import annotations

import re

import pytest

import akgpy
from akgpy import GraphBuilder
from akgpy.targets import split_accumulators
from akgpy.targets.cpu import tir_pipeline
from akgpy.testing import check_program

from .conftest import BARE, WIDE


def _grid_sum_of_exp():
    """yolo's loss shape: a sum over a [.., 3, 2] tail with [.., 3, 1] and [1, .., 1, 2]
    operands, whose float64 partials are 48 lanes wide (tests/test_broadcast_loads)."""
    b = GraphBuilder("grid_sum")
    x = b.input("x", (4, 52, 52, 3, 2))
    grid = b.input("grid", (1, 52, 52, 1, 2))
    w = b.input("w", (4, 52, 52, 3, 1))
    v = b.input("v", (2,))
    b.output(b.reduce_sum(b.exp((x * v - grid) * w), axis=(0, 1, 2, 3, 4)))
    return b.build()


def _phi_widths(prog) -> set[str]:
    ll = "\n".join(k._executable.mod.inspect_source("ll") for k in prog.kernels)
    return set(re.findall(r"phi <(\d+) x double>", ll))


def _odd(widths) -> set[str]:
    return {w for w in widths if int(w) & (int(w) - 1)}


@pytest.mark.parametrize("n,bits,chunk", [(48, 64, 8), (48, 32, 16), (24, 64, 8), (12, 64, 4), (6, 64, 2),
                                          (3, 64, 0), (7, 64, 0), (80, 16, 16)])
def test_chunks_are_the_largest_power_of_two_in_a_register(n, bits, chunk):
    assert split_accumulators._chunk(n, bits) == chunk


def test_48_lane_partials_stay_whole_registers():
    g = _grid_sum_of_exp()
    prog = akgpy.fuse(g, config=BARE, target=WIDE)
    widths = _phi_widths(prog)
    assert widths and not _odd(widths), widths
    assert not check_program(g, prog)


def test_without_the_split_llvm_carries_the_odd_vector(monkeypatch):
    """What the pass removes: the same kernel without it carries a <48 x double> phi (if LLVM
    ever learns to split it well, this test says the pass may go)."""
    monkeypatch.setattr(tir_pipeline, "split_func", lambda f: f)
    g = _grid_sum_of_exp()
    prog = akgpy.fuse(g, config=BARE, target=WIDE)
    assert _odd(_phi_widths(prog)) == {"48"}
    assert not check_program(g, prog)


@pytest.mark.parametrize("acc_first", [True, False])
@pytest.mark.parametrize("op", ["Max", "Add"])
def test_split_keeps_each_operand_on_its_side(op, acc_first):
    """A float max of a NaN depends on operand order, so each chunk keeps the original's."""
    from tvm import ir, tirx
    acc = tirx.decl_buffer((96,), "float64", "acc")
    src = tirx.decl_buffer((96,), "float64", "src")
    ramp = tirx.Ramp(tirx.IntImm("int32", 0), 1, 48)
    load, x = tirx.BufferLoad(acc, [ramp]), tirx.BufferLoad(src, [ramp])
    cls = getattr(tirx, op)
    store = tirx.BufferStore(acc, cls(load, x) if acc_first else cls(x, load), [ramp])
    got = split_accumulators._split(store)
    assert got is not None and len(got.seq) == 1 + 48 // 8
    for st in got.seq[1:]:
        assert isinstance(st.value, cls)
        side = st.value.a if acc_first else st.value.b
        assert isinstance(side, ir.TensorLoad) and side.source.same_as(acc)
        assert str(side.ty).endswith("x8")
