"""Graph (one fused subgraph) -> TE tensors -> one PrimFunc. Nothing is scheduled here.

Conventions the later stages rely on:
- every te.compute is named `<Op>_<index>` (or `<Op>_<index>_<part>`), and `Lowered.roles`
  says what each block is: "elemwise" (injective, may be inlined), "reduce", "fold" (a
  reduction whose order is its meaning: AddN over a stacked input, never split), "contract"
  (MatMul/Conv2D main block), "pack" (operand re-layout for a contraction), "output"
  (a copy into an output buffer);
- float16 ops compute in float32 and round to float16 once per op, which is exactly the
  per-op rounding the graph declares (float32 has enough bits that the double rounding
  of + - * / sqrt is innocuous), and transcendental functions never run in half precision;
- complex tensors are float pairs with a trailing dim of 2 (real, imag), numpy's layout;
- the reads of an InplaceAssign/Assign target after the op see the assigned value.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from tvm import te, tirx

from ..errors import CompileError, UnsupportedOpError
from ..graph.ir import Graph, Op, Tensor
from ..graph.ranges import value_ranges
from ..ops.registry import canonical
from .abi import OUTPUT_ALIGN, Param, param_align, stack_label, stack_plan, with_alignment
from .builders import BUILDERS
from .index import extents, index_dtype, operand_index
from .operand import Operand, compute_dtype, logical, storage


@dataclass
class Lowered:
    name: str
    func: Any  # tvm PrimFunc
    params: list[Param]
    roles: dict[str, str] = field(default_factory=dict)
    # outputs passed stacked (te/abi.stack_outputs, after scheduling: the schedule sees them one by one)
    output_stacks: list[tuple[str, ...]] = field(default_factory=list)
    index_dtype: str = "int32"


class StackMember:
    """Member j of a stacked input parameter, as the builders use a te.Tensor: called with the
    member's indices, it loads [j, ...] of the stack."""

    def __init__(self, stack, j: int, index_dtype: str):
        self.stack, self.index, self.j = stack, j, tirx.const(j, index_dtype)
        self.shape, self.dtype, self.op = tuple(stack.shape)[1:], stack.dtype, stack.op

    def __call__(self, *idx):
        return self.stack(self.j, *idx)


