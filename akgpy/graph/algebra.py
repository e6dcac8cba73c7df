"""Algebraic rewrites of a fused graph: less math for the same values, up to rounding.

`share_exp`: sigmoid cross-entropy with logits (every detection and multi-label loss) computes
softplus through e = exp(-|x|), which cannot overflow, and in the same graph the sigmoid through
exp(-x) of the same logits. For x >= 0 the two are one value; for x < 0, exp(-x) = 1 / e. So
exp(-x) becomes select(x >= 0, e, 1 / e): one exp per element where there were two (an exp is
~12 vector ops of the FMA pipes; the division is one, on its own unit). For x >= 0 the result
is the same bits; for x < 0 it is within an ulp and a half of exp(-x) (e's error and the
division's rounding) down to x = -87.3, below which e is subnormal and 1 / e inf: only where
exp(-x) feeds sigmoids c / (exp(-x) + k) alone does that not matter (`_sigmoid_only`).
float32 only: in float16 that extra rounding is a float16 ulp (1e-3), the whole tolerance.
Where exp(-|x|) feeds a reduction (`_reduced`), only where the schedule then runs exp(-x)'s
consumers in the reduction's loop, where LLVM computes e once for both (a rider,
poly/riders.py): the pipeline compiles the graph rewritten so and keeps it only if it got a
rider (`share_exp(g, reduced=True)`, pipeline.compile_graph). yolo's loss graphs, the 9 of the
corpus it changes without a reduction (kernel alone, interleaved, LLC flushed, two 21-run
A/Bs): 0.80-0.94x (`~6853` 0.92-0.94x; one of 0.1 ms read 0.85x and 1.01x). With one, `~3153`
rides: 0.84x (LLC flushed and cached, 31 runs each); its two siblings, whose sums have tail
statements that no rider fits, ran 1.00-1.05x rewritten and keep exp(-x).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..ops.registry import OPS, Category
from .ir import Graph, Op, Tensor

F32 = "float32"


def share_exp(g: Graph, reduced: bool = False) -> tuple[Graph, str] | None:
    """(g with each exp(-x) taken from an exp(-|x|) of the same x, a line saying how many),
    or None when g has no such pair. `reduced`: also where exp(-|x|) feeds a reduction, which
    pays only where the schedule runs exp(-x)'s consumers in the reduction's loop (a rider,
    poly/riders.py; the pipeline checks)."""
    producer = {o: op for op in g.ops for o in op.outputs}
    readers = _readers(g)

    def negated(t: str) -> str | None:  # x where t = Neg(x)
        op = producer.get(t)
        return op.inputs[0] if op is not None and op.name == "Neg" else None

    def exp_arg(op: Op) -> str | None:
        ok = op.name == "Exp" and g.tensors[op.outputs[0]].dtype == F32
        return negated(op.inputs[0]) if ok else None

    # in program order, so that each exp(-|x|) comes before the exp(-x) it serves and no op
    # moves (an op moved across an InplaceAssign could see the other value of its input)
    of_abs, shared = {}, {}  # x -> exp(-|x|); exp(-x) -> (x, exp(-|x|))
    for op in g.ops:
        a = exp_arg(op)
        p = producer.get(a) if a is not None else None
        if p is not None and p.name == "Abs" and g.tensors[p.inputs[0]].shape == g.tensors[a].shape:
            if reduced or not _reduced(readers, op.outputs[0]):
                of_abs.setdefault(p.inputs[0], op.outputs[0])
        elif a in of_abs and g.tensors[a].shape == g.tensors[op.outputs[0]].shape and _sigmoid_only(g, readers, op.outputs[0]):
            shared[op.outputs[0]] = (a, of_abs[a])
    if not shared:
        return None
    tensors = dict(g.tensors)
    made = [0]

    def fresh(kind: str, shape, dtype, value=None) -> str:
        while True:
            made[0] += 1
            name = f"share_exp_{kind}_{made[0]}"
            if name not in tensors:
                tensors[name] = Tensor(name, tuple(shape), dtype, value=value)
                return name
    # a sigmoid c / (exp(-x) + 1) is c * (x >= 0 ? 1 : e) / (e + 1): one division where
    # exp(-x) = 1 / e took two; other sums k + exp(-x) take exp(-x) itself
    plus_one = {f: all(_const_where(g, a.inputs[1] if a.inputs[0] == f else a.inputs[0], lambda v: v == 1) for a in readers[f])
                for f in shared}
    numerators: dict[str, str] = {}  # exp(-x) -> its sigmoids' factor select(x >= 0, 1, e)
    sums: dict[str, str] = {}  # 1 + exp(-x) -> that sigmoid's factor
    ops = []
    for op in g.ops:
        out = op.outputs[0]
        if out in shared:
            x, e = shared[out]
            shape = g.tensors[out].shape
            ge = fresh("nonneg", shape, "bool")
            ops.append(Op("GreaterEqual", (x, fresh("zero", (1,), g.tensors[x].dtype, 0.0)), (ge,)))
            if plus_one[out]:
                numerators[out] = fresh("factor", shape, F32)
                ops.append(Op("Select", (ge, fresh("one", (1,), F32, 1.0), e), (numerators[out],)))
            else:
                inv = fresh("inverse", shape, F32)
                ops += [Op("RealDiv", (fresh("one", (1,), F32, 1.0), e), (inv,)), Op("Select", (ge, e, inv), op.outputs)]
        elif op.name == "Add" and (f := next((t for t in op.inputs if t in numerators), None)) is not None:
            sums[out] = numerators[f]
            ops.append(Op("Add", tuple(shared[f][1] if t == f else t for t in op.inputs), op.outputs))
        elif op.name == "RealDiv" and op.inputs[1] in sums:
            scaled = fresh("scaled", g.tensors[out].shape, g.tensors[out].dtype)
            ops += [Op("Mul", (op.inputs[0], sums[op.inputs[1]]), (scaled,)), Op("RealDiv", (scaled, op.inputs[1]), op.outputs)]
        else:
            ops.append(op)
    negs = {producer[op.inputs[0]] for op in g.ops if op.outputs[0] in shared}
    read = {t for op in ops for t in op.inputs} | set(g.outputs)
    ops = [op for op in ops if op not in negs or any(o in read for o in op.outputs)]
    used = {t for op in ops for t in (*op.inputs, *op.outputs)} | set(g.inputs) | set(g.outputs)
    out = dataclasses.replace(g, tensors={n: t for n, t in tensors.items() if n in used}, ops=tuple(ops))
    return out, (f"graph: {len(shared)} exp(-x) computed from exp(-|x|) of the same x (graph/algebra.py share_exp): "
                 "select(x >= 0, e, 1 / e), or a sigmoid c / (exp(-x) + 1) as c * select(x >= 0, 1, e) / (e + 1)")


def _reduced(readers: dict[str, list[Op]], name: str) -> bool:
    """Does a reduction consume `name`, directly or through other ops? Then the schedule computes
    it in that reduction's loop nest, which exp(-x)'s elementwise consumers do not share, and
    they would compute exp(-|x|) and a division where they had exp(-x) (yolo's `~3153` and its
    two siblings: 0.97-1.11x)."""
    seen, todo = set(), [name]
    while todo:
        t = todo.pop()
        for op in readers.get(t, ()):
            d = OPS.get(op.name)
            if d is not None and d.category == Category.REDUCE:
                return True
            todo += [o for o in op.outputs if o not in seen]
            seen.update(op.outputs)
    return False


def exp_blocks(g: Graph) -> set[str]:
    """The kernel blocks (te/lower.py names them op_index) of the exp(-|x|) that `share_exp`
    gave exp(-x)'s consumers in g: what it wrote with its constant one reads them."""
    exps = {op.outputs[0]: f"{op.name}_{i}" for i, op in enumerate(g.ops) if op.name == "Exp"}
    return {exps[t] for op in g.ops if any(i.startswith("share_exp_one_") for i in op.inputs)
            for t in op.inputs if t in exps}


