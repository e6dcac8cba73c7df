"""MindSpore/AKG composite JSON <-> Graph, exact in both directions (the writer,
`dump_composite`, is graph/dump.py's, re-exported here).

The format (../shared/docs/composite-format.md) links tensors only by `tensor_name`, lists
ops in topological order, flattens each op's list-of-lists `input_desc`, and marks
compile-time scalars with `value`. A desc seen twice must agree on shape and dtype; the
defining desc (top-level input or producer output) is authoritative for `format`.

Version 2 (MindSpore 2.x) passes some attributes as constant inputs whose `value` is an int or a
list (ReduceSum's axis, Transpose's perm, ...): `VALUE_ATTRS` maps each (op, input position) to
the attribute the op table reads, and the loader turns such an input into that attribute, so a
version-2 graph is the graph its version-1 twin gives (same ops, attrs and hash); `dump_composite`
writes the attribute form (docs/ops.md, "Version 2").
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..errors import AkgpyError, AttrError, FormatError, ShapeError
from ..graph.dump import dump_composite
from ..graph.ir import Graph, Op, Tensor
from ..ops.registry import squeeze

__all__ = ["load_composite", "dump_composite", "VALUE_ATTRS"]

_TOP_KEYS = {"composite", "op", "process", "input_desc", "output_desc", "op_desc"}
_OP_KEYS = {"name", "attr", "input_desc", "output_desc"}

# Version 2: op -> {position in the op's inputs: the attribute a constant input there carries}.
VALUE_ATTRS: dict[str, dict[int, str]] = {
    "ReduceSum": {1: "axis"}, "ReduceMax": {1: "axis"}, "ReduceMin": {1: "axis"},
    "Reshape": {1: "shape"}, "Transpose": {1: "perm"}, "BroadcastTo": {1: "shape"}, "Tile": {1: "multiples"},
    "StridedSlice": {1: "begin", 2: "end", 3: "strides"},
}
# Attributes MindSpore sends whose other values change what the op computes, and which akgpy
# computes only at this value (Log is log_base(scale * x + shift); base -1 means e).
_ONLY_DEFAULT: dict[str, dict[str, object]] = {"Log": {"base": -1.0, "scale": 1.0, "shift": 0.0}}


def _read(src: Any) -> tuple[dict, str]:
    if isinstance(src, dict):
        return src, "<dict>"
    if isinstance(src, (bytes, bytearray)):
        src = src.decode("utf-8", errors="replace")
    if isinstance(src, os.PathLike) or (isinstance(src, str) and not src.lstrip().startswith(("{", "["))):
        path = Path(src)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError, ValueError) as e:  # ValueError: NUL byte in the path
            raise FormatError(f"cannot read composite file {str(path)!r}: {e}") from None
        origin = str(path)
    elif isinstance(src, str):
        text, origin = src, "<string>"
    else:
        raise FormatError(f"load_composite takes a path, a JSON string or a dict, not {type(src).__name__}")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise FormatError(f"malformed JSON in {origin}: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise FormatError(f"malformed JSON in {origin}: nested too deeply") from None
    if not isinstance(data, dict):
        raise FormatError(f"{origin}: top level must be a JSON object, got {type(data).__name__}")
    return data, origin


def _desc(d: Any, *, op: str | None, where: str) -> Tensor:
    if not isinstance(d, dict):
        raise FormatError(f"{where}: tensor desc must be an object, got {d!r:.60}", op=op)
    name = d.get("tensor_name")
    if not isinstance(name, str) or not name:
        raise FormatError(f"{where}: tensor desc without a tensor_name", op=op)
    shape = d.get("shape")
    if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool) for s in shape):
        raise FormatError(f"{where}: shape must be a list of ints, got {shape!r:.60}", op=op, tensor=name)
    if any(s < 0 for s in shape):
        raise ShapeError(f"{where}: negative dimension in shape {shape} (dynamic shapes are not supported)",
                         op=op, tensor=name)
    dtype = d.get("data_type")
    if not isinstance(dtype, str):
        raise FormatError(f"{where}: data_type missing or not a string", op=op, tensor=name)
    fmt = d.get("format") or "DefaultFormat"
    if not isinstance(fmt, str):
        raise FormatError(f"{where}: format must be a string", op=op, tensor=name)
    value = d.get("value")
    if value is not None:
        if isinstance(value, list) and len(value) == 1:
            value = value[0]
        if isinstance(value, list) and op is not None:
            known = ", ".join(f"{o} input {k} ({a})" for o, m in VALUE_ATTRS.items() for k, a in m.items())
            raise FormatError(f"{where}: list value {value!r:.60} where {op.split('#')[0]} takes none; "
                              f"list values are read only as attributes: {known}", op=op, tensor=name)
        if not isinstance(value, (int, float, bool)):
            raise FormatError(f"{where}: constant value must be a number or bool, got {value!r:.40}",
                              op=op, tensor=name)
    return Tensor(name, tuple(shape), dtype, fmt, value)


def _as_list(v: Any) -> list:
    return list(v) if isinstance(v, (list, tuple)) else [v]


def _attrs(raw: Any, *, op: str) -> dict[str, Any]:
    if raw is None or raw == {}:
        return {}
    if isinstance(raw, dict):  # tolerate {name: value}
        return {k: (tuple(v) if isinstance(v, list) else v) for k, v in raw.items()}
    if not isinstance(raw, list):
        raise FormatError(f"attr must be a list, null or {{}}, got {type(raw).__name__}", op=op)
    out = {}
    for a in raw:
        if not isinstance(a, dict) or not isinstance(a.get("name"), str) or "value" not in a:
            raise FormatError(f"attr entry needs a name and a value, got {a!r:.80}", op=op)
        v = a["value"]
        out[a["name"]] = tuple(v) if isinstance(v, list) else v
    return out


def _value_attr(d: Any, attr: str, *, op: str, where: str) -> tuple[int, ...] | None:
    """The attribute a version-2 value input carries (an int or a list of ints, as a tuple), or
    None where the desc holds no value (an ordinary tensor input)."""
    if not isinstance(d, dict) or "value" not in d:
        return None
    v = d["value"]
    items = v if isinstance(v, list) else [v]
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in items):
        raise FormatError(f"{where}: {attr} must be an int or a list of ints, got {v!r:.60}", op=op,
                          tensor=d.get("tensor_name"))
    return tuple(items)


def _placeholder_output(in_names, out_names, tensors) -> bool:
    """MindSpore 2.x declares an optimizer's Assign with a one-element output when only the write
    matters (the Adam update): that slot is a placeholder, never written, like InplaceAssign's
    fake_output (docs/ops.md)."""
    if len(in_names) != 2 or len(out_names) != 1:
        return False
    target, out = tensors[in_names[0]], tensors[out_names[0]]
    return out.size == 1 and target.size != 1


def _check_v2_attrs(op_name: str, attrs: dict[str, Any], *, op: str) -> None:
    for key, default in _ONLY_DEFAULT.get(op_name, {}).items():
        if attrs.get(key, default) != default:
            raise AttrError(f"{op_name} with {key}={attrs[key]!r} is not supported (only {default!r})", op=op)
    # ReduceSum's skip_mode: an empty axis list means "no reduction", not "every axis".
    if attrs.get("skip_mode") is True and attrs.get("axis", ()) in ((), []):
        raise AttrError(f"{op_name} with skip_mode and no axis (an identity) is not supported", op=op)


def load_composite(src: Any) -> Graph:
    """Parse a composite-JSON subgraph (`.info`/`.json` path, JSON text, or dict) into a Graph."""
    data, origin = _read(src)
    for key in ("op_desc", "output_desc"):
        if not isinstance(data.get(key), list):
            raise FormatError(f"{origin}: '{key}' must be a list")
    raw_inputs = data.get("input_desc") or []
    if not isinstance(raw_inputs, list):
        raise FormatError(f"{origin}: 'input_desc' must be a list or null")
    name = data.get("op", "akgpy_kernel")
    if not isinstance(name, str):
        raise FormatError(f"{origin}: 'op' (the kernel name) must be a string")

    tensors: dict[str, Tensor] = {}

    def define(t: Tensor, *, op: str | None) -> None:
        old = tensors.get(t.name)
        if old is not None and old != t:
            raise ShapeError(f"{t.name!r} described twice differently: {old.dtype}{list(old.shape)} vs "
                             f"{t.dtype}{list(t.shape)}", op=op, tensor=t.name)
        tensors[t.name] = t

    def agree(t: Tensor, *, op: str) -> str:
        if t.is_const:
            old = tensors.get(t.name)
            if old is None or old == t:
                tensors[t.name] = t
                return t.name
            # Constants are per-op scalars: two ops may reuse one name for different values.
            k = 1
            while f"{t.name}__c{k}" in tensors and tensors[f"{t.name}__c{k}"] != t:
                k += 1
            alias = f"{t.name}__c{k}"
            tensors[alias] = Tensor(alias, t.shape, t.dtype, t.format, t.value)
            return alias
        old = tensors.get(t.name)
        # [] and [1] (or other shapes differing only in unit dims) name the same data.
        if old is not None and (old.dtype != t.dtype or (old.shape != t.shape and (
                old.size != t.size or squeeze(old.shape) != squeeze(t.shape)))):
            raise ShapeError(f"{op} reads {t.name!r} as {t.dtype}{list(t.shape)} but it is "
                             f"{old.dtype}{list(old.shape)}", op=op, tensor=t.name)
        return t.name

    inputs = []
    for k, entry in enumerate(raw_inputs):
        if not isinstance(entry, list) or len(entry) != 1:
            raise FormatError(f"{origin}: input_desc[{k}] must be a one-element list")
        t = _desc(entry[0], op=None, where=f"input_desc[{k}]")
        if t.is_const:
            raise FormatError(f"input_desc[{k}] is a constant; constants belong to op inputs", tensor=t.name)
        if t.name in inputs:
            raise FormatError(f"input_desc[{k}] lists {t.name!r} a second time", tensor=t.name)
        define(t, op=None)
        inputs.append(t.name)

    ops = []
    for i, raw in enumerate(data["op_desc"]):
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
            raise FormatError(f"op_desc[{i}] must be an object with a string 'name'")
        op_name = raw["name"]
        label = f"{op_name}#{i}"
        ins_raw, outs_raw = raw.get("input_desc") or [], raw.get("output_desc")
        if not isinstance(ins_raw, list) or not isinstance(outs_raw, list):
            raise FormatError("input_desc/output_desc must be lists", op=label)
        in_names = []
        attrs = _attrs(raw.get("attr"), op=label)
        value_attrs = VALUE_ATTRS.get(op_name, {})
        position = 0
        for j, group in enumerate(ins_raw):
            group = group if isinstance(group, list) else [group]
            for t in group:
                where = f"op_desc[{i}].input_desc[{j}]"
                key = value_attrs.get(position)
                position += 1
                v = _value_attr(t, key, op=label, where=where) if key else None
                if v is not None:
                    if key in attrs and tuple(_as_list(attrs[key])) != v:
                        raise FormatError(f"{where}: {key} {list(v)} differs from the attribute {attrs[key]!r}",
                                          op=label, tensor=t.get("tensor_name"))
                    attrs[key] = v
                    continue
                in_names.append(agree(_desc(t, op=label, where=where), op=label))
        _check_v2_attrs(op_name, attrs, op=label)
        out_names = []
        for j, t in enumerate(outs_raw):
            td = _desc(t, op=label, where=f"op_desc[{i}].output_desc[{j}]")
            if td.is_const:
                raise FormatError("an op output cannot be a constant", op=label, tensor=td.name)
            define(td, op=label)
            out_names.append(td.name)
        if op_name == "Assign" and _placeholder_output(in_names, out_names, tensors):
            attrs.setdefault("fake_output", True)
        extra = {k: v for k, v in raw.items() if k not in _OP_KEYS}
        ops.append(Op(op_name, tuple(in_names), tuple(out_names), attrs, extra=extra))

    outputs = []
    for j, t in enumerate(data["output_desc"]):
        td = _desc(t, op=None, where=f"output_desc[{j}]")
        if td.name not in tensors:
            raise ShapeError("graph output is never produced", tensor=td.name)
        agree(td, op="output_desc")
        outputs.append(td.name)

    meta = {k: v for k, v in data.items() if k not in _TOP_KEYS}
    meta["output_format"] = {t["tensor_name"]: t.get("format") for t in data["output_desc"]}
    try:
        return Graph(name, tensors, tuple(inputs), tuple(outputs), tuple(ops),
                     process=str(data.get("process", "cpu")), meta=meta)
    except AkgpyError:
        raise
    except (TypeError, ValueError, KeyError, IndexError) as e:  # attr of the wrong type deep in a rule
        raise FormatError(f"{origin}: invalid graph: {type(e).__name__}: {e}") from None