class Lowerer:
    def __init__(self, g: Graph, vector_math: bool = True, output_align: int = OUTPUT_ALIGN):
        self.g = g
        self.output_align = output_align  # te/abi.param_align: what the kernel assumes of its outputs
        # for a schedule that vectorises what it proves contiguous (poly): float32 exp/log/tanh as
        # arithmetic (te/fastmath.py), short-row sums as interleaved lane partials (builders._reduce)
        self.vector_math = vector_math
        self.env: dict[str, Operand] = {}
        self.placeholders: dict[str, Any] = {}
        self.roles: dict[str, str] = {}
        self.index = 0
        self.index_dtype = index_dtype(storage(t)[0] for t in g.tensors.values())
        self._ranges = None
        self._stacked: dict[str, StackMember] = {}  # graph input -> its place in a stacked parameter
        self._input_stacks: list[tuple[tuple[str, ...], Any]] = []  # (members, stack placeholder)
        self._output_stacks: list[tuple[str, ...]] = []

    # -- helpers used by builders ------------------------------------------------------------
    def value_range(self, name: str):
        """graph/ranges.py's bound on tensor `name`'s values in this graph."""
        if self._ranges is None:
            self._ranges = value_ranges(self.g)
        return self._ranges[name]

    def operand(self, name: str) -> Operand:
        if name in self.env:
            return self.env[name]
        t = self.g.tensors[name]
        if t.is_const:
            return Operand(t)
        if name not in self.placeholders:
            shape, dt = storage(t)
            self.placeholders[name] = self._stacked.get(name) or \
                te.placeholder(extents(shape, self.index_dtype), dt, name=ident(name))
        op = Operand(t, self.placeholders[name])
        self.env[name] = op
        return op

    def fold_stacked(self, ins: list[Operand], out: Tensor):
        """An AddN's left fold as one serial reduction along a stack's first axis, where its terms
        are consecutive members of one stacked input, in order; else None. Unrolled, 65,536 terms
        were 65,536 loads in one function: LLVM alone took minutes. The reducer starts from -0.0,
        the identity of IEEE addition (-0.0 + x is x for every x, -0.0 and NaN included), and
        rounds every partial sum to the output dtype as the unrolled fold does. Its role, "fold",
        keeps it in order: the passes that split a reduction into partial sums take "reduce"
        blocks only, and TVM parallelises and vectorises no loop over a reduction axis."""
        first = ins[0].tensor
        if len(ins) < 2 or not isinstance(first, StackMember) or out.dtype == "bool":
            return None
        d0 = ins[0].desc
        for k, o in enumerate(ins):
            t, d = o.tensor, o.desc
            if not isinstance(t, StackMember) or t.stack is not first.stack or t.index != first.index + k \
                    or (d.shape, d.dtype, d.format) != (d0.shape, out.dtype, d0.format):
                return None
        acc = compute_dtype(out.dtype)
        add = te.comm_reducer(lambda a, b: _cast_to(_cast_to(a, acc) + _cast_to(b, acc), out.dtype),
                              lambda dt: tirx.const(-0.0 if dt.startswith("float") else 0, dt), name="fold")
        j = te.reduce_axis((tirx.const(0, self.index_dtype), tirx.const(len(ins), self.index_dtype)), name="j")
        lg = logical(ins, out)

        def f(*i):
            return add(first.stack(j + first.index, *operand_index(d0, out, i, logical=lg)), axis=j)
        return self.compute(out.shape, f, role="fold")

    def compute(self, shape, fcompute: Callable, role: str = "elemwise", suffix: str = ""):
        name = f"{self._opname}_{self.index}{suffix}"
        self.roles[name] = role
        return te.compute(extents(shape, self.index_dtype), fcompute, name=name)

    # -- driver ----------------------------------------------------------------------------------
    def run(self) -> Lowered:
        g = self.g
        self._plan_stacks()
        for i, op in enumerate(g.ops):
            self.index, self._opname = i, op.name
            out = g.tensors[op.outputs[0]]
            if op.name in ("InplaceAssign", "Assign"):
                self._assign(op, out)
                continue
            builder = BUILDERS.get(canonical(op.name))
            if builder is None:
                raise UnsupportedOpError("no TE lowering (a fallback op: it runs through numpy between kernels "
                                         "when akgpy.fuse partitions a model graph)", op=op.label(i), tensor=out.name)
            try:
                result = builder(self, op, [self.operand(n) for n in op.inputs], out)
            except (RuntimeError, TypeError, ValueError) as e:
                raise CompileError(f"TE construction failed: {e}", op=op.label(i), tensor=out.name) from None
            self.env[out.name] = Operand(out, result)
        return self._finish()

    def _plan_stacks(self) -> None:
        """Which inputs and outputs are passed stacked (te/abi.stack_plan): the inputs that are
        read (one parameter each), the real outputs, and the in-place targets, never stacked
        (a target also read is one more parameter). A stack's members are in the order the ops
        first read them, so an AddN's distinct terms are consecutive members (fold_stacked)."""
        g = self.g
        targets = set(g.inplace_targets())
        read: dict[str, None] = {}  # in order of first read
        for op in g.ops:
            for k, n in enumerate(op.inputs):
                if not (k == 0 and op.name in ("InplaceAssign", "Assign")):
                    read.setdefault(n)
        inputs = set(g.inputs)
        ins = [(n, storage(g.tensors[n])) for n in read
               if n in inputs and n not in targets and not g.tensors[n].is_const]
        outs = [(n, storage(g.tensors[n])) for n in g.real_outputs]
        in_stacks, self._output_stacks = stack_plan(ins, outs, len(targets) + len(targets & read.keys()), g.name)
        taken = {ident(n) for n in g.tensors} if in_stacks else set()
        for k, members in enumerate(in_stacks):
            shape, dt = storage(g.tensors[members[0]])
            name = next(s for s in (f"stack_in_{k}" + "_" * m for m in range(len(taken) + 1)) if s not in taken)
            stack = te.placeholder(extents((len(members), *shape), self.index_dtype), dt, name=name)
            self._input_stacks.append((members, stack))
            for j, n in enumerate(members):
                self._stacked[n] = StackMember(stack, j, self.index_dtype)

    def _assign(self, op: Op, out: Tensor) -> None:
        target = self.g.tensors[op.inputs[0]]
        value = self.operand(op.inputs[1])
        if value.tensor is None or tuple(value.tensor.shape) != storage(target)[0]:
            shape, _ = storage(target)
            value_t = self.compute(shape, _copy_fn(value, target), suffix="_value")
            value = Operand(target, value_t)
        self.env[op.inputs[0]] = Operand(target, value.tensor)
        passthrough = op.inputs[2] if op.name == "InplaceAssign" else op.inputs[1]
        src = self.operand(passthrough)
        self.env[out.name] = Operand(out, src.tensor) if src.tensor is not None else src

    def _finish(self) -> Lowered:
        g = self.g
        taken: set = set()
        out_tensors, params = [], []

        def bind(kind: str, name: str, desc: Tensor, operand: Operand):
            shape, dt = storage(desc)
            t = operand.tensor
            if t is None or t in taken or isinstance(t.op, te.PlaceholderOp) or tuple(t.shape) != shape:
                self._opname, self.index = "Out", len(out_tensors)
                t = self.compute(shape, _copy_fn(operand, desc), role="output", suffix=f"_{ident(name)}")
            taken.add(t)
            out_tensors.append(t)
            params.append(Param(kind, name, shape, dt, param_align(kind, np.dtype(dt).itemsize, self.output_align)))

        for name in g.real_outputs:
            bind("output", name, g.tensors[name], self.operand(name))
        for target in g.inplace_targets():
            bind("inplace", target, g.tensors[target], self.env[target])
        inputs, in_params = [], []
        # a stack takes the place of its member that comes first in the graph's inputs
        stack_of = {}
        for members, stack in reversed(self._input_stacks):
            stack_of.update((n, (members, stack)) for n in members)
        placed = set()
        for n in g.inputs:
            if n in stack_of:
                members, stack = stack_of[n]
                if id(stack) in placed:
                    continue
                placed.add(id(stack))
                shape, dt = storage(g.tensors[n])
                inputs.append(stack)
                in_params.append(Param("input", stack_label(members), (len(members), *shape), dt,
                                       param_align("input", np.dtype(dt).itemsize), members))
            elif n in self.placeholders and n not in self._stacked:
                shape, dt = storage(g.tensors[n])
                inputs.append(self.placeholders[n])
                in_params.append(Param("input", n, shape, dt, param_align("input", np.dtype(dt).itemsize)))
        try:
            # int64 throughout where a tensor needs it: the builders' reduce axes are int32
            func = te.create_prim_func(inputs + out_tensors,
                                       index_dtype_override="int64" if self.index_dtype == "int64" else None)
        except RuntimeError as e:
            raise CompileError(f"create_prim_func failed for {g.name}: {e}") from None
        func = with_alignment(func, [p.align for p in in_params + params])
        func = func.with_attr("global_symbol", ident(g.name))
        return Lowered(ident(g.name), func, in_params + params, dict(self.roles), self._output_stacks,
                       self.index_dtype)


