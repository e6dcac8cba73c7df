"""The tuning report: a table of default vs tuned time per kernel and a plot per kernel of the best
time found against trials, as Markdown (plots beside it as files) or HTML (plots inline).

Plots come from matplotlib when it is installed (the `report` extra); without it the report draws
a small SVG line chart itself, so a pip-only machine still gets one picture per kernel.
"""
from __future__ import annotations

import datetime as _dt
import html
import io
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import AkgpyError


@dataclass(frozen=True)
class KernelResult:
    """What the report says about one tuned kernel (plain data: the CLI fills it from a TuneResult)."""
    name: str
    source: str = ""
    graph_hash: str = ""
    status: str = "tuned"  # "tuned", "failed", "interrupted"
    default_s: float | None = None
    best_s: float | None = None
    # one (seconds or None for a failed trial, status) per trial, in the order they ran; trial 0 = default
    trials: tuple[tuple[float | None, str], ...] = ()
    config: dict = field(default_factory=dict)  # the winning config's fields that differ from the default
    error: str = ""

    @property
    def speedup(self) -> float | None:
        if self.default_s and self.best_s:
            return self.default_s / self.best_s
        return None

    def best_so_far(self) -> list[tuple[int, float]]:
        """(trial index, best time up to and including it) for every trial from the first success on."""
        out, best = [], math.inf
        for i, (t, _status) in enumerate(self.trials):
            if t is not None and t > 0:
                best = min(best, t)
            if best < math.inf:
                out.append((i, best))
        return out


def geomean_speedup(results) -> float | None:
    s = [r.speedup for r in results if r.speedup]
    return math.exp(sum(math.log(x) for x in s) / len(s)) if s else None


def _ms(t: float | None) -> str:
    return "-" if t is None else f"{t * 1e3:.4g}"


def _x(s: float | None) -> str:
    return "-" if s is None else f"{s:.3f}x"


def _slug(name: str, taken: set[str]) -> str:
    base = re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("._") or "kernel"
    slug, n = base, 1
    while slug in taken:
        n += 1
        slug = f"{base}_{n}"
    taken.add(slug)
    return slug


# -- plots -------------------------------------------------------------------------------------

def _have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def plot_svg(r: KernelResult) -> str:
    """The best time found against trials as SVG text (matplotlib's when installed, else akgpy's own)."""
    return _matplotlib_svg(r) if _have_matplotlib() else _own_svg(r)


def _matplotlib_svg(r: KernelResult) -> str:
    import matplotlib
    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(5.5, 3.2), dpi=100)
    try:
        ok = [(i, t * 1e3) for i, (t, _s) in enumerate(r.trials) if t]
        if ok:
            ax.scatter([i for i, _ in ok], [t for _, t in ok], s=10, color="#9bb7d4", label="trial")
        curve = r.best_so_far()
        if curve:
            ax.step([i for i, _ in curve], [t * 1e3 for _, t in curve], where="post", color="#1f4e79",
                    label="best so far")
        if r.default_s:
            ax.axhline(r.default_s * 1e3, color="#c0504d", linestyle="--", linewidth=1, label="default")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("trial")
        ax.set_ylabel("time (ms)")
        ax.set_title(r.name, fontsize=10)
        ax.grid(alpha=0.3)
        if ok or r.default_s:
            ax.legend(fontsize=8)
        fig.tight_layout()
        buf = io.StringIO()
        fig.savefig(buf, format="svg")
    finally:
        plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _own_svg(r: KernelResult) -> str:
    w, h, left, right, top, bottom = 480, 260, 60, 15, 25, 40
    curve = r.best_so_far()
    pts = [(i, t) for i, (t, _s) in enumerate(r.trials) if t]
    ys = [t for _, t in pts] + ([r.default_s] if r.default_s else [])
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" '
             f'font-size="11"><rect width="{w}" height="{h}" fill="white"/>',
             f'<text x="{w / 2}" y="15" text-anchor="middle">{html.escape(r.name)}</text>']
    if not ys:
        parts.append(f'<text x="{w / 2}" y="{h / 2}" text-anchor="middle">no successful trial</text></svg>')
        return "".join(parts)
    n = max(len(r.trials) - 1, 1)
    lo, hi = min(ys), max(ys)
    if hi - lo < 1e-12:
        lo, hi = lo * 0.95, hi * 1.05
    pw, ph = w - left - right, h - top - bottom

    def xy(i, t):
        return left + pw * i / n, top + ph * (1 - (t - lo) / (hi - lo))

    parts.append(f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="black"/>'
                 f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + ph}" stroke="black"/>'
                 f'<text x="{left + pw / 2}" y="{h - 8}" text-anchor="middle">trial (0..{n})</text>'
                 f'<text x="{left - 4}" y="{top + 4}" text-anchor="end">{hi * 1e3:.3g}</text>'
                 f'<text x="{left - 4}" y="{top + ph}" text-anchor="end">{lo * 1e3:.3g}</text>'
                 f'<text x="12" y="{top + ph / 2}" transform="rotate(-90 12 {top + ph / 2})" '
                 f'text-anchor="middle">time (ms)</text>')
    if r.default_s:
        _, y = xy(0, r.default_s)
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{left + pw}" y2="{y:.1f}" stroke="#c0504d" '
                     f'stroke-dasharray="4 3"><title>default</title></line>')
    for i, t in pts:
        x, y = xy(i, t)
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="#9bb7d4"/>')
    if curve:
        path, prev = [], None
        for i, t in curve:
            x, y = xy(i, t)
            path.append(f"{x:.1f},{prev:.1f} {x:.1f},{y:.1f}" if prev is not None else f"{x:.1f},{y:.1f}")
            prev = y
        parts.append(f'<polyline points="{" ".join(path)}" fill="none" stroke="#1f4e79" stroke-width="2">'
                     f'<title>best so far</title></polyline>')
    parts.append("</svg>")
    return "".join(parts)


