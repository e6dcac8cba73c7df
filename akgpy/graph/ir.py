"""The graph IR: tensors linked by name, ops in topological order.

A Graph is one fused subgraph (or a whole model graph). It is immutable; frontends and
the builder produce it, every later stage only reads it. `validate()` is run by every
constructor path, so a Graph that exists is well-formed: every op is known, every tensor
is defined before use, and every declared shape/dtype agrees with its op's shape rule.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .. import dtypes
from ..errors import AttrError, FormatError, ShapeError
from ..ops.registry import NZ, lookup
from .dump import dump_composite
from .hash import structural_hash


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: str
    format: str = "DefaultFormat"
    value: Any = None  # set for compile-time constants (composite `value`)

    @property
    def is_const(self) -> bool:
        return self.value is not None

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def logical_shape(self) -> tuple[int, ...]:
        """FRACTAL_NZ stores a logical [..., M, N] as [..., N/16, M/16, 16, 16]."""
        if self.format == NZ and len(self.shape) >= 4:
            *b, n1, m1, m0, n0 = self.shape
            return (*b, m1 * m0, n1 * n0)
        return self.shape


@dataclass(frozen=True)
class Op:
    name: str  # the op type, e.g. "Add"
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Mapping[str, Any] = field(default_factory=dict, compare=True, hash=False)
    # Non-semantic op-level keys of the source format (impl_path, fusion hints), for round trips.
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def attr(self, key: str, default: Any = ...):
        if key in self.attrs:
            return self.attrs[key]
        if default is ...:
            raise AttrError(f"missing attribute {key!r}", op=self.name,
                            tensor=self.outputs[0] if self.outputs else None)
        return default

    def label(self, index: int | None = None) -> str:
        out = self.outputs[0] if self.outputs else "?"
        return f"{self.name}#{index}->{out}" if index is not None else f"{self.name}->{out}"


def _check_constant(t: Tensor, op: str) -> None:
    """A constant's value must be one its dtype holds: 1.5 is no int32 and 2**40 no int32 (numpy
    refuses both), 2 no bool. A float constant may round, or overflow to inf, as numpy's does."""
    v = t.value
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        ok = isinstance(v, bool)
    elif t.dtype == "bool":
        ok = v in (0, 1)
    elif t.dtype.startswith(("int", "uint")):
        info = np.iinfo(dtypes.to_numpy(t.dtype))
        ok = float(v).is_integer() and info.min <= v <= info.max
    else:
        ok = True
    if not ok:
        raise ShapeError(f"constant {v!r:.40} is not representable as {t.dtype}", op=op, tensor=t.name)


