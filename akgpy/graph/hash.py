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

from typing import TYPE_CHECKING

from ..ops.registry import NZ, canonical, lookup, reduce_axes

if TYPE_CHECKING:  # graph/ir.py imports this module (Graph.hash)
    from .ir import Graph


# Attrs whose absence means this value: written-out defaults must not split cache entries.
DEFAULTS = {"transpose_a": False, "transpose_b": False, "fake_output": False, "pad_val": 0, "axis": -1,
            "stride": [1, 1, 1, 1], "pad_list": [0, 0, 0, 0], "dilation": [1, 1, 1, 1], "groups": 1}
# Attrs that only restate the output dtype, which is hashed anyway.
REDUNDANT = frozenset({"dst_type"})


def _const_value(t) -> str:
    """Constants compare by value in their dtype: 2 and 2.0 in a float32 tensor are one constant."""
    if t.dtype == "bool":
        return repr(bool(t.value))
    if t.dtype.startswith(("int", "uint")):
        return repr(int(t.value))
    return repr(complex(t.value)) if t.dtype.startswith("complex") else repr(float(t.value))


def canonical_form(g: Graph) -> list:
    ref: dict[str, str] = {f: f"in{i}" for i, f in enumerate(g.inputs)}
    T = g.tensors

    def tdesc(name: str) -> list:
        t = T[name]
        return [list(t.shape), t.dtype, t.format == NZ]

    def operand(name: str):
        t = T[name]
        if t.is_const:
            return ["const", _const_value(t), t.dtype, list(t.shape)]
        return ref[name]

    form: list = [["inputs", [tdesc(n) for n in g.inputs]]]
    for i, op in enumerate(g.ops):
        row = lookup(op.name)
        attrs = {}
        for key in row.semantic_attrs:
            if key in op.attrs and key not in REDUNDANT:
                v = op.attrs[key]
                v = list(v) if isinstance(v, tuple) else v
                if key not in DEFAULTS or v != DEFAULTS[key]:
                    attrs[key] = v
        if row.category.name == "REDUCE":
            attrs["axis"] = list(reduce_axes(op, T[op.inputs[0]]))
            attrs["keep_dims"] = bool(op.attrs.get("keep_dims", False))
        for k, o in enumerate(op.outputs):
            ref[o] = f"t{i}.{k}"
        form.append([canonical(op.name), [operand(x) for x in op.inputs],
                     sorted(attrs.items()), [tdesc(o) for o in op.outputs]])
    form.append(["outputs", [ref[o] for o in g.outputs], sorted(ref[o] for o in g.fake_outputs)])
    return form


def structural_hash(g: Graph) -> str:
    blob = json.dumps(canonical_form(g), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()
