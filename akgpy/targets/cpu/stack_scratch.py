"""Small scratch buffers on the stack, not through TVM's workspace allocator.

TVM's LowerTVMBuiltin keeps a buffer on the stack only under kMaxStackAlloca (1024 bytes);
a larger one becomes a TVMBackendAllocWorkspace call, a null check and a
TVMBackendFreeWorkspace call wherever the buffer is declared: inside a parallel loop, at every
iteration. A kept float16 row of bert's layernorm (768 elements, 1536 bytes) cost two calls
per row, and an AVX-512 MatMul tile's accumulator (8 x 48 float32, 1536 bytes) two per tile.
This pass, run after LowerTVMBuiltin, turns each such CPU allocation of at most
STACK_SCRATCH_BYTES back into a stack buffer, which TVM's LLVM code generator places in the
entry block of the function (or the parallel loop's closure) that holds it: once per call,
16-byte aligned (TVM's cap for stack buffers; the workspace gave 64). Kernel alone,
interleaved, Emerald Rapids, three runs (21, 21, 41 repeats): yolo's float16 MatMul ~6576
0.79x / 0.94x / 0.91x (its widened A and packed B chunks), [1024, 768] x [768, 3072] 0.94x /
0.92x / 0.98x, bert layernorm ~3896 0.94x / 0.97x / 0.95x; GELU ~8645, dropout ~6619 and
~1751 0.96-1.06x across the runs, 1.00x, 0.99x and 1.00x in the longest.
"""
from __future__ import annotations

from tvm import ir, tirx

from ..rewrite import rewrite_each

# the most bytes a workspace allocation may hold to move to the stack: TVM's worker threads
# run with the default 8 MiB thread stack, and a kernel declares a few such buffers at most
STACK_SCRATCH_BYTES = 16 << 10
CPU = 1  # DLPack's kDLCPU, the workspace call's device type
_ALLOC, _FREE, _NULL = "tirx.TVMBackendAllocWorkspace", "tirx.TVMBackendFreeWorkspace", "tirx.isnullptr"


def _call(e, name: str) -> bool:
    return isinstance(e, ir.Call) and isinstance(e.op, ir.Op) and e.op.name == name


def _workspace(stmt):
    """The buffer a statement declares over a workspace allocation of at most
    STACK_SCRATCH_BYTES, else None."""
    if not (isinstance(stmt, tirx.DeclBuffer) and _call(stmt.data, _ALLOC)):
        return None
    device, _, nbytes = stmt.data.args[:3]
    on_cpu = isinstance(device, tirx.IntImm) and int(device.value) == CPU  # a GPU's workspace stays there
    small = isinstance(nbytes, tirx.IntImm) and 0 < int(nbytes.value) <= STACK_SCRATCH_BYTES
    return stmt.buffer if on_cpu and small else None


def _checks(stmt, buf, name: str) -> bool:
    """Whether `stmt` is LowerTVMBuiltin's `if <name>(..., buf.data) ...: throw`."""
    if not isinstance(stmt, tirx.IfThenElse):
        return False
    cond = stmt.condition
    call = cond if _call(cond, name) else getattr(cond, "a", None)
    if not _call(call, name):
        return False
    data = call.args[-1]
    return _call(data, "tirx.buffer_data") and data.args[0].same_as(buf)


def _on_stack(seq):
    stmts, changed = list(seq.seq), False
    for i in range(len(stmts)):
        buf = _workspace(stmts[i])
        if buf is None:
            continue
        null = next((k for k in range(i + 1, len(stmts)) if _checks(stmts[k], buf, _NULL)), None)
        free = next((k for k in range(len(stmts) - 1, i, -1) if _checks(stmts[k], buf, _FREE)), None)
        if null is None or free is None:
            continue  # not the shape LowerTVMBuiltin makes: leave it to the allocator
        stmts[i] = tirx.AllocBuffer(buf)
        stmts[null] = stmts[free] = None
        changed = True
    if not changed:
        return None
    kept = [s for s in stmts if s is not None]
    return kept[0] if len(kept) == 1 else tirx.SeqStmt(kept)


def stack_scratch(func):
    """`func` with its small workspace allocations on the stack (see the module doc)."""
    return rewrite_each(func, tirx.SeqStmt, _on_stack, inner_first=True)
