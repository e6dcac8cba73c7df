"""Transpose sinking (layout propagation) on model graphs: a pure Graph -> Graph rewrite.

Frontends read NCHW models but akgpy's convolutions are NHWC, so every conv comes wrapped in
Transposes. This pass moves a Transpose past the op that reads it (elementwise and broadcast
ops, reductions, PadAkg, Pool2D): the op then runs in the Transpose's source layout, its other
operands transposed (constants and bound weights once, here) and one Transpose after it. A
Transpose meeting its inverse cancels, so a conv chain stays NHWC from conv to conv; the
technique of onnxruntime's transpose optimizer and TVM's ConvertLayout.

Exact: every rewrite is an identity of index maps. A move is taken only when the graph's
Transpose count does not grow (an operand that needs a Transpose may reuse an existing one,
never get a new one), and graph inputs and outputs keep their names, shapes and layouts.
A Transpose that moves only unit dims becomes a Reshape (the same bytes).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ..ops.registry import NZ, Category, lookup, reduce_axes
from .ir import Graph, Op, Tensor

# elementwise ops whose semantics involve no axis (the rest of the ELEMWISE category writes in place)
_SIDE_EFFECT = frozenset({"InplaceAssign", "Assign"})
_REDUCE = frozenset({"ReduceSum", "ReduceMax"})
# how many moves a graph may take: each one is O(ops); a bound, not a tuning knob
_MAX_MOVES_PER_OP = 8


def _inverse(p) -> list[int]:
    inv = [0] * len(p)
    for k, v in enumerate(p):
        inv[v] = k
    return inv


def _compose(first, then) -> list[int]:
    """x.transpose(first).transpose(then) == x.transpose(_compose(first, then))."""
    return [first[t] for t in then]


def _identity(p) -> bool:
    return list(p) == list(range(len(p)))


class _State:
    def __init__(self, g: Graph):
        self.g = g
        self.ops: list[Op] = list(g.ops)
        self.tensors: dict[str, Tensor] = dict(g.tensors)
        self.bound: dict[str, Any] = dict(g.bound)
        self.inputs: list[str] = list(g.inputs)
        self.outputs = set(g.outputs)
        self.made_weights: set[str] = set()
        self.reindex()

    def reindex(self):
        self.producer: dict[str, int] = {}
        self.consumers: dict[str, list[int]] = {}
        for i, op in enumerate(self.ops):
            for o in op.outputs:
                self.producer[o] = i
            for t in op.inputs:
                self.consumers.setdefault(t, []).append(i)

    def transpose_of(self, name: str):
        """(source, perm) when `name` is a Transpose's output."""
        i = self.producer.get(name)
        if i is None or self.ops[i].name != "Transpose":
            return None
        op = self.ops[i]
        return op.inputs[0], list(op.attr("perm"))

    def find_transpose(self, src: str, perm) -> int | None:
        for i in self.consumers.get(src, []):
            op = self.ops[i]
            if op.name == "Transpose" and list(op.attr("perm")) == list(perm):
                return i
        return None

    def count(self) -> int:
        return sum(op.name == "Transpose" for op in self.ops)

    def fresh(self, base: str) -> str:
        name, k = base, 0
        while name in self.tensors:
            k += 1
            name = f"{base}_{k}"
        return name


def _weight_value(st: _State, name: str):
    t = st.tensors[name]
    if t.value is not None and t.size == 1:
        return None  # a scalar broadcasts the same in any layout
    if name in st.bound and name not in st.outputs:
        return np.asarray(st.bound[name])
    return None


def _plain(t: Tensor) -> bool:
    return t.format in ("DefaultFormat", "", None) and t.format != NZ


