"""Dim collapsing: a graph of transposes and same-shape elementwise ops whose arrays keep runs
of dims together in every layout is the same computation on fewer, longer dims.

yolo's head moves [32, 3, 85, 52, 52] to [32, 52, 52, 3, 85]: (3, 85) and (52, 52) stay
adjacent and in order on both sides, so it is [32, 255, 2704] -> [32, 2704, 255]. As five
dims, the longest contiguous run a transpose tile can read is a row of 52, and of 85 it can
write; collapsed, both sides are long and the tile is chosen freely. Collapsing is a view of
the same row-major memory, so kernel arguments change shape only (Program reshapes them, for
free) and no schedule needs to know.

A cut is a boundary between dims k - 1 and k of a tensor that must stay. A transpose cuts its
input wherever two input dims do not stay adjacent and in order in the output (and its output
likewise); an elementwise op makes all its operands and its result share cuts; a transpose
carries a cut on either side to the matching boundary on the other. Iterated to a fixed point,
what is left uncut could merge; of that, only the run each transpose reads with stride 1 does
(every other boundary of a transpose's input is cut, and the fixed point is taken again).
"""
from __future__ import annotations

import dataclasses
from math import prod

from ..ops.registry import OPS, Category
from .ir import NZ, Graph, Op

# elementwise ops whose arrays are stored as they are shaped (not the complex ones: float pairs)
_NOT_PLAIN = {"InplaceAssign", "Assign", "Complex", "CReal", "CImag"}


def collapse_dims(g: Graph) -> tuple[Graph, str] | None:
    """(the collapsed graph, a line saying what merged), or None when no transpose loses a dim
    or the graph holds an op this does not model (a reduction, a broadcast, a reshape, ...)."""
    if g.kind != "fused" or not any(op.name == "Transpose" for op in g.ops):
        return None
    full = {}  # tensor -> rank, for the tensors whose dims collapse (not those of one element)
    for op in g.ops:
        d = OPS.get(op.name)
        if d is None or op.name in _NOT_PLAIN or (d.category != Category.ELEMWISE and op.name != "Transpose"):
            return None
        names = [*op.inputs, *op.outputs]
        ts = [g.tensors[n] for n in names]
        if any(t.format == NZ or t.dtype.startswith("complex") for t in ts):  # NZ: a fractal layout
            return None
        big = [t for t in ts if t.size != 1]
        if op.name == "Transpose":
            if len(big) != 2:
                return None
        elif len({t.shape for t in big}) > 1:  # a broadcast of more than one element
            return None
        full.update((t.name, len(t.shape)) for t in big)
    cuts = _settled(g, full, {n: set() for n in full})
    # only the run each transpose reads with stride 1 merges: the other runs are left as the
    # tile planner knows them (merged written runs made 15-row tiles of [.., 3, 85] rows,
    # 1.2-1.3x slower than its 5-row ones on yolo ~9756; collapsed [.., 3, 3] rows gained nothing)
    for op in g.ops:
        if op.name == "Transpose":
            src = op.inputs[0]
            last = _groups(full[src], cuts[src])[-1]
            cuts[src] |= set(range(1, last[0] + 1))
    cuts = _settled(g, full, cuts)
    shapes = {n: _merged(g.tensors[n].shape, cuts[n]) for n in full}
    lost = [op for op in g.ops if op.name == "Transpose" and shapes[op.inputs[0]][-1] != g.tensors[op.inputs[0]].shape[-1]]
    if not lost:
        return None
    tensors = {}
    for n, t in g.tensors.items():
        if n in shapes:
            tensors[n] = dataclasses.replace(t, shape=shapes[n])
        elif t.size == 1 and len(t.shape) > 1:  # broadcasts against any rank
            tensors[n] = dataclasses.replace(t, shape=(1,))
        else:
            tensors[n] = t
    ops = []
    for op in g.ops:
        if op.name == "Transpose":
            perm = _perm(op)
            groups = _groups(full[op.inputs[0]], cuts[op.inputs[0]])
            starts = [grp[0] for grp in groups]
            new = tuple(starts.index(perm[j]) for j in range(len(perm)) if j == 0 or j in cuts[op.outputs[0]])
            op = Op(op.name, op.inputs, op.outputs, {**op.attrs, "perm": new}, op.extra)
        ops.append(op)
    out = dataclasses.replace(g, tensors=tensors, ops=tuple(ops))  # a new Graph validates itself
    t = lost[0]
    note = (f"dims collapsed (kept together in every layout): {t.inputs[0]} {list(g.tensors[t.inputs[0]].shape)} -> "
            f"{list(shapes[t.inputs[0]])}, {t.outputs[0]} {list(g.tensors[t.outputs[0]].shape)} -> "
            f"{list(shapes[t.outputs[0]])}" + (f" (and {len(lost) - 1} more transpose(s))" if len(lost) > 1 else ""))
    return out, note


def _settled(g: Graph, full: dict[str, int], cuts: dict[str, set[int]]) -> dict[str, set[int]]:
    """`cuts` grown until every op agrees with them (the fixed point of the module docstring)."""
    changed = True
    while changed:
        changed = False
        for op in g.ops:
            names = [n for n in (*op.inputs, *op.outputs) if n in full]
            if op.name != "Transpose":
                union = set().union(*(cuts[n] for n in names))
                for n in names:
                    changed |= not union <= cuts[n]
                    cuts[n] |= union
                continue
            src, dst = op.inputs[0], op.outputs[0]
            pairs = _adjacent(_perm(op))
            every = set(range(1, full[src]))
            grown_src = cuts[src] | (every - pairs.keys()) | {k for k, j in pairs.items() if j in cuts[dst]}
            grown_dst = cuts[dst] | (every - set(pairs.values())) | {pairs[k] for k in grown_src if k in pairs}
            if grown_src != cuts[src] or grown_dst != cuts[dst]:
                changed = True
                cuts[src], cuts[dst] = grown_src, grown_dst
    return cuts


def _perm(op: Op) -> tuple[int, ...]:
    return tuple(int(p) for p in op.attr("perm"))  # the validator checked it is a permutation


def _adjacent(perm) -> dict[int, int]:
    """Input boundary k (between dims k - 1 and k) -> the output boundary it becomes, for the
    boundaries whose two dims stay adjacent and in order (output dim j reads input dim perm[j]);
    every other boundary, on either side, is a cut."""
    inv = {p: j for j, p in enumerate(perm)}
    return {k: inv[k] for k in range(1, len(perm)) if inv[k] == inv[k - 1] + 1}


def _groups(rank: int, cuts: set[int]) -> list[list[int]]:
    groups = [[0]] if rank else []
    for k in range(1, rank):
        if k in cuts:
            groups.append([k])
        else:
            groups[-1].append(k)
    return groups


def _merged(shape, cuts: set[int]) -> tuple[int, ...]:
    return tuple(prod(shape[k] for k in grp) for grp in _groups(len(shape), cuts))
