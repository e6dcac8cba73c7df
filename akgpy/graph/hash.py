"""Canonical structural hash of a Graph: the first part of every tuning-cache key.

Two graphs hash equal iff they compute the same function on the same argument layout:
- tensor names are replaced by their position (inputs by argument index, op outputs by
  op index, constants by value), so renaming never changes the hash;
- op aliases are canonicalised (TensorAdd == Add);
- only semantic attrs enter (the `semantic_attrs` column of the op table; axis lists are
  normalised), so MindSpore leftovers (visited, pri_format, is_backed_cast, x_shape,
  enable_atomic_add, stitch, parallel_fusion ...) and the kernel name do not;
- `format` enters only as FRACTAL_NZ vs. plain, since on CPU/CUDA the other labels are
  only names for the physical shape already hashed.
Any change of op, semantic attr, shape, dtype, wiring or output order changes it.
"""
from __future__ import annotations

import hashlib
import json

from ..ops.registry import canonical_name, lookup, reduce_axes
from .ir import NZ, Graph


def canonical_form(g: Graph) -> list:
    ref: dict[str, str] = {f: f"in{i}" for i, f in enumerate(g.inputs)}
    T = g.tensors

    def tdesc(name: str) -> list:
        t = T[name]
        return [list(t.shape), t.dtype, t.format == NZ]

    def operand(name: str):
        t = T[name]
        if t.is_const:
            return ["const", repr(t.value), t.dtype, list(t.shape)]
        return ref[name]

    form: list = [["inputs", [tdesc(n) for n in g.inputs]]]
    for i, op in enumerate(g.ops):
        row = lookup(op.name)
        attrs = {}
        for key in row.semantic_attrs:
            if key in op.attrs:
                v = op.attrs[key]
                attrs[key] = list(v) if isinstance(v, tuple) else v
        if row.category.name == "REDUCE":
            attrs["axis"] = list(reduce_axes(op, T[op.inputs[0]]))
            attrs["keep_dims"] = bool(op.attrs.get("keep_dims", False))
        for k, o in enumerate(op.outputs):
            ref[o] = f"t{i}.{k}"
        form.append([canonical_name(op.name), [operand(x) for x in op.inputs],
                     sorted(attrs.items()), [tdesc(o) for o in op.outputs]])
    form.append(["outputs", [ref[o] for o in g.outputs], sorted(ref[o] for o in g.fake_outputs)])
    return form


def structural_hash(g: Graph) -> str:
    blob = json.dumps(canonical_form(g), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()