def _try_move(st: _State, i: int) -> bool:
    """Move a Transpose feeding op i past it, if that keeps the Transpose count; True if moved."""
    op = st.ops[i]
    if len(op.outputs) != 1 or op.name == "Transpose":
        return False
    out = st.tensors[op.outputs[0]]
    if not _plain(out):
        return False
    opdef = lookup(op.name)
    elementwise = opdef.category == Category.ELEMWISE and op.name not in _SIDE_EFFECT
    if not (elementwise or op.name in _REDUCE or op.name in ("PadAkg", "Pool2D")):
        return False
    # the Transpose to move: the first operand of the op's full rank that is one
    rank = len(st.tensors[op.inputs[0]].shape) if not elementwise else len(out.shape)
    perm = None
    for t in op.inputs:
        tp = st.transpose_of(t)
        if tp is not None and len(tp[1]) == rank and len(st.tensors[t].shape) == rank:
            perm = tp[1]
            break
    if perm is None or (not elementwise and st.transpose_of(op.inputs[0]) is None):
        return False
    inv = _inverse(perm)
    new_inputs, removed, new_weights, moved_before = [], set(), {}, []
    views = []  # (operand position, shape): operands that only need a Reshape
    for t in op.inputs:
        tt = st.tensors[t]
        tp = st.transpose_of(t)
        if not _plain(tt):
            return False
        if tp is not None and tp[1] == perm:
            new_inputs.append(tp[0])
            if t not in st.outputs and all(c == i for c in st.consumers.get(t, [])):
                removed.add(t)
            continue
        if tt.size == 1 and len(tt.shape) <= rank:
            new_inputs.append(t)  # broadcasts the same in any layout
            continue
        if not elementwise:
            return False
        w = _weight_value(st, t)
        if w is not None:
            full = w.reshape((1,) * (rank - w.ndim) + w.shape)
            new_weights[t] = np.ascontiguousarray(full.transpose(inv))
            new_inputs.append(t)  # renamed below
            continue
        padded = (1,) * (rank - len(tt.shape)) + tuple(tt.shape)
        moved = [d for d in inv if padded[d] != 1]
        if len(padded) == rank and moved == sorted(moved):  # moves unit dims only: a view
            views.append((len(new_inputs), tuple(padded[d] for d in inv)))
            new_inputs.append(t)
            continue
        if len(tt.shape) != rank:
            return False
        j = st.find_transpose(t, inv)  # an existing Transpose of the operand: shared, not added
        if j is None:
            return False
        new_inputs.append(st.ops[j].outputs[0])
        if j > i:
            moved_before.append(j)
    # the output side: consumers that are Transposes compose with the moved one
    cons = st.consumers.get(out.name, [])
    # new op attributes and output layout
    attrs = dict(op.attrs)
    out_perm = perm  # out == out_src.transpose(out_perm)
    src_shape = st.tensors[new_inputs[0]].shape if not elementwise else None
    if op.name in _REDUCE:
        x = st.tensors[op.inputs[0]]
        axes = reduce_axes(op, x)
        new_axes = sorted(perm[a] for a in axes)
        attrs["axis"] = new_axes
        if attrs.get("keep_dims", False):
            out_shape = tuple(1 if d in new_axes else s for d, s in enumerate(src_shape))
        else:
            kept_src = [d for d in range(rank) if d not in new_axes]
            kept = [d for d in range(rank) if d not in axes]
            out_perm = [kept_src.index(perm[d]) for d in kept]
            out_shape = tuple(src_shape[d] for d in kept_src)
    elif op.name == "PadAkg":
        attrs["head"] = [list(op.attr("head"))[inv[d]] for d in range(rank)]
        attrs["tail"] = [list(op.attr("tail"))[inv[d]] for d in range(rank)]
        out_shape = tuple(out.shape[inv[d]] for d in range(rank))
    elif op.name == "Pool2D":
        fmt = op.attr("data_format", "NCHW")
        to = {("NCHW", (0, 3, 1, 2)): "NHWC", ("NHWC", (0, 2, 3, 1)): "NCHW"}.get((fmt, tuple(perm)))
        if to is None:
            return False
        attrs["data_format"] = to
        out_shape = tuple(out.shape[inv[d]] for d in range(rank))
    else:
        out_shape = tuple(out.shape[inv[d]] for d in range(rank))
    cancels = sum(1 for c in set(cons) if st.ops[c].name == "Transpose"
                  and _identity(_compose(out_perm, st.ops[c].attr("perm"))))
    keep_out = out.name in st.outputs or any(st.ops[c].name != "Transpose" for c in cons)
    needs_out = not _identity(out_perm)
    delta = -len(removed) + (int(keep_out) - cancels if needs_out else 0)
    if delta > 0:
        return False
    # commit: weights, the op in the source layout, one Transpose after it
    names = []
    for t, v in zip(op.inputs, new_inputs):
        if t in new_weights:
            name = st.fresh(f"{t}__t")
            st.tensors[name] = Tensor(name, tuple(new_weights[t].shape), st.tensors[t].dtype)
            st.bound[name] = new_weights[t]
            st.inputs.append(name)
            st.made_weights.add(name)
            v = name
        names.append(v)
    for j in sorted(moved_before, reverse=True):
        st.ops.insert(i, st.ops.pop(j))
        i += 1
    for k, shape in views:
        name = st.fresh(f"{names[k]}__v")
        st.tensors[name] = Tensor(name, shape, st.tensors[names[k]].dtype)
        st.ops.insert(i, Op("Reshape", (names[k],), (name,), {"shape": list(shape)}))
        names[k] = name
        i += 1
    inner = st.fresh(out.name + "__l") if needs_out else out.name
    if needs_out:
        st.tensors[inner] = Tensor(inner, out_shape, out.dtype)
        st.ops[i] = dataclasses.replace(op, inputs=tuple(names), outputs=(inner,), attrs=attrs)
        st.ops.insert(i + 1, Op("Transpose", (inner,), (out.name,), {"perm": list(out_perm)}))
    else:
        st.tensors[out.name] = Tensor(out.name, out_shape, out.dtype)
        st.ops[i] = dataclasses.replace(op, inputs=tuple(names), attrs=attrs)
    st.reindex()
    _cleanup(st)
    return True


