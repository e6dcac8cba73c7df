"""Data flows one way: frontends -> graph -> te -> poly -> schedule -> targets -> runtime. A module's
module-level imports may only reach its own stage or earlier ones; the reference oracle may not
reach tvm or the TE builders at all (not even inside functions)."""
from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "akgpy"
STAGE = {"errors": 0, "dtypes": 0, "config": 0, "target": 0, "graph": 1, "ops": 1, "frontends": 2, "reference": 2,
         "testing": 2, "fusion": 2, "zoo": 2, "te": 3, "poly": 4, "schedule": 5, "targets": 6, "runtime": 7, "pipeline": 8, "tune": 9,
         "__init__": 10}


def _stage_of(module: str) -> int:
    return STAGE[module.split(".")[0]]


def _imports(path: Path, top_level_only: bool):
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    here = path.relative_to(PKG).with_suffix("").parts
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            if node.level == 0:
                yield node.module or ""
                continue
            base = list(here[:-node.level]) if node.level <= len(here) else []
            mod = ".".join(base + ([node.module] if node.module else []))
            if node.module is None:
                for alias in node.names:
                    yield ".".join(base + [alias.name])
            else:
                yield "akgpy." + mod if mod else "akgpy"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name


def test_stages_import_only_earlier_stages():
    bad = []
    for path in PKG.rglob("*.py"):
        me = path.relative_to(PKG).with_suffix("").parts
        my_stage = STAGE[me[0]]
        for imp in _imports(path, top_level_only=True):
            name = imp[len("akgpy."):] if imp.startswith("akgpy.") else imp
            if imp.startswith("akgpy.") or imp in STAGE:
                if name.split(".")[0] in STAGE and _stage_of(name) > my_stage:
                    bad.append(f"{'/'.join(me)} imports {imp}")
    assert not bad, "imports against the pipeline direction:\n" + "\n".join(bad)


def test_reference_is_independent_of_tvm_and_te():
    for imp in _imports(PKG / "reference.py", top_level_only=False):
        assert not imp.startswith(("tvm", "akgpy.te", "akgpy.schedule", "akgpy.targets", "akgpy.runtime")), imp