# -- documents ---------------------------------------------------------------------------------

COLUMNS = ("kernel", "source", "trials", "default (ms)", "tuned (ms)", "speedup", "status")


def _row(r: KernelResult) -> tuple[str, ...]:
    status = r.status + (f": {r.error}" if r.error else "")
    return (r.name, r.source, str(len(r.trials)), _ms(r.default_s), _ms(r.best_s), _x(r.speedup), status)


def _header_lines(results, meta: dict) -> list[tuple[str, str]]:
    lines = [(k, str(v)) for k, v in meta.items() if v not in (None, "")]
    lines.append(("kernels", str(len(results))))
    g = geomean_speedup(results)
    if g:
        lines.append(("geomean speedup", _x(g)))
    lines.append(("written", _dt.datetime.now().isoformat(timespec="seconds")))
    return lines


def write_report(path, results, *, meta: dict | None = None, title: str = "akgpy-tune report") -> list[Path]:
    """Write the report to `path` (.md/.markdown: Markdown with SVG plots in `<stem>_plots/`;
    .html/.htm: one HTML file, plots inline). Returns the files written."""
    path = Path(path)
    ext = path.suffix.lower()
    if ext not in (".md", ".markdown", ".html", ".htm"):
        raise AkgpyError(f"report file {str(path)!r}: the extension must be .md or .html (got {ext or 'none'!r})")
    results, meta = list(results), dict(meta or {})
    path.parent.mkdir(parents=True, exist_ok=True)
    taken: set[str] = set()
    slugs = [_slug(r.name, taken) for r in results]
    if ext in (".html", ".htm"):
        path.write_text(_html(results, slugs, meta, title))
        return [path]
    plots = path.parent / f"{path.stem}_plots"
    plots.mkdir(exist_ok=True)
    written = []
    for r, slug in zip(results, slugs):
        p = plots / f"{slug}.svg"
        p.write_text(plot_svg(r))
        written.append(p)
    path.write_text(_markdown(results, slugs, meta, title, plots.name))
    return [path, *written]


def _md_cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def _markdown(results, slugs, meta, title, plot_dir) -> str:
    out = [f"# {title}", ""]
    out += [f"- {k}: {_md_cell(v)}" for k, v in _header_lines(results, meta)]
    out += ["", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    out += ["| " + " | ".join(_md_cell(c) for c in _row(r)) + " |" for r in results]
    for r, slug in zip(results, slugs):
        out += ["", f"## {r.name}", "", f"![best time against trials for {r.name}]({plot_dir}/{slug}.svg)", ""]
        if r.graph_hash:
            out.append(f"graph hash `{r.graph_hash}`  ")
        if r.config:
            out.append("tuned choices: " + ", ".join(f"`{k}={v}`" for k, v in sorted(r.config.items())))
        elif r.status == "tuned":
            out.append("tuned choices: the default config won")
    return "\n".join(out) + "\n"


def _html(results, slugs, meta, title) -> str:
    e = html.escape
    out = ["<!DOCTYPE html>", "<html><head><meta charset='utf-8'>", f"<title>{e(title)}</title>",
           "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
           "td,th{border:1px solid #bbb;padding:3px 8px;text-align:right}td:first-child,td:nth-child(2)"
           "{text-align:left}code{background:#f3f3f3}</style></head><body>", f"<h1>{e(title)}</h1>", "<ul>"]
    out += [f"<li>{e(k)}: {e(v)}</li>" for k, v in _header_lines(results, meta)]
    out += ["</ul>", "<table>", "<tr>" + "".join(f"<th>{e(c)}</th>" for c in COLUMNS) + "</tr>"]
    out += ["<tr>" + "".join(f"<td>{e(c)}</td>" for c in _row(r)) + "</tr>" for r in results]
    out.append("</table>")
    for r, slug in zip(results, slugs):
        out += [f"<h2 id='{e(slug)}'>{e(r.name)}</h2>", f"<figure>{plot_svg(r)}</figure>"]
        if r.config:
            out.append("<p>tuned choices: " + ", ".join(f"<code>{e(f'{k}={v}')}</code>"
                                                         for k, v in sorted(r.config.items())) + "</p>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
