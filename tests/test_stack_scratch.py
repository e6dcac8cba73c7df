"""targets/cpu/stack_scratch.py: a scratch buffer of 1-16 KiB inside a parallel loop is a stack
buffer of the loop's closure, not a TVMBackendAllocWorkspace/FreeWorkspace pair per iteration."""
from __future__ import annotations

import re

import numpy as np
import pytest

import akgpy
from akgpy import GraphBuilder
from akgpy.targets import default_config
from akgpy.targets.cpu import stack_scratch
from akgpy.testing import check_program, workspace_allocations


def _matmul():
    """An AVX-512 register tile of 8 rows x 48 columns: its float32 accumulator holds 1536
    bytes, past TVM's 1024-byte stack bound, and is declared once per tile of the parallel loop."""
    b = GraphBuilder("mm_scratch")
    b.output(b.matmul(b.input("x", (64, 96)), b.input("w", (96, 192))))
    return b.build(), default_config(), {"kind": "llvm", "vector_bytes": 64}


def _bias_row():
    """A float32 bias rounded to float16 once per column and kept (schedule/kept.py
    broadcast_sources): a 2048-column row of 4096 bytes, declared inside the parallel row loop,
    as in bert's GELU ~8645."""
    b = GraphBuilder("bias_row")
    x, bias = b.input("x", (256, 2048), "float16"), b.input("bias", (2048,), "float32")
    y = b.add(x, b.cast(bias, "float16"))
    b.output(b.mul(b.tanh(y), y))
    return b.build(), default_config(), None


def _allocas_outside_entry(prog) -> list[str]:
    """Stack buffers not in their function's entry block: each pass through such a block would
    allocate again (a loop's stack would grow per iteration)."""
    out = []
    for k in prog.kernels:
        for fn in re.split(r"\ndefine ", k.source)[1:]:
            labels = 0
            for line in fn.splitlines()[1:]:
                if re.match(r"^[\w.\-]+:", line):
                    labels += 1
                elif " alloca " in line and labels > 1:
                    out.append(line.strip())
    return out


@pytest.mark.parametrize("make", [_matmul, _bias_row])
def test_small_scratch_buffers_go_on_the_stack(make, monkeypatch):
    g, cfg, target = make()
    prog = akgpy.fuse(g, config=cfg, target=target)
    assert not workspace_allocations(prog)
    assert not _allocas_outside_entry(prog)
    assert not check_program(g, prog) and not check_program(g, prog, seed=1)
    with monkeypatch.context() as m:
        m.setattr(stack_scratch, "STACK_SCRATCH_BYTES", 1024)  # under the buffer: the allocator keeps it
        kept = akgpy.fuse(g, config=cfg, target=target)
    assert workspace_allocations(kept)
    assert not check_program(g, kept)
    xs = [np.random.default_rng(2).standard_normal(g.tensors[n].shape).astype(str(g.tensors[n].dtype)) for n in g.inputs]
    for a, b in zip(prog(*[x.copy() for x in xs]), kept(*[x.copy() for x in xs])):
        assert np.array_equal(a, b)  # the same code but for where the buffer lives
