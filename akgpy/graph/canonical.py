"""A graph with its names replaced by positions, so that what is compiled from it (the scheduled
TIR, the object code, its structural hash) is the same for every request that differs only in
names: a framework names each fused kernel and its tensors after where they came from.
"""
from __future__ import annotations

from dataclasses import replace

from .ir import Graph, Op


def canonical_names(g: Graph, name: str = "kernel") -> Graph:
    """`g` named `name`, its inputs `in<i>` (argument order), op outputs `t<k>_<j>` (op k's
    output j), constants `c<k>` (first use order); order, shapes, dtypes, attrs and meta kept."""
    new: dict[str, str] = {n: f"in{i}" for i, n in enumerate(g.inputs)}
    consts = 0
    for k, op in enumerate(g.ops):
        for t in op.inputs:
            if t not in new:  # a constant (every other operand is defined before use)
                new[t] = f"c{consts}"
                consts += 1
        for j, t in enumerate(op.outputs):
            new.setdefault(t, f"t{k}_{j}")
    tensors = {new[n]: replace(t, name=new[n]) for n, t in g.tensors.items() if n in new}
    ops = tuple(Op(op.name, tuple(new[t] for t in op.inputs), tuple(new[t] for t in op.outputs), op.attrs, op.extra)
                for op in g.ops)
    return replace(g, name=name, tensors=tensors, inputs=tuple(new[n] for n in g.inputs),
                   outputs=tuple(new[n] for n in g.outputs), ops=ops)


__all__ = ["canonical_names"]
