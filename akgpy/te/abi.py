"""What a kernel may assume of the arrays it is called with: the argument contract.

The caller owns inputs and in-place targets (numpy's allocator gives 16 bytes, a slice any
multiple of the element size), so the kernel assumes only the alignment the dtype itself has and
its vector loads and stores are the unaligned forms. Outputs are allocated by akgpy's runtime
(`runtime/program.aligned_empty`), so they keep whole-cache-line alignment: what streaming
(non-temporal) stores need. On x86 since Nehalem an unaligned vector access to aligned memory
costs the same as the aligned form; docs/runtime.md has the measurements.

A kernel also has at most `MAX_KERNEL_PARAMS` parameters: TVM's cost per parameter grows faster
than linearly (its packed-call wrapper nests a statement per argument, and the passes after it
walk that nesting). Above the bound, the graph inputs (or outputs) of one storage shape and dtype
are passed as one stacked parameter of shape (k, *shape) (`stack_plan`): the runtime copies the
caller's inputs into it, and hands out views of a stacked output.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import tvm_ffi
from tvm import ir, tirx

from ..errors import CompileError

OUTPUT_ALIGN = 64  # bytes: a cache line, the unit of streaming stores
# The corpus's largest kernel has 207 parameters (bert's LAMB AddN: 206 inputs, 1 output)
MAX_KERNEL_PARAMS = 256


@dataclass(frozen=True)
class Param:
    """One PrimFunc parameter and the graph tensor it carries, or the graph tensors stacked in it
    (`members`, in order: member j is [j, ...] of the array)."""
    kind: str  # "input" | "output" | "inplace"
    tensor: str  # graph tensor name (a stack: stack_label)
    shape: tuple[int, ...]  # storage shape (complex: trailing 2); a stack's: (len(members), *member's)
    dtype: str  # storage dtype (complex: its float part)
    align: int  # bytes of alignment the kernel assumes of the array's start (param_align)
    members: tuple[str, ...] = ()  # graph tensors of a stacked parameter; () for one tensor

    @property
    def tensors(self) -> tuple[str, ...]:
        return self.members or (self.tensor,)


def param_align(kind: str, itemsize: int, output_align: int = OUTPUT_ALIGN) -> int:
    """Bytes of alignment the kernel assumes of a parameter of this kind and element size;
    `output_align` 0: outputs too only their dtype's (a caller allocates them)."""
    return (output_align or itemsize) if kind == "output" else itemsize


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


def stack_plan(inputs: Sequence[tuple[str, tuple]], outputs: Sequence[tuple[str, tuple]], fixed: int,
               graph: str) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
    """(input stacks, output stacks): the members of each stacked parameter, in graph order.

    `inputs` and `outputs` are (tensor, (storage shape, dtype)) per parameter that may be
    stacked; `fixed` counts those that may not (in-place targets: the caller's own arrays,
    written where they are). Within the bound nothing is stacked; above it, the largest classes
    of one shape and dtype are stacked first until the count is within it. Parameters of
    distinct shapes only stay one by one whatever their number."""
    if fixed > MAX_KERNEL_PARAMS:
        raise CompileError(f"{graph} has {fixed} in-place targets: a kernel takes at most {MAX_KERNEL_PARAMS} "
                           "parameters and in-place targets are passed one by one")
    count = len(inputs) + len(outputs) + fixed
    classes = []
    for kind, entries in (("input", inputs), ("output", outputs)):
        same: dict[tuple, list[str]] = {}
        for name, key in entries:
            same.setdefault(key, []).append(name)
        classes += [(kind, tuple(names)) for names in same.values() if len(names) > 1]
    chosen: dict[str, list] = {"input": [], "output": []}
    for kind, members in sorted(classes, key=lambda c: -len(c[1])):  # stable: inputs first at a tie
        if count <= MAX_KERNEL_PARAMS:
            break
        chosen[kind].append(members)
        count -= len(members) - 1
    return chosen["input"], chosen["output"]


def stack_label(members: Sequence[str]) -> str:
    """The name a stacked parameter goes by (reports, errors): its first and last member."""
    return f"{members[0]}..{members[-1]}"


def stack_outputs(func, params: list, stacks: Sequence[tuple[str, ...]], index_dtype: str):
    """(func, params) with each stack's output parameters replaced by one parameter of shape
    (k, *shape) at the first member's place: every load, store and block region of member j
    addresses [j, ...] of it. Done on the scheduled function, so the schedule is the one the
    members got; only the calling convention changes."""
    if not stacks:
        return func, params
    member = {}  # graph tensor -> (stack buffer, index constant)
    first = {}  # graph tensor of a stack's first member -> (its buffer, its Param)
    for members in stacks:
        p0 = next(p for p in params if p.kind == "output" and p.tensor == members[0])
        shape = (len(members), *p0.shape)
        buf = tirx.decl_buffer([tirx.const(n, index_dtype) for n in shape], p0.dtype, f"stack_{len(first)}",
                               data_alignment=OUTPUT_ALIGN, elem_offset=tirx.const(0, index_dtype))
        first[members[0]] = buf, Param("output", stack_label(members), shape, p0.dtype, OUTPUT_ALIGN, members)
        for j, n in enumerate(members):
            member[n] = buf, tirx.const(j, index_dtype)
    by_var = {v: member[p.tensor] for v, p in zip(func.params, params) if p.kind == "output" and p.tensor in member}

    def on_load(ld, mut):
        hit = by_var.get(ld.source)
        if hit is None:
            return mut.default_mutate(ld)
        return tirx.BufferLoad(hit[0], [hit[1], *(mut.mutate(i) for i in ld.indices)])

    def on_store(st, mut):
        hit = by_var.get(st.buffer)
        if hit is None:
            return mut.default_mutate(st)
        return tirx.BufferStore(hit[0], mut.mutate(st.value), [hit[1], *(mut.mutate(i) for i in st.indices)])

    def on_region(r, mut):
        hit = by_var.get(r.source)
        if hit is None:
            return mut.default_mutate(r)
        return tirx.BufferRegion(hit[0], [ir.Range.from_min_extent(hit[1], 1), *r.region])

    body = tvm_ffi.structural_mutate(func.body, [(ir.TensorLoad, on_load), (tirx.BufferStore, on_store),
                                                 (ir.TensorRegion, on_region)])
    left = []
    tvm_ffi.structural_walk(body, [(tirx.Var, lambda v: left.append(v.name) if v in by_var else None)])
    if left:  # a form of access this rewrite does not know: a compiler bug, never a wrong kernel
        raise CompileError(f"stacking outputs left {len(left)} other reference(s) to {sorted(set(left))[:3]}")
    new_vars, new_params = [], []
    for v, p in zip(func.params, params):
        if p.kind == "output" and p.tensor in first:
            buf, sp = first[p.tensor]
            new_vars.append(buf)
            new_params.append(sp)
        elif v not in by_var:
            new_vars.append(v)
            new_params.append(p)
    return tirx.PrimFunc(new_vars, body, func.ret_type, func.attrs), new_params
