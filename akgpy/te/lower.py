"""Graph (one fused subgraph) -> TE tensors -> one PrimFunc. Nothing is scheduled here.

Conventions the later stages rely on:
- every te.compute is named `<Op>_<index>` (or `<Op>_<index>_<part>`), and `Lowered.roles`
  says what each block is: "elemwise" (injective, may be inlined), "reduce", "contract"
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
from ..ops.registry import uses_logical_broadcast
from .abi import param_align, with_alignment
from .index import extents, index_dtype, operand_index


@dataclass(frozen=True)
class Param:
    """One PrimFunc parameter and the graph tensor it carries."""
    kind: str  # "input" | "output" | "inplace"
    tensor: str  # graph tensor name
    shape: tuple[int, ...]  # storage shape (complex: trailing 2)
    dtype: str  # storage dtype (complex: its float part)
    align: int  # bytes of alignment the kernel assumes of the array's start (te/abi.py)


@dataclass
class Lowered:
    name: str
    func: Any  # tvm PrimFunc
    params: list[Param]
    roles: dict[str, str] = field(default_factory=dict)


def storage(t: Tensor) -> tuple[tuple[int, ...], str]:
    from ..dtypes import COMPLEX_PART
    if t.dtype in COMPLEX_PART:
        return (*t.shape, 2), COMPLEX_PART[t.dtype]
    return t.shape, t.dtype


def compute_dtype(dtype: str) -> str:
    return "float32" if dtype == "float16" else dtype


class Operand:
    """A graph tensor as TE sees it: a te.Tensor, or a compile-time scalar."""

    def __init__(self, desc: Tensor, tensor=None):
        self.desc, self.tensor = desc, tensor

    @property
    def is_complex(self) -> bool:
        return self.desc.dtype.startswith("complex")

    def load(self, dst: Tensor, idx, logical: bool = False, part: int | None = None):
        if self.tensor is None:
            _, dt = storage(self.desc)
            v = self.desc.value
            if self.is_complex:
                v = v.real if part == 0 else (v.imag if isinstance(v, complex) else 0)
            if dt in ("float16", "float32"):  # the dtype's value: TVM widens a FloatImm's double as is
                v = float(np.asarray(v, dtype=dt))
            return tirx.const(v, dt)
        src_idx = operand_index(self.desc, dst, idx, logical=logical)
        if self.is_complex:
            src_idx = [*src_idx, part]
        return self.tensor(*src_idx)

    def value(self, dst: Tensor, idx, logical: bool = False):
        """The element as a compute-dtype expression (float16 widened to float32)."""
        x = self.load(dst, idx, logical)
        want = compute_dtype(self.desc.dtype)
        return x.astype(want) if want != str(x.ty) else x


class Lowerer:
    def __init__(self, g: Graph, vector_math: bool = True):
        self.g = g
        # for a schedule that vectorises what it proves contiguous (poly): float32 exp/log/tanh as
        # arithmetic (te/fastmath.py), short-row sums as interleaved lane partials (builders._reduce)
        self.vector_math = vector_math
        self.env: dict[str, Operand] = {}
        self.placeholders: dict[str, Any] = {}
        self.roles: dict[str, str] = {}
        self.index = 0
        self.index_dtype = index_dtype(storage(t)[0] for t in g.tensors.values())
        self._ranges = None

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
            self.placeholders[name] = te.placeholder(extents(shape, self.index_dtype), dt, name=ident(name))
        op = Operand(t, self.placeholders[name])
        self.env[name] = op
        return op

    def compute(self, shape, fcompute: Callable, role: str = "elemwise", suffix: str = ""):
        name = f"{self._opname}_{self.index}{suffix}"
        self.roles[name] = role
        return te.compute(extents(shape, self.index_dtype), fcompute, name=name)

    # -- driver ----------------------------------------------------------------------------------
    def run(self) -> Lowered:
        from .builders import BUILDERS
        g = self.g
        for i, op in enumerate(g.ops):
            self.index, self._opname = i, op.name
            out = g.tensors[op.outputs[0]]
            if op.name in ("InplaceAssign", "Assign"):
                self._assign(op, out)
                continue
            builder = BUILDERS.get(op.name)
            if builder is None:
                raise UnsupportedOpError("no TE lowering (a fallback op: it runs through numpy between kernels "
                                         "when akgpy.fuse partitions a model graph)", op=op.label(i), tensor=out.name)
            try:
                result = builder(self, op, [self.operand(n) for n in op.inputs], out)
            except (RuntimeError, TypeError, ValueError) as e:
                raise CompileError(f"TE construction failed: {e}", op=op.label(i), tensor=out.name) from None
            self.env[out.name] = Operand(out, result)
        return self._finish()

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
            params.append(Param(kind, name, shape, dt, param_align(kind, np.dtype(dt).itemsize)))

        for name in g.real_outputs:
            bind("output", name, g.tensors[name], self.operand(name))
        for target in g.inplace_targets():
            bind("inplace", target, g.tensors[target], self.env[target])
        inputs = [(n, self.placeholders[n]) for n in g.inputs if n in self.placeholders]
        in_params = [Param("input", n, shape, dt, param_align("input", np.dtype(dt).itemsize))
                     for n, _ in inputs for shape, dt in [storage(g.tensors[n])]]
        try:
            # int64 throughout where a tensor needs it: the builders' reduce axes are int32
            func = te.create_prim_func([p for _, p in inputs] + out_tensors,
                                       index_dtype_override="int64" if self.index_dtype == "int64" else None)
        except RuntimeError as e:
            raise CompileError(f"create_prim_func failed for {g.name}: {e}") from None
        func = with_alignment(func, [p.align for p in in_params + params])
        func = func.with_attr("global_symbol", ident(g.name))
        return Lowered(ident(g.name), func, in_params + params, dict(self.roles))


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


def lower(g: Graph, *, vector_math: bool = True) -> Lowered:
    """`vector_math`: build float32 exp/log/tanh from arithmetic, which pays off in vector loops
    (the poly schedule's); in scalar loops libm is faster (yolo softmax, plain: 110 vs 280 ms).
    It also sums contiguous blocks with a short innermost dim as 8 interleaved partials, a vector
    loop for poly, 2.6x slower in the plain schedule's scalar loops (yolo loss sum), more than 8
    where a broadcast operand's period asks for it."""
    return Lowerer(g, vector_math).run()


def logical(ins: list[Operand], out: Tensor) -> bool:
    return uses_logical_broadcast([o.desc for o in ins], out)
