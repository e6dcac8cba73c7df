"""Column sums run block by block beside their producer (schedule/prepass.chunk_column_sums).

The prepass cut the rows of a sum down its columns into chunks and the chunks into blocks: the
producer's statement is P[chunk, block, row, ...] and the sum's per-chunk partials are
U[chunk, ..., block, row] (their init I[chunk, ...]). isl answers such a kernel with the columns
outermost (its coincident member), which no loop order of the producer can keep: the producer
walks its rows along the columns. Here the three leave isl's parts and run as

    the partials' init (its own nest, parallel over the chunks), then
    for chunk (parallel), block: [P's rows of the block, U's sum of them]

each statement's own loops below the shared (chunk, block) ones, built as any part is
(`tree._group`): P in storage order, vectorised along its columns; U as a column reduction, a
vector of columns outermost and the block's rows inside, which `targets/sum_runs.py` adds in
float32 runs. A block's rows are read back from cache, not memory. The final schedule is checked
against the dependences like any other (`tree.shape`).
"""
from __future__ import annotations

import islpy as isl

from .isl_util import sets_of
from .model import PolyModel
from .parts import Merged, union_of


def _upa(model: PolyModel, members: dict[str, int]) -> isl.UnionPwAff:
    """The member that runs dim `members[s]` of each statement s."""
    pieces = []
    for name, d in members.items():
        s = model.statement(name)
        pieces.append(f"{s.name}[{', '.join(s.dims)}] -> [({s.dims[d]})]")
    return isl.UnionPwAff(f"{{ {'; '.join(pieces)} }}", context=model.ctx)


def _statements(model: PolyModel, producer: str, partials: str):
    """(P, I, U) of one chunked sum, or None when the model does not hold them as the prepass
    made them."""
    p = [s for s in model.of_block(producer) if s.kind == "compute"]
    i = [s for s in model.of_block(partials) if s.kind == "init"]
    u = [s for s in model.of_block(partials) if s.kind == "update"]
    if len(p) != 1 or len(i) != 1 or len(u) != 1 or len(p[0].dims) < 4 or len(u[0].dims) != len(p[0].dims):
        return None
    return p[0], i[0], u[0]


def chunked_groups(model: PolyModel, groups, chunked: dict[str, str], notes: list[str]):
    """`groups` (isl's top-level parts) with each chunked sum's three statements taken out and run
    as the module docstring says, in place of the first part that held one of them; None when
    there is nothing to do. `chunked`: partials block -> producer block."""
    out = list(groups)
    done = []
    for partials, producer in chunked.items():
        found = _statements(model, producer, partials)
        if found is None:
            continue
        p, i, u = found
        names = {p.name, i.name, u.name}
        at = next((k for k, (f, _) in enumerate(out) if {st.get_tuple_name() for st in sets_of(f)} & names), None)
        if at is None:
            continue
        kept = []
        for k, (f, band) in enumerate(out):
            here = [st.get_tuple_name() for st in sets_of(f)]
            left = [n for n in here if n not in names]
            if len(left) == len(here):
                kept.append((f, band))
                continue
            # the part's other statements run before the three or after them, as the program
            # orders them; isl's band still fits each half (its members are per statement)
            before = [n for n in left if model.statement(n).position < p.position]
            after = [n for n in left if model.statement(n).position >= p.position]
            if before:
                kept.append((union_of(model, before), band))
            if k == at:
                kept.append((union_of(model, [i.name]), None))
                # U's dims: chunk, the columns, block, row (rfactor's order); P's: chunk, block, row, columns
                upas = [_upa(model, {p.name: 0, u.name: 0}), _upa(model, {p.name: 1, u.name: len(u.dims) - 2})]
                kept.append((union_of(model, [p.name, u.name]), Merged(
                    upas, {p.name: (0, 1), u.name: (0, len(u.dims) - 2)},
                    [(union_of(model, [p.name]), None), (union_of(model, [u.name]), None)])))
            if after:
                kept.append((union_of(model, after), band))
        out = kept
        done.append(f"{p.name} with {u.name}")
    if not done:
        return None
    notes.append("fusion: column sums run block by block beside their producer (chunk, block loops shared; "
                 "the block's rows computed, then summed from cache): " + "; ".join(done))
    return out
