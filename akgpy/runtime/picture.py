"""Pictures of a partition: every op a node, every fused group a coloured box around its ops.

`to_dot` writes Graphviz source (one `cluster` per group). `render` runs Graphviz's `dot`
when it is on PATH; without it (a fresh pip-only machine) it draws an SVG itself: groups are
laid out in layers by their longest path from the inputs, each a coloured box listing its
ops, with one arrow per group-to-group dependence.
"""
from __future__ import annotations

import html
import shutil
import subprocess
from pathlib import Path

from ..errors import AkgpyError
from ..fusion.partition import Partition

PALETTE = ["#fde2e4", "#e2ece9", "#dbe7f5", "#fff1c1", "#e8dff5", "#d7f0d2", "#fbd9c9", "#d9f1f5",
           "#f2e6d0", "#e5e5e5"]
KIND_STYLE = {"kernel": "solid", "library": "dashed", "fallback": "dotted", "view": "dotted"}


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(p: Partition) -> str:
    g = p.graph
    lines = [f"digraph {_q(g.name)} {{", "  rankdir=TB; compound=true;",
             '  node [shape=box, style="rounded,filled", fillcolor=white, fontname="Helvetica", fontsize=10];',
             '  edge [color="#555555", arrowsize=0.6];']
    for n in g.free_inputs:
        t = g.tensors[n]
        lines.append(f"  {_q('t:' + n)} [shape=ellipse, label={_q(f'{n} {list(t.shape)}')}, fillcolor=\"#f7f7f7\"];")
    for grp in p.groups:
        color = PALETTE[grp.id % len(PALETTE)]
        lines.append(f"  subgraph cluster_{grp.id} {{")
        lines.append(f"    label={_q(f'{grp.name}: {grp.kind} ({grp.pattern})')}; style=\"filled,{KIND_STYLE[grp.kind]}\"; "
                     f"fillcolor={_q(color)}; color=\"#666666\"; fontname=\"Helvetica\"; fontsize=11;")
        for i in grp.ops:
            op = g.ops[i]
            out = g.tensors[op.outputs[0]]
            label = op.name + "\n" + f"{out.dtype}{list(out.shape)}"
            lines.append(f"    {_q(f'op{i}')} [label={_q(label)}];")
        lines.append("  }")
    producer = {t: i for i, op in enumerate(g.ops) for t in op.outputs}
    for i, op in enumerate(g.ops):
        for t in op.inputs:
            if t in producer:
                lines.append(f"  {_q(f'op{producer[t]}')} -> {_q(f'op{i}')};")
            elif t in g.free_inputs:
                lines.append(f"  {_q('t:' + t)} -> {_q(f'op{i}')};")
    for n in g.outputs:
        lines.append(f"  {_q('out:' + n)} [shape=ellipse, label={_q(n)}, fillcolor=\"#f7f7f7\"];")
        lines.append(f"  {_q(f'op{producer[n]}')} -> {_q('out:' + n)};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render(p: Partition, path: str) -> str:
    out = Path(path)
    fmt = out.suffix.lstrip(".").lower()
    if fmt not in ("svg", "png", "pdf", "dot"):
        raise AkgpyError(f"cannot render {out.name!r}: use a .svg, .png, .pdf or .dot file name")
    dot = to_dot(p)
    if fmt == "dot":
        out.write_text(dot)
        return str(out)
    exe = shutil.which("dot")
    if exe is not None:
        r = subprocess.run([exe, f"-T{fmt}", "-o", str(out)], input=dot, text=True, capture_output=True, timeout=120)
        if r.returncode != 0:
            raise AkgpyError(f"graphviz dot failed on {out.name}: {r.stderr.strip()[:500]}")
        return str(out)
    if fmt != "svg":
        raise AkgpyError(f"rendering .{fmt} needs Graphviz's `dot` on PATH (apt install graphviz); "
                         "without it akgpy draws .svg only")
    out.write_text(svg(p))
    return str(out)


def svg(p: Partition) -> str:
    """Group-level drawing without Graphviz: layers by longest path, boxes listing ops."""
    g = p.graph
    owner = {i: grp.id for grp in p.groups for i in grp.ops}
    producer = {t: i for i, op in enumerate(g.ops) for t in op.outputs}
    edges = sorted({(owner[producer[t]], grp.id) for grp in p.groups for t in grp.inputs if t in producer})
    layer = {}
    for grp in p.groups:  # groups are in topological order
        layer[grp.id] = 1 + max((layer[a] for a, b in edges if b == grp.id), default=-1)
    rows: dict[int, list[int]] = {}
    for gid, lv in layer.items():
        rows.setdefault(lv, []).append(gid)
    w, line_h, gap_x, gap_y = 230, 14, 30, 50
    lines_of = {grp.id: [f"{grp.name}: {grp.kind} ({grp.pattern})"] +
                [_op_line(g, i) for i in grp.ops[:12]] + ([f"... {len(grp.ops) - 12} more"] if len(grp.ops) > 12 else [])
                for grp in p.groups}
    pos, y = {}, 20
    for lv in sorted(rows):
        h = max(len(lines_of[gid]) for gid in rows[lv]) * line_h + 12
        for k, gid in enumerate(rows[lv]):
            pos[gid] = (20 + k * (w + gap_x), y, len(lines_of[gid]) * line_h + 12)
        y += h + gap_y
    width = 40 + max(len(r) for r in rows.values()) * (w + gap_x) if rows else 100
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{y}" font-family="Helvetica" '
           f'font-size="11">', '<defs><marker id="a" markerWidth="8" markerHeight="8" refX="7" refY="3" '
           'orient="auto"><path d="M0,0 L7,3 L0,6 z" fill="#555"/></marker></defs>',
           f'<text x="20" y="14" font-weight="bold">{html.escape(g.name)}: {len(g.ops)} ops, '
           f'{len(p.groups)} groups</text>']
    for a, b in edges:
        xa, ya, ha = pos[a]
        xb, yb, _ = pos[b]
        if layer[b] - layer[a] > 1:  # skips layers: bend around the boxes in between, on the right
            x1, x2 = xa + w, xb + w
            bulge = max(x1, x2) + gap_x * 0.8
            out.append(f'<path d="M{x1},{ya + ha / 2} C{bulge},{ya + ha / 2} {bulge},{yb + 10} {x2},{yb + 10}" '
                       'fill="none" stroke="#555" stroke-dasharray="4,2" marker-end="url(#a)"/>')
            continue
        out.append(f'<line x1="{xa + w / 2}" y1="{ya + ha}" x2="{xb + w / 2}" y2="{yb}" stroke="#555" '
                   'marker-end="url(#a)"/>')
    for grp in p.groups:
        x, y0, h = pos[grp.id]
        dash = {"kernel": "", "library": ' stroke-dasharray="6,3"'}.get(grp.kind, ' stroke-dasharray="2,2"')
        out.append(f'<rect x="{x}" y="{y0}" width="{w}" height="{h}" rx="6" fill="{PALETTE[grp.id % len(PALETTE)]}" '
                   f'stroke="#666"{dash}/>')
        for k, text in enumerate(lines_of[grp.id]):
            bold = ' font-weight="bold"' if k == 0 else ""
            out.append(f'<text x="{x + 8}" y="{y0 + 16 + k * line_h}"{bold}>{html.escape(text)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _op_line(g, i: int) -> str:
    op = g.ops[i]
    t = g.tensors[op.outputs[0]]
    return f"{op.name} {t.dtype}{list(t.shape)}"[:40]
