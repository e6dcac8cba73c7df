"""Partition a model graph into fused groups (docs/fusion.md has the rules with examples).

Greedy producer-into-consumer merging in topological order, as MindSpore's basic graph-kernel
fusion and TVM's FuseOps do: every op starts as its own group; visiting each op, akgpy tries
to merge the group of each of its producers into the op's group. A merge happens only when
a rule allows it for the two groups' patterns, it creates no cycle in the group graph, and
the merged group stays under the size limit. Every attempt is recorded with its reason.

Patterns, from most to least freely fusing:
    injective    elementwise, broadcast and layout ops (Reshape/Transpose/Pad fold into indices)
    reduce       a group holding reductions (plus injective ops before/after them)
    contraction  a generated MatMul/Conv2D plus its elementwise epilogue
    opaque       library contractions, numpy fallback ops, Custom: always alone
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable

from ..errors import UnsupportedOpError
from ..graph.ir import Graph, Op
from ..ops.registry import OPS, Category, reduce_axes, squeeze

INJECTIVE, REDUCE, CONTRACTION, OPAQUE = "injective", "reduce", "contraction", "opaque"
CONTRACTIONS = ("MatMul", "Conv2D")


@dataclass(frozen=True)
class Limits:
    """Keeps a group compilable: the isl scheduler's time grows with statements and arrays."""
    max_ops: int = 48
    max_params: int = 24  # kernel inputs + outputs


@dataclass
class Group:
    id: int
    ops: list[int]  # op indices into graph.ops, ascending (a topological order)
    pattern: str
    # "kernel" (akgpy generates it), "library" (BLAS contraction), "fallback" (numpy), "view"
    # (only Reshapes of one tensor: a row-major reshape is the same bytes, so no kernel runs)
    kind: str
    inputs: tuple[str, ...] = ()
    outputs: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"g{self.id}"


@dataclass(frozen=True)
class Decision:
    producer: str  # group label before the merge
    consumer: str  # op label
    merged: bool
    reason: str

    def __str__(self) -> str:
        return f"{'fuse ' if self.merged else 'keep '} {self.producer} -> {self.consumer}: {self.reason}"


@dataclass
class Partition:
    graph: Graph
    groups: list[Group]
    decisions: list[Decision] = field(default_factory=list)

    def group_of(self) -> dict[int, Group]:
        return {i: g for g in self.groups for i in g.ops}

    def subgraph(self, group: Group) -> Graph:
        """The group as a fused Graph of its own: one kernel's worth of ops."""
        g = self.graph
        ops = [g.ops[i] for i in group.ops]
        names = set(group.inputs) | {t for op in ops for t in (*op.inputs, *op.outputs)}
        tensors = {n: g.tensors[n] for n in names}
        return Graph(f"{g.name}_{group.name}", tensors, group.inputs, group.outputs, tuple(ops), g.process)

    def describe(self) -> str:
        lines = [f"partition of {self.graph.name}: {len(self.graph.ops)} ops -> {len(self.groups)} groups"]
        for grp in self.groups:
            ops = ", ".join(self.graph.ops[i].name for i in grp.ops)
            lines.append(f"  {grp.name} [{grp.kind}/{grp.pattern}] {ops}")
            lines.append(f"      in: {', '.join(grp.inputs)}  out: {', '.join(grp.outputs)}")
        lines.append("decisions:")
        lines += [f"  {d}" for d in self.decisions]
        return "\n".join(lines)


def op_pattern(op: Op, library: bool) -> str:
    row = OPS[op.name]
    if op.name in CONTRACTIONS:
        return OPAQUE if library else CONTRACTION
    if row.fallback or row.category == Category.OPAQUE:
        return OPAQUE
    if row.category == Category.REDUCE:
        return REDUCE
    return INJECTIVE


def op_kind(op: Op, library: bool) -> str:
    if op.name in CONTRACTIONS:
        return "library" if library else "kernel"
    return "fallback" if OPS[op.name].fallback else "kernel"


def partition(graph: Graph, *, library: Iterable[int] = (), limits: Limits = Limits(),
              fuse: bool = True) -> Partition:
    """`library`: indices of contraction ops that run through a library kernel (decided by
    the caller, which measured them); they and fallback ops stay alone. `fuse=False` gives
    one group per op (the unfused baseline)."""
    library = set(library)
    for i, op in enumerate(graph.ops):
        if op.name in ("InplaceAssign", "Assign"):
            raise UnsupportedOpError("in-place writes are supported in fused (composite) graphs only, not in "
                                     "model graphs that akgpy partitions", op=op.label(i), tensor=op.inputs[0])
    p = _Partitioner(graph, library, limits)
    if fuse:
        p.run()
    return p.finish()


