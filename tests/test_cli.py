"""akgpy-tune (akgpy/tune/cli.py) and its report (akgpy/tune/report.py): end to end on small
composite graphs in subprocesses (as a user runs it), bad input, Ctrl-C, the cache commands."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from akgpy import GraphBuilder
from akgpy.frontends.composite import dump_composite
from akgpy.tune import report

REPO = Path(__file__).resolve().parents[1]


def _ewise(name: str, rows: int = 64) -> str:
    b = GraphBuilder(name)
    x, y = b.input("x", [rows, 256]), b.input("y", [rows, 256])
    b.output(b.relu(x * y + 1.0))
    return dump_composite(b.build())


def _rowsum(name: str) -> str:
    b = GraphBuilder(name)
    x = b.input("x", [128, 256])
    b.output(b.sum(b.exp(x), axis=1))
    return dump_composite(b.build())


def _env(tmp_path: Path) -> dict:
    env = dict(os.environ, TVM_NUM_THREADS="1", AKGPY_CACHE="off", PYTHONPATH=str(REPO))
    env.pop("AKGPY_DUMP", None)
    return env


def _cli(args, tmp_path, **kw):
    return subprocess.run([sys.executable, "-m", "akgpy.tune.cli", *map(str, args)], cwd=tmp_path, env=_env(tmp_path),
                          capture_output=True, text=True, **kw)


def _table_rows(md: str) -> dict[str, list[str]]:
    rows = {}
    for line in md.splitlines():
        if line.startswith("| ") and not line.startswith("| kernel "):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            rows[cells[0]] = cells
    return rows


# -- report (no tuning) ------------------------------------------------------------------------

RESULTS = [report.KernelResult("k|a", "a.json", "h1", "tuned", 2e-3, 1e-3,
                               ((2e-3, "ok"), (None, "crash"), (1.5e-3, "ok"), (1e-3, "ok")), {"unroll": False}),
           report.KernelResult("k/b", "b.json", "h2", "failed", error="no candidate matched")]


def test_report_markdown_has_a_row_and_a_plot_per_kernel(tmp_path):
    files = report.write_report(tmp_path / "r.md", RESULTS, meta={"target": "test"})
    md = (tmp_path / "r.md").read_text()
    rows = _table_rows(md)
    assert set(rows) == {"k\\|a", "k/b"}
    assert rows["k\\|a"][3:6] == ["2", "1", "2.000x"]  # default ms, tuned ms, speedup
    assert rows["k/b"][-1] == "failed: no candidate matched"
    plots = sorted(p.name for p in (tmp_path / "r_plots").iterdir())
    assert plots == ["k_a.svg", "k_b.svg"] and len(files) == 3
    for p in plots:
        assert f"(r_plots/{p})" in md
        assert (tmp_path / "r_plots" / p).read_text().startswith("<svg")
    assert "geomean speedup: 2.000x" in md


def test_best_so_far_and_own_svg(monkeypatch):
    assert RESULTS[0].best_so_far() == [(0, 2e-3), (1, 2e-3), (2, 1.5e-3), (3, 1e-3)]
    monkeypatch.setattr(report, "_have_matplotlib", lambda: False)
    svg = report.plot_svg(RESULTS[0])
    assert svg.startswith("<svg") and svg.count("<circle") == 3 and "<polyline" in svg
    assert "no successful trial" in report.plot_svg(RESULTS[1])


def test_report_html_inline(tmp_path):
    report.write_report(tmp_path / "r.html", RESULTS)
    text = (tmp_path / "r.html").read_text()
    assert text.count("<svg") == 2 and text.count("<tr>") == 3 and "k|a" in text
    assert not (tmp_path / "r_plots").exists()


def test_report_refuses_other_extensions(tmp_path):
    with pytest.raises(Exception, match=r"\.md or \.html"):
        report.write_report(tmp_path / "r.txt", RESULTS)


# -- the command -------------------------------------------------------------------------------

def test_console_script_is_declared():
    text = (REPO / "setup.py").read_text()
    assert '"akgpy-tune = akgpy.tune.cli:main"' in text


def test_help_has_examples(tmp_path):
    r = _cli(["--help"], tmp_path)
    assert r.returncode == 0
    for word in ("--trials", "--time-budget", "--workers", "--cache", "--report", "--export-schedules", "--target",
                 "--search", "--seed", "--ray", "examples:", "akgpy-tune cache ls"):
        assert word in r.stdout, word
    r = _cli(["cache", "--help"], tmp_path)
    assert r.returncode == 0
    for word in ("ls", "show", "clear", "export", "import", "verify"):
        assert word in r.stdout, word


@pytest.mark.parametrize("case", ["missing", "not_json", "unknown_op", "empty_dir", "bad_target", "bad_report",
                                  "bad_trials"])
def test_bad_input_is_a_clear_error(tmp_path, case):
    good = tmp_path / "good.json"
    good.write_text(_ewise("good"))
    args, expect = {
        "missing": (["nope.json"], r"nope\.json: no such file"),
        "not_json": (["bad.json"], r"bad\.json: not a composite graph"),
        "unknown_op": (["unk.json"], r"unk\.json: .*NoSuchOp"),
        "empty_dir": (["empty"], r"empty: directory has no"),
        "bad_target": (["good.json", "--target", "not-a-cpu-xyz"], r"--target 'not-a-cpu-xyz'"),
        "bad_report": (["good.json", "--report", "r.txt"], r"--report r\.txt: .*\.md or \.html"),
        "bad_trials": (["good.json", "--trials", "0"], r"--trials must be at least 1"),
    }[case]
    (tmp_path / "bad.json").write_text('{"composite": true, "op": ')
    (tmp_path / "unk.json").write_text(_ewise("unk").replace('"Mul"', '"NoSuchOp"'))
    (tmp_path / "empty").mkdir()
    t0 = time.monotonic()
    r = _cli([*args, "--cache", "off", "--trials" if "--trials" not in args else "--seed", "2"], tmp_path,
             timeout=120)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert r.stderr.startswith("akgpy-tune: error: "), r.stderr
    assert re.search(expect, r.stderr), r.stderr
    assert "Traceback" not in r.stderr
    assert time.monotonic() - t0 < 60  # refused before any tuning
