"""docs/layout.md names every module of the package (the brief: keep it true)."""
from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_layout_names_every_module():
    text = (REPO / "docs" / "layout.md").read_text()
    pkg = REPO / "akgpy"
    missing = [str(p.relative_to(pkg)) for p in sorted(pkg.rglob("*.py"))
               if p.name != "__init__.py" and f"`{p.relative_to(pkg).as_posix()}`" not in text]
    assert not missing, f"docs/layout.md does not name: {missing}"