def _cleanup(st: _State) -> None:
    """Compose Transpose pairs (dropping identities), then drop unused Transposes."""
    changed = True
    while changed:
        changed = False
        for i, op in enumerate(st.ops):
            if op.name != "Transpose":
                continue
            tp = st.transpose_of(op.inputs[0])
            if tp is None:
                continue
            p = _compose(tp[1], op.attr("perm"))
            out = op.outputs[0]
            if _identity(p) and out not in st.outputs:
                st.ops[i:i + 1] = []
                st.ops = [dataclasses.replace(o, inputs=tuple(tp[0] if t == out else t for t in o.inputs))
                          for o in st.ops]
            elif _identity(p) and tp[0] in st.producer and tp[0] not in st.outputs:
                # the output keeps its name: the source's producer writes it directly
                src = tp[0]
                del st.ops[i]
                st.ops = [dataclasses.replace(o, inputs=tuple(out if t == src else t for t in o.inputs),
                                              outputs=tuple(out if t == src else t for t in o.outputs))
                          for o in st.ops]
            elif not _identity(p):
                st.ops[i] = dataclasses.replace(op, inputs=(tp[0],), attrs={**op.attrs, "perm": p})
            else:
                continue
            st.reindex()
            changed = True
            break
        dead = [i for i, op in enumerate(st.ops) if op.name == "Transpose" and op.outputs[0] not in st.outputs
                and not st.consumers.get(op.outputs[0])]
        if dead:
            for i in reversed(dead):
                del st.ops[i]
            st.reindex()
            changed = True


def _unit_moves_to_reshape(st: _State) -> None:
    """A Transpose that keeps its non-unit dims in order is a Reshape (a view of the same bytes)."""
    for i, op in enumerate(st.ops):
        if op.name != "Transpose":
            continue
        shape = st.tensors[op.inputs[0]].shape
        order = [d for d in op.attr("perm") if shape[d] != 1]
        if order == sorted(order):
            st.ops[i] = Op("Reshape", op.inputs, op.outputs, {"shape": list(st.tensors[op.outputs[0]].shape)})


def sink_transposes(graph: Graph) -> Graph:
    """The graph with its Transposes moved toward the outputs and inverse pairs cancelled; the same
    function of the same inputs, never more Transposes. Graphs without Transposes come back as is."""
    if not any(op.name == "Transpose" for op in graph.ops):
        return graph
    st = _State(graph)
    before = st.count()
    budget = _MAX_MOVES_PER_OP * max(len(st.ops), 1)
    moved = True
    while moved and budget > 0:
        moved, i = False, 0
        while i < len(st.ops) and budget > 0:
            if _try_move(st, i):
                moved, budget = True, budget - 1
            i += 1
    _unit_moves_to_reshape(st)
    if st.count() > before:  # the rules never add one; a guard, not a path
        return graph
    used = {t for op in st.ops for t in op.inputs} | st.outputs
    inputs = [t for t in st.inputs if t in used or t not in st.bound]
    live = set(inputs) | {o for op in st.ops for o in op.outputs} | {t for op in st.ops for t in op.inputs}
    tensors = {k: v for k, v in st.tensors.items() if k in live or k in graph.outputs}
    bound = {k: v for k, v in st.bound.items() if k in inputs}
    return dataclasses.replace(graph, tensors=tensors, inputs=tuple(inputs), ops=tuple(st.ops), bound=bound)