class _Partitioner:
    def __init__(self, g: Graph, library: set[int], limits: Limits):
        self.g, self.limits = g, limits
        self.producer = {t: i for i, op in enumerate(g.ops) for t in op.outputs}
        self.consumers: dict[str, list[int]] = {}
        for i, op in enumerate(g.ops):
            for t in op.inputs:
                self.consumers.setdefault(t, []).append(i)
        self.dead = _dead_ops(g, self.producer)  # computed but never used: not compiled at all
        self.groups = {i: Group(i, [i], op_pattern(op, i in library), op_kind(op, i in library))
                       for i, op in enumerate(g.ops) if i not in self.dead}
        self.owner = {i: i for i in range(len(g.ops)) if i not in self.dead}  # op -> group id
        self.decisions: list[Decision] = [Decision("-", g.ops[i].label(i), False, "dead: no output of the graph "
                                                   "depends on it; removed") for i in sorted(self.dead)]

    # -- the walk ------------------------------------------------------------------------
    def run(self) -> None:
        # A consumer first joins its reduction producers, then injective ones, then a contraction:
        # a LayerNorm's `x - mean` belongs with the mean (one kernel), not in the epilogue of the
        # MatMul that produced x (which would split LayerNorm into three kernels).
        rank = {REDUCE: 0, INJECTIVE: 1, CONTRACTION: 2, OPAQUE: 3}
        for i, op in enumerate(self.g.ops):
            if i in self.dead:
                continue
            pids = []
            for t in op.inputs:
                if t in self.producer and self.owner[self.producer[t]] not in pids:
                    pids.append(self.owner[self.producer[t]])
            for pid in sorted(pids, key=lambda g: rank[self.groups[g].pattern]):
                if pid in self.groups and pid != self.owner[i]:
                    self._try(pid, i)

    def _try(self, pid: int, consumer_op: int) -> None:
        p, q = self.groups[pid], self.groups[self.owner[consumer_op]]
        label = self._label(p)
        reason = self._rule(p, q, consumer_op)
        ok = reason.startswith("+")
        reason = reason[1:]
        if ok and self._creates_cycle(p, q):
            ok, reason = False, "would create a cycle: another group lies on a path between them"
        if ok and not self._fits(p, q):
            ok, reason = False, (f"size limit: the merged group would exceed {self.limits.max_ops} ops or "
                                 f"{self.limits.max_params} kernel parameters")
        self.decisions.append(Decision(label, self.g.ops[consumer_op].label(consumer_op), ok, reason))
        if ok:
            self._merge(p, q)

    # -- rules: "+reason" merges, "-reason" keeps apart ------------------------------------
    def _rule(self, p: Group, q: Group, consumer_op: int) -> str:
        c = self.g.ops[consumer_op]
        if OPAQUE in (p.pattern, q.pattern):
            who = p if p.pattern == OPAQUE else q
            return f"-{self._label(who)} is opaque ({who.kind}): it runs alone"
        if p.pattern == INJECTIVE and q.pattern == INJECTIVE:
            cat = {OPS[self.g.ops[i].name].category for i in p.ops}
            if Category.LAYOUT in cat or OPS[c.name].category == Category.LAYOUT:
                return "+layout op folds into index arithmetic"
            if Category.BROADCAST in cat or self._broadcasts(c):
                return "+broadcast into elementwise"
            return "+elementwise chain"
        if p.pattern == INJECTIVE and q.pattern == REDUCE:
            return "+elementwise producer into reduction"
        if p.pattern == REDUCE and q.pattern in (INJECTIVE, REDUCE):
            rows = self._rows(p)
            if rows is None:
                return "-a reduction over leading axes: its consumers do not share an outer loop with it"
            out = self.g.tensors[c.outputs[0]].shape
            if q.pattern == REDUCE and self._rows(q) not in (None, rows):
                return f"-reductions over different outer shapes ({list(rows)} vs {list(self._rows(q))})"
            if tuple(out[:len(rows)]) == rows or squeeze(out) == squeeze(rows):
                return f"+reduction stitched into consumer over the same outer shape {list(rows)}"
            return f"-consumer shape {list(out)} does not start with the reduction's outer shape {list(rows)}"
        if p.pattern == CONTRACTION and q.pattern == INJECTIVE:
            size = math.prod(self.g.tensors[self.g.ops[p.ops[0]].outputs[0]].shape)
            out = self.g.tensors[c.outputs[0]]
            if out.size != size:
                return f"-epilogue must keep the {self.g.ops[p.ops[0]].name} output's size ({out.size} vs {size})"
            return f"+elementwise epilogue into {self.g.ops[p.ops[0]].name}"
        if q.pattern == CONTRACTION:
            return "-contractions read their operands from memory (no prologue fusion)"
        return f"-no rule fuses a {p.pattern} group into a {q.pattern} group"

    def _broadcasts(self, op: Op) -> bool:
        out = self.g.tensors[op.outputs[0]]
        return any(not self.g.tensors[t].is_const and self.g.tensors[t].shape != out.shape for t in op.inputs)

    def _rows(self, grp: Group) -> tuple[int, ...] | None:
        """The outer shape all of the group's reductions keep (they reduce trailing axes)."""
        rows = None
        for i in grp.ops:
            op = self.g.ops[i]
            if OPS[op.name].category != Category.REDUCE:
                continue
            x = self.g.tensors[op.inputs[0]]
            axes = reduce_axes(op, x)
            keep = len(x.shape) - len(axes)
            if tuple(axes) != tuple(range(keep, len(x.shape))) or keep == 0:
                return None
            r = tuple(x.shape[:keep])
            if rows is not None and r != rows:
                return None
            rows = r
        return rows

    # -- bookkeeping -----------------------------------------------------------------------
    def _label(self, grp: Group) -> str:
        names = [self.g.ops[i].name for i in grp.ops]
        return f"{{{', '.join(names[:4])}{', ...' if len(names) > 4 else ''}}}"

    def _succ(self, gid: int) -> set[int]:
        out = set()
        for i in self.groups[gid].ops:
            for t in self.g.ops[i].outputs:
                out.update(self.owner[c] for c in self.consumers.get(t, ()) if c in self.owner)
        out.discard(gid)
        return out

    def _creates_cycle(self, p: Group, q: Group) -> bool:
        """A path p -> x -> ... -> q through some other group x (either direction)."""
        for a, b in ((p.id, q.id), (q.id, p.id)):
            stack = [x for x in self._succ(a) if x != b]
            seen = set(stack)
            while stack:
                x = stack.pop()
                for y in self._succ(x):
                    if y == b:
                        return True
                    if y not in seen:
                        seen.add(y)
                        stack.append(y)
        return False

    def _fits(self, p: Group, q: Group) -> bool:
        ops = sorted(p.ops + q.ops)
        if len(ops) > self.limits.max_ops:
            return False
        ins, outs = self._boundary(ops)
        return len(ins) + len(outs) <= self.limits.max_params

    def _merge(self, p: Group, q: Group) -> None:
        keep, gone = (p, q) if p.id < q.id else (q, p)
        keep.ops = sorted(keep.ops + gone.ops)
        order = [INJECTIVE, REDUCE, CONTRACTION]
        keep.pattern = max(p.pattern, q.pattern, key=order.index)
        for i in gone.ops:
            self.owner[i] = keep.id
        del self.groups[gone.id]

    def _boundary(self, ops: list[int]) -> tuple[tuple[str, ...], tuple[str, ...]]:
        g, members = self.g, set(ops)
        made = {t for i in ops for t in g.ops[i].outputs}
        ins: list[str] = []
        for i in ops:
            for t in g.ops[i].inputs:
                if t not in made and t not in ins and not g.tensors[t].is_const:
                    ins.append(t)
        outs = [t for i in ops for t in g.ops[i].outputs
                if t in g.outputs or any(c not in members and c in self.owner for c in self.consumers.get(t, ()))]
        return tuple(ins), tuple(outs)

    def finish(self) -> Partition:
        groups = sorted(self.groups.values(), key=lambda grp: grp.ops[-1])
        # Groups run in the order their last op is ready; a merge never makes a group depend on
        # a later one (no cycles), so ordering by a topological sort of the group graph is safe.
        groups = self._toposort(groups)
        for n, grp in enumerate(groups):
            grp.id = n
            grp.inputs, grp.outputs = self._boundary(grp.ops)
            if all(self.g.ops[i].name == "Reshape" for i in grp.ops) and len(grp.inputs) == 1:
                grp.kind = "view"
        return Partition(self.g, groups, self.decisions)

    def _toposort(self, groups: list[Group]) -> list[Group]:
        by_id = {grp.id: grp for grp in groups}
        indeg = {grp.id: 0 for grp in groups}
        for grp in groups:
            for s in self._succ(grp.id):
                indeg[s] += 1
        ready = sorted((grp.ops[0], grp.id) for grp in groups if indeg[grp.id] == 0)
        out = []
        while ready:
            _, gid = ready.pop(0)
            out.append(by_id[gid])
            for s in self._succ(gid):
                indeg[s] -= 1
                if indeg[s] == 0:
                    ready.append((by_id[s].ops[0], s))
                    ready.sort()
        assert len(out) == len(groups), "fusion produced a cyclic group graph"
        return out


def _dead_ops(g: Graph, producer: dict[str, int]) -> set[int]:
    live, stack = set(), [producer[t] for t in g.outputs if t in producer]
    while stack:
        i = stack.pop()
        if i not in live:
            live.add(i)
            stack.extend(producer[t] for t in g.ops[i].inputs if t in producer)
    return set(range(len(g.ops))) - live


