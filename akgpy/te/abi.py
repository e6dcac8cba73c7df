"""What a kernel may assume of the arrays it is called with: the argument contract.

The caller owns inputs and in-place targets (numpy's allocator gives 16 bytes, a slice any
multiple of the element size), so the kernel assumes only the alignment the dtype itself has and
its vector loads and stores are the unaligned forms. Outputs are allocated by akgpy's runtime
(`runtime/program.aligned_empty`), so they keep whole-cache-line alignment: what streaming
(non-temporal) stores need. On x86 since Nehalem an unaligned vector access to aligned memory
costs the same as the aligned form; docs/runtime.md has the measurements.
"""
from __future__ import annotations

import tvm_ffi
from tvm import tirx

OUTPUT_ALIGN = 64  # bytes: a cache line, the unit of streaming stores


def param_align(kind: str, itemsize: int) -> int:
    """Bytes of alignment the kernel assumes of a parameter of this kind and element size."""
    return OUTPUT_ALIGN if kind == "output" else itemsize


def with_alignment(func, aligns: list[int]):
    """`func` with each buffer parameter declared at the given alignment: LLVM emits loads and
    stores no more aligned than the declaration, whatever the views built on it later."""
    mapping = {}
    for p, align in zip(func.params, aligns):
        if int(p.ty.data_alignment) != align:
            mapping[p] = tirx.decl_buffer(p.ty.shape, p.ty.dtype, p.name, data_alignment=align,
                                          elem_offset=p.ty.elem_offset, offset_factor=int(p.ty.offset_factor))
    if not mapping:
        return func
    body = tvm_ffi.structural_mutate(func.body, [(tirx.Var, lambda v, mut: mapping.get(v, v))])
    return tirx.PrimFunc([mapping.get(p, p) for p in func.params], body, func.ret_type, func.attrs)
