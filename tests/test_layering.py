"""Data flows one way: frontends -> graph -> te -> poly -> schedule -> targets -> runtime. A module's
imports, module-level or inside functions, may only reach its own stage or earlier ones (a short
allow-list names the entry points that deliberately reach forward, each with its reason); no
modules import each other, even lazily; the reference oracle may not reach tvm or the TE builders
at all (not even inside functions). Imports under `if TYPE_CHECKING:` are annotations only and
do not count."""
from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "akgpy"
STAGE = {"version": 0, "errors": 0, "dtypes": 0, "config": 0, "target": 0, "graph": 1, "ops": 1, "frontends": 2, "reference": 2,
         "testing": 2, "fusion": 2, "zoo": 2, "zoo_torch": 2, "te": 3, "poly": 4, "schedule": 5, "targets": 6, "runtime": 7, "pipeline": 8, "tune": 9,
         "kernel_meta": 10, "mindspore": 11, "torch": 11, "__init__": 12}
# (importing module, imported module or package prefix): why this import reaches a later stage
FORWARD = {
    ("pipeline", "akgpy.tune.cache"): "compile_graph looks the kernel up in the compile cache before compiling",
    ("zoo", "akgpy"): "zoo's command line (python -m akgpy.zoo --render) compiles the model it builds",
    ("tune.cli", "akgpy"): "the akgpy-tune entry point reads ONNX models through akgpy.from_onnx",
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PKG).with_suffix("").parts
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or \
        (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _import_nodes(tree: ast.Module, top_level_only: bool):
    """The import statements of a module, outside `if TYPE_CHECKING:` blocks."""
    if top_level_only:
        yield from (n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)))
        return
    stack = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def _statements(source: str, here: tuple[str, ...], top_level_only: bool):
    """(module, names) per import statement of a module at `here` (its path parts under akgpy/,
    without .py): the absolute module name ("akgpy.graph.ir", "tvm") and, for `from X import
    a, b`, the names imported from it (each may be a submodule)."""
    for node in _import_nodes(ast.parse(source), top_level_only):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, ()
            continue
        if node.level == 0:
            base = node.module or ""
        else:
            pkg = list(here[:-1])  # the package this module is in (a package's __init__: itself)
            if node.level - 1 > len(pkg):
                raise AssertionError(f"{'/'.join(here)}: relative import beyond the package")
            pkg = pkg[:len(pkg) - (node.level - 1)]
            base = ".".join(["akgpy", *pkg] + ([node.module] if node.module else []))
        yield base, tuple(alias.name for alias in node.names)


def _imports(path: Path, top_level_only: bool):
    """Every module name a file imports, absolute; `from X import y` yields X and X.y."""
    here = path.relative_to(PKG).with_suffix("").parts
    for base, names in _statements(path.read_text(), here, top_level_only):
        yield base
        yield from (f"{base}.{n}" for n in names)


def _akgpy_modules() -> dict[str, Path]:
    mods = {}
    for path in PKG.rglob("*.py"):
        name = _module_name(path)
        if name.endswith("__init__"):
            name = name[:-len(".__init__")] if "." in name else ""
        mods["akgpy" + ("." + name if name else "")] = path
    return mods


def _stage(module: str) -> int:
    """Stage of an akgpy module name ("akgpy.graph.ir"); akgpy itself is its __init__."""
    rest = module[len("akgpy."):] if module.startswith("akgpy.") else "__init__"
    return STAGE[rest.split(".")[0]]


def _edges(top_level_only: bool) -> dict[str, set[str]]:
    """akgpy module -> the akgpy modules it imports: `from X import y` is an import of X.y where
    that is a module, else of X (y a function, class or constant of X)."""
    mods = _akgpy_modules()
    out = {}
    for mod, path in mods.items():
        here = path.relative_to(PKG).with_suffix("").parts
        got = set()
        for base, names in _statements(path.read_text(), here, top_level_only):
            subs = [f"{base}.{n}" for n in names if f"{base}.{n}" in mods]
            if subs:
                got.update(subs)
            if len(subs) < len(names) or not names:
                got.add(base)
        out[mod] = {m for m in got if m in mods and m != mod}
    return out


