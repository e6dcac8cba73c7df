"""`dump_composite`: a Graph written as MindSpore/AKG composite JSON, the exact inverse of
`frontends/composite.load_composite` (tests/test_graph.py round-trips every corpus graph).

It lives beside the IR, not in the frontend, so that `Graph.to_composite()` needs no later
stage: writing reads only the Graph, reading needs the op table and the frontend's rules.
"""
from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # graph/ir.py imports this module (Graph.to_composite)
    from .ir import Graph, Op, Tensor


def _tensor_json(t: Tensor, fmt: str | None = None) -> dict:
    d = {"data_type": t.dtype, "format": fmt or t.format, "shape": list(t.shape), "tensor_name": t.name}
    if t.is_const:
        d["tensor_name"] = t.name.split("__c")[0]
        d["value"] = t.value
    return d


def _attr_type(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "str"
    if isinstance(v, (list, tuple)):
        return "listStr" if v and isinstance(v[0], str) else "listInt"
    return "str"


def dump_composite(g: Graph, *, indent: int | None = None) -> str:
    """Write a Graph as composite JSON; load_composite of the result equals g."""
    T = g.tensors

    def op_json(op: Op) -> dict:
        ins = [[_tensor_json(T[n]) for n in op.inputs]] if op.name == "AddN" else \
              [[_tensor_json(T[n])] for n in op.inputs]
        attrs = [{"data_type": _attr_type(v), "name": k, "value": list(v) if isinstance(v, tuple) else v}
                 for k, v in op.attrs.items()]
        d = {"attr": attrs or None, "impl_path": "", "input_desc": ins, "name": op.name,
             "output_desc": [_tensor_json(T[n]) for n in op.outputs]}
        d.update(op.extra)
        return d

    out_fmt = g.meta.get("output_format", {})
    doc = {"composite": True, "op": g.name, "process": g.process,
           "input_desc": [[_tensor_json(T[n])] for n in g.inputs] or None,
           "output_desc": [_tensor_json(T[n], out_fmt.get(n)) for n in g.outputs],
           "op_desc": [op_json(op) for op in g.ops], "platform": "AKG"}
    doc.update({k: v for k, v in g.meta.items() if k != "output_format"})
    return json.dumps(doc, indent=indent)