def _readers(g: Graph) -> dict[str, list[Op]]:
    """tensor -> the ops reading it."""
    out: dict[str, list[Op]] = {}
    for op in g.ops:
        for t in op.inputs:
            out.setdefault(t, []).append(op)
    return out


def _const_where(g: Graph, t: str, test) -> bool:
    """Is `t` a constant all of whose values pass `test` (on a float64 array)?"""
    c = g.tensors[t]
    return c.is_const and bool(np.all(test(np.asarray(c.value, dtype=np.float64))))


def _sigmoid_only(g: Graph, readers: dict[str, list[Op]], f: str) -> bool:
    """Is exp(-x) `f` used only as a sigmoid's c / (f + k), k >= 0? 1 / e is inf where e is
    subnormal (te/fastmath.py's exp flushes results below 2^-126 to 0: x < -87.3, where exp(-x)
    is still finite up to x = -88.7); there c / (f + k) is 0 where it was below 1e-37, well
    inside any tolerance, while f itself would be inf where a finite value was due."""
    outputs = set(g.outputs)

    def positive_const(t: str) -> bool:
        return _const_where(g, t, lambda v: v >= 0)
    if f in outputs or not readers.get(f):
        return False
    for add in readers[f]:
        if add.name != "Add" or not positive_const(add.inputs[1] if add.inputs[0] == f else add.inputs[0]):
            return False
        s = add.outputs[0]
        if s in outputs or not readers.get(s) or \
                any(d.name != "RealDiv" or d.inputs[1] != s or d.inputs[0] == s for d in readers[s]):
            return False
    return True