@dataclass(frozen=True)
class Graph:
    name: str
    tensors: Mapping[str, Tensor]
    inputs: tuple[str, ...]  # kernel argument order (constants excluded)
    outputs: tuple[str, ...]
    ops: tuple[Op, ...]
    process: str = "cpu"
    # Non-semantic leftovers kept only so that to_composite() round-trips a file.
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    # "fused": a subgraph a framework already grouped, compiled as one kernel; "model": a whole
    # model graph that akgpy.fuse partitions into fused groups itself (akgpy/fusion).
    kind: str = "fused"
    # Inputs whose values are known when compiling (a model's weights): input name -> array.
    # A program built from the graph supplies them itself; callers pass only `free_inputs`.
    bound: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self):
        self.validate()

    @property
    def free_inputs(self) -> tuple[str, ...]:
        return tuple(n for n in self.inputs if n not in self.bound)

    # -- queries ---------------------------------------------------------------------
    def tensor(self, name: str) -> Tensor:
        return self.tensors[name]

    def ancestors(self, name: str, follow: Callable[[Op], Sequence[str]] | None = None):
        """Tensor `name` and the tensors it is computed from, each once, depth-first, as
        (tensor name, its producing op or None for an input or constant). `follow(op)` names the
        inputs of `op` to go on through (default: all of them; () stops there)."""
        producer = {o: op for op in self.ops for o in op.outputs}
        seen, todo = set(), [name]
        while todo:
            t = todo.pop()
            if t in seen:
                continue
            seen.add(t)
            op = producer.get(t)
            yield t, op
            if op is not None:
                todo.extend(op.inputs if follow is None else follow(op))

    def inplace_targets(self) -> dict[str, str]:
        """input tensor name -> name of the value written into it (last write wins)."""
        out = {}
        for op in self.ops:
            if op.name in ("InplaceAssign", "Assign"):
                out[op.inputs[0]] = op.inputs[1]
        return out

    @property
    def fake_outputs(self) -> frozenset[str]:
        fake = set()
        for op in self.ops:
            if op.name in ("InplaceAssign", "Assign") and bool(op.attrs.get("fake_output", False)):
                fake.update(op.outputs)
        return frozenset(n for n in self.outputs if n in fake)

    @property
    def real_outputs(self) -> tuple[str, ...]:
        fake = self.fake_outputs
        return tuple(n for n in self.outputs if n not in fake)

    def validate(self) -> None:
        if not isinstance(self.name, str):
            raise FormatError(f"graph name must be a string, got {self.name!r:.40}")
        for t in self.tensors.values():
            dtypes.check(t.dtype, tensor=t.name)
            if not isinstance(t.shape, tuple):
                raise ShapeError(f"shape must be a tuple of ints, got {t.shape!r:.60}", tensor=t.name)
            if any(not isinstance(s, int) or isinstance(s, bool) or s < 0 for s in t.shape):
                raise ShapeError(f"shape {list(t.shape)} must be non-negative ints", tensor=t.name)
            if 0 in t.shape:  # nothing to compute, and a reduction over it would need identities
                raise ShapeError(f"shape {list(t.shape)} has no elements; akgpy does not compile empty tensors",
                                 tensor=t.name)
            if t.size >= 2 ** 40:  # far beyond any host memory; also keeps index math in int64
                raise ShapeError(f"shape {list(t.shape)} has {t.size} elements, more than akgpy supports (2**40)",
                                 tensor=t.name)
        defined = set()
        if len(set(self.inputs)) != len(self.inputs):
            dup = next(n for n in self.inputs if self.inputs.count(n) > 1)
            raise ShapeError("graph input listed twice", tensor=dup)
        for name in self.inputs:
            if name not in self.tensors:
                raise ShapeError("input is not described", tensor=name)
            if self.tensors[name].is_const:
                raise ShapeError("a constant cannot be a kernel input", tensor=name)
            defined.add(name)
        defined.update(n for n, t in self.tensors.items() if t.is_const)
        for i, op in enumerate(self.ops):
            opdef = lookup(op.name, tensor=op.outputs[0] if op.outputs else None)
            for t in op.inputs:
                if t not in defined:
                    raise ShapeError("input used before it is defined (not a graph input, constant "
                                     "or earlier op output)", op=op.label(i), tensor=t)
            for t in op.outputs:
                if t in defined:
                    raise ShapeError("tensor defined twice", op=op.label(i), tensor=t)
                if t not in self.tensors:
                    raise ShapeError("output is not described", op=op.label(i), tensor=t)
            for t in op.inputs:
                if self.tensors[t].is_const:
                    _check_constant(self.tensors[t], op.label(i))
            opdef.check(op, [self.tensors[t] for t in op.inputs], [self.tensors[t] for t in op.outputs], i)
            if op.name in ("InplaceAssign", "Assign") and op.inputs[0] not in self.inputs:
                raise ShapeError("an in-place write must target a graph input buffer", op=op.label(i),
                                 tensor=op.inputs[0])
            defined.update(op.outputs)
        if self.kind not in ("fused", "model"):
            raise ShapeError(f"graph kind must be 'fused' or 'model', got {self.kind!r}")
        for name, arr in self.bound.items():
            t = self.tensors.get(name)
            if name not in self.inputs or t is None:
                raise ShapeError("a bound value is given for a tensor that is not a graph input", tensor=name)
            shape, dt = tuple(getattr(arr, "shape", ())), str(getattr(arr, "dtype", type(arr).__name__))
            if shape != t.shape or dt != str(dtypes.to_numpy(t.dtype)):
                raise ShapeError(f"bound value is {dt}{list(shape)}, the input is {t.dtype}{list(t.shape)}",
                                 tensor=name)
        for name in self.outputs:
            if name not in defined:
                raise ShapeError("graph output is never produced", tensor=name)
        if not self.outputs and not self.inplace_targets():
            raise ShapeError(f"graph {self.name!r} has no outputs and no in-place writes")

    # -- conversions -----------------------------------------------------------------
    def to_composite(self, *, indent: int | None = None) -> str:
        return dump_composite(self, indent=indent)

    def hash(self) -> str:
        return structural_hash(self)

    def __repr__(self) -> str:
        return (f"Graph({self.name!r}, {len(self.inputs)} inputs, {len(self.ops)} ops, "
                f"{len(self.outputs)} outputs)")

    def describe(self) -> str:
        lines = [f"graph {self.name} ({self.process})"]
        for n in self.inputs:
            t = self.tensors[n]
            lines.append(f"  input  {n}: {t.dtype}{list(t.shape)} {t.format}")
        for i, op in enumerate(self.ops):
            ins = ", ".join(f"{self.tensors[x].value!r}" if self.tensors[x].is_const else x for x in op.inputs)
            outs = ", ".join(f"{o}: {self.tensors[o].dtype}{list(self.tensors[o].shape)}" for o in op.outputs)
            attrs = f" {dict(op.attrs)}" if op.attrs else ""
            lines.append(f"  {i:3d} {outs} = {op.name}({ins}){attrs}")
        lines.append(f"  outputs {list(self.outputs)}")
        return "\n".join(lines)