def _copy_fn(src: Operand, desc: Tensor):
    if src.is_complex:
        return lambda *i: src.load(desc, i[:-1], part=i[-1]) if src.tensor is not None else \
            tirx.Select(i[-1] == 0, src.load(desc, i[:-1], part=0), src.load(desc, i[:-1], part=1))
    _, dt = storage(desc)
    return lambda *i: _cast_to(src.load(desc, i), dt)


def _cast_to(x, dtype: str):
    return x.astype(dtype) if str(x.ty) != dtype else x


def ident(name: str) -> str:
    """`name` as a C identifier: the kernel symbol and the dump folder."""
    s = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return s if s and not s[0].isdigit() else f"k_{s}"


def lower(g: Graph, *, vector_math: bool = True, output_align: int = OUTPUT_ALIGN) -> Lowered:
    """`vector_math`: build float32 exp/log/tanh from arithmetic, which pays off in vector loops
    (the poly schedule's); in scalar loops libm is faster (yolo softmax, plain: 110 vs 280 ms).
    It also sums contiguous blocks with a short innermost dim as 8 interleaved partials, a vector
    loop for poly, 2.6x slower in the plain schedule's scalar loops (yolo loss sum), more than 8
    where a broadcast operand's period asks for it. `output_align`: bytes of alignment the kernel
    assumes of its outputs (te/abi.param_align; ScheduleConfig.output_align)."""
    return Lowerer(g, vector_math, output_align).run()