def _forward(top_level_only: bool) -> list[str]:
    bad = []
    for mod, deps in _edges(top_level_only).items():
        me = mod[len("akgpy."):] if mod != "akgpy" else "__init__"
        for dep in deps:
            if _stage(dep) > _stage(mod) and not any(me == who and (dep == what or dep.startswith(what + "."))
                                                     for who, what in FORWARD):
                bad.append(f"{me} imports {dep}")
    return sorted(bad)


def test_every_top_level_package_has_a_stage():
    tops = {p.relative_to(PKG).parts[0].removesuffix(".py") for p in PKG.iterdir()
            if p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists())}
    assert tops <= set(STAGE), f"modules without a stage: {tops - set(STAGE)}"


def test_stages_import_only_earlier_stages():
    bad = _forward(top_level_only=True)
    assert not bad, "imports against the pipeline direction:\n" + "\n".join(bad)


def test_lazy_imports_reach_no_later_stage():
    """Imports inside functions count too: a lazy import is still a dependency."""
    bad = _forward(top_level_only=False)
    assert not bad, "imports against the pipeline direction (FORWARD lists the deliberate ones):\n" + "\n".join(bad)


def test_forward_allow_list_is_used():
    """An entry of FORWARD that no import needs any more goes."""
    used = set()
    for mod, deps in _edges(top_level_only=False).items():
        me = mod[len("akgpy."):] if mod != "akgpy" else "__init__"
        for who, what in FORWARD:
            if me == who and any(d == what or d.startswith(what + ".") for d in deps):
                used.add((who, what))
    assert used == set(FORWARD), f"unused allow-list entries: {set(FORWARD) - used}"


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, on, stack, out = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    """No two modules import each other, directly or around a loop, lazily or not (a package's
    __init__ and the modules it re-exports aside: importing a module runs its package first).
    FORWARD's entry points reach the package itself and stay out of this."""
    edges = _edges(top_level_only=False)
    for mod in edges:  # the package __init__ re-exports; entry points reaching it are FORWARD's
        edges[mod] = {d for d in edges[mod] if not (d == "akgpy" or d in _packages_of(mod))}
    cycles = _cycles(edges)
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in cycles)


def _packages_of(mod: str) -> set[str]:
    parts = mod.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def test_the_checker_sees_lazy_and_relative_imports():
    """The import scan itself: relative imports from a module and from a package's __init__, a
    lazy import, and one under TYPE_CHECKING (not counted), as the tests above read them."""
    src = ("from typing import TYPE_CHECKING\nfrom . import ir\nfrom ..ops.registry import lookup\n"
           "if TYPE_CHECKING:\n    from ..te.lower import Lowerer\n"
           "def f():\n    from ..runtime.program import Program\n")
    top = dict(_statements(src, ("graph", "probe"), top_level_only=True))
    every = dict(_statements(src, ("graph", "probe"), top_level_only=False))
    assert top == {"typing": ("TYPE_CHECKING",), "akgpy.graph": ("ir",), "akgpy.ops.registry": ("lookup",)}
    assert every == {**top, "akgpy.runtime.program": ("Program",)}
    init = dict(_statements("from .lower import lower\nfrom .. import dtypes\n", ("te", "__init__"), True))
    assert init == {"akgpy.te.lower": ("lower",), "akgpy": ("dtypes",)}


def test_reference_is_independent_of_tvm_and_te():
    for imp in _imports(PKG / "reference.py", top_level_only=False):
        assert not imp.startswith(("tvm", "akgpy.te", "akgpy.schedule", "akgpy.targets", "akgpy.runtime")), imp
