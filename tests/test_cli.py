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
from akgpy import config as akgpy_config
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
    b.output(b.exp(x).sum(axis=1))
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
                                  "bad_trials", "bad_search"])
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
        "bad_search": (["good.json", "--search", "annealing"], r"--search 'annealing': available: model, tpe, random"),
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


# -- akgpy-tune cache ... ----------------------------------------------------------------------

def _filled_cache(tmp_path):
    """Two tuned records for the host target, with artifacts (bytes the CLI never runs)."""
    from akgpy.schedule.config import ScheduleConfig
    from akgpy.target import resolve_target
    from akgpy.tune.cache import Cache, CacheKey, Record
    c = Cache(tmp_path / "cache", key_file=tmp_path / "secret.key")  # the key outside the cache dir
    host, llvm = c.target_for(None)
    assert host.fingerprint == resolve_target(None).fingerprint
    records = []
    for i, g in enumerate(("a" * 64, "b" * 64)):
        cfg = ScheduleConfig(unroll=bool(i)).to_json()
        r = Record(CacheKey.make(g, host, llvm=llvm), cfg, 1e-3 * (i + 1), 2e-3 * (i + 1),
                   [{"index": 0, "status": "ok"}], artifact=bytes(range(256)) * 8,
                   manifest={"target": host.to_json(), "kernels": [{"name": f"kernel_{i}"}]})
        c.put(r)
        records.append(r)
    return c, records


def _cache_cli(args, tmp_path):
    env = _env(tmp_path)
    env["AKGPY_CACHE_KEY"] = str(tmp_path / "secret.key")
    # the host target as this process resolved it for the records (its thread count is a fact)
    env["TVM_NUM_THREADS"] = str(akgpy_config.threads())
    return subprocess.run([sys.executable, "-m", "akgpy.tune.cli", "cache", "--cache", str(tmp_path / "cache"),
                           *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_cache_ls_show_verify_clear(tmp_path):
    c, records = _filled_cache(tmp_path)
    r = _cache_cli(["ls"], tmp_path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert len(lines) == 3 and lines[0].split()[0] == "key"
    assert {ln.split()[0] for ln in lines[1:]} == {rec.digest[:12] for rec in records}
    assert "2 records" in r.stderr

    r = _cache_cli(["show", records[1].digest[:10]], tmp_path)
    assert r.returncode == 0, r.stderr
    shown = json.loads(r.stdout)
    assert shown["digest"] == records[1].digest and shown["best_s"] == 2e-3 and shown["artifact_bytes"] == 2048
    assert shown["key"]["graph"] == "b" * 64
    r = _cache_cli(["show", "zzz"], tmp_path)
    assert r.returncode == 2 and "no record whose key starts with 'zzz'" in r.stderr

    r = _cache_cli(["verify"], tmp_path)
    assert r.returncode == 0 and "every record" in r.stderr
    import sqlite3  # a flipped artifact byte: verify names the record and fails
    db = sqlite3.connect(tmp_path / "cache" / "cache.sqlite3")
    blob = bytearray(records[0].artifact)
    blob[100] ^= 1
    db.execute("UPDATE records SET artifact = ? WHERE digest = ?", (bytes(blob), records[0].digest))
    db.commit()
    db.close()
    r = _cache_cli(["verify"], tmp_path)
    assert r.returncode == 1 and f"bad record {records[0].digest[:12]}" in r.stderr and "1 bad records" in r.stderr
    r = _cache_cli(["verify"], tmp_path)  # verify only reports: the record is still there, still bad
    assert r.returncode == 1

    r = _cache_cli(["export", "shipped"], tmp_path)  # the tampered record is dropped on reading
    assert r.returncode == 0 and "exported 1 tuned records" in r.stderr, r.stderr
    from akgpy.tune import schedules
    [shipped] = schedules.records(tmp_path / "shipped")
    assert (shipped.graph, shipped.config, shipped.best_s) == ("b" * 64, records[1].config, 2e-3)
    assert shipped.graph_name == "kernel_1" and shipped.target == records[1].key.target

    r = _cache_cli(["clear"], tmp_path)
    assert r.returncode == 2 and "--yes" in r.stderr
    r = _cache_cli(["clear", "--yes"], tmp_path)
    assert r.returncode == 0 and "removed 1 records" in r.stderr
    assert _cache_cli(["ls"], tmp_path).stdout.strip().splitlines()[1:] == []

    # import: the shipped record becomes a tuned record (no artifact) under this akgpy's key
    r = _cache_cli(["import", "shipped"], tmp_path)
    assert r.returncode == 0 and "imported 1 records" in r.stderr, r.stderr
    [back] = c.records()
    assert back.key == records[1].key and back.config == records[1].config and back.artifact is None
    assert back.best_s == 2e-3 and back.default_s == 4e-3


# -- tuning end to end -------------------------------------------------------------------------

def test_tune_end_to_end_with_report_and_schedules(tmp_path, monkeypatch):
    (tmp_path / "graphs").mkdir()
    (tmp_path / "graphs" / "ewise.json").write_text(_ewise("ewise"))
    (tmp_path / "graphs" / "rowsum.json").write_text(_rowsum("rowsum"))
    (tmp_path / "graphs" / "ewise_again.json").write_text(_ewise("ewise_again"))  # same graph: tuned once
    env_key = tmp_path / "secret.key"
    env = _env(tmp_path)
    env["AKGPY_CACHE_KEY"] = str(env_key)
    r = subprocess.run([sys.executable, "-m", "akgpy.tune.cli", "graphs", "--trials", "3", "--workers", "1",
                        "--search", "random", "--cache", "cache", "--report", "out/report.md",
                        "--export-schedules", "sched"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr
    md = (tmp_path / "out" / "report.md").read_text()
    rows = _table_rows(md)
    assert set(rows) == {"ewise", "rowsum"}, md
    for name, cells in rows.items():
        assert cells[-1] == "tuned"
        assert int(cells[2]) >= 1 and float(cells[3]) > 0 and float(cells[4]) > 0
        assert float(cells[4]) <= float(cells[3]) * 1.0001  # the default is trial 0: never slower
        plot = tmp_path / "out" / "report_plots" / f"{name}.svg"
        assert plot.read_text().lstrip().startswith("<svg") and f"report_plots/{name}.svg" in md

    from akgpy.frontends.composite import load_composite
    from akgpy.graph import structural_hash
    from akgpy.tune import schedules
    want = {structural_hash(load_composite(tmp_path / "graphs" / f)) for f in ("ewise.json", "rowsum.json")}
    files = sorted((tmp_path / "sched").iterdir())
    assert len(files) == 2
    shipped = [schedules.read(f) for f in files]  # read() validates the record and its config
    assert {rec.graph for rec in shipped} == want
    from akgpy.target import resolve_target
    monkeypatch.setenv("TVM_NUM_THREADS", "1")  # the host target as the CLI resolved it (threads are a fact)
    assert {rec.target for rec in shipped} == {resolve_target(None).fingerprint}
    assert all(rec.best_s <= rec.default_s * 1.0001 for rec in shipped)

    from akgpy.tune.cache import Cache
    recs = Cache(tmp_path / "cache", key_file=env_key).records()
    assert {rec.key.graph for rec in recs if rec.best_s is not None} == want


def _wait_for_line(proc, pattern: str, timeout_s: float) -> list[str]:
    seen, end = [], time.monotonic() + timeout_s
    while time.monotonic() < end:
        line = proc.stderr.readline()
        if not line:
            break
        seen.append(line)
        if re.search(pattern, line):
            return seen
    raise AssertionError(f"no line matching {pattern!r} within {timeout_s} s: {''.join(seen)}")


def test_ctrl_c_keeps_what_finished(tmp_path):
    (tmp_path / "g").mkdir()
    (tmp_path / "g" / "a_first.json").write_text(_ewise("a_first", 32))
    (tmp_path / "g" / "b_second.json").write_text(_rowsum("b_second"))
    (tmp_path / "g" / "c_third.json").write_text(_ewise("c_third", 96))
    env = _env(tmp_path)
    env["AKGPY_CACHE_KEY"] = str(tmp_path / "secret.key")
    proc = subprocess.Popen([sys.executable, "-m", "akgpy.tune.cli", "g", "--trials", "2", "--workers", "1",
                             "--search", "random", "--cache", "cache", "--report", "r.md"], cwd=tmp_path, env=env,
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        _wait_for_line(proc, r"^\[1/3\] a_first: tuned", 600)
        _wait_for_line(proc, r"^\[2/3\] tuning b_second", 120)
        time.sleep(1.0)  # inside the second kernel's tuning
        proc.send_signal(signal.SIGINT)
        rest = proc.communicate(timeout=120)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, rest
    assert "interrupted" in rest
    rows = _table_rows((tmp_path / "r.md").read_text())
    assert rows["a_first"][-1] == "tuned"
    assert "c_third" not in rows
    from akgpy.frontends.composite import load_composite
    from akgpy.graph import structural_hash
    from akgpy.tune.cache import Cache
    cache = Cache(tmp_path / "cache", key_file=tmp_path / "secret.key")
    graphs = {rec.key.graph for rec in cache.records() if rec.best_s is not None}
    assert structural_hash(load_composite(tmp_path / "g" / "a_first.json")) in graphs


def test_onnx_input_gives_its_kernel_groups_once(tmp_path):
    pytest.importorskip("onnx")
    import onnx

    from akgpy import from_onnx, zoo
    from akgpy.fusion import partition
    from akgpy.graph import structural_hash
    from akgpy.tune.cli import collect
    onnx.save(zoo.bert_layer(seq=16, hidden=32, heads=2, ffn=64)[0], str(tmp_path / "bert.onnx"))
    (tmp_path / "solo.json").write_text(_ewise("solo"))
    kernels = collect([tmp_path])
    part = partition(from_onnx(str(tmp_path / "bert.onnx")))
    groups = {structural_hash(part.subgraph(g)) for g in part.groups if g.kind == "kernel"}
    onnx_kernels = [k for k in kernels if k.source.endswith("bert.onnx")]
    assert {structural_hash(k.graph) for k in onnx_kernels} == groups
    assert len(groups) < sum(g.kind == "kernel" for g in part.groups)  # the layer repeats some groups
    assert len(onnx_kernels) == len(groups)  # and each is tuned once
    assert all(re.fullmatch(r"bert/g\d+", k.name) for k in onnx_kernels)
    assert [k.name for k in kernels if k.source.endswith("solo.json")] == ["solo"]
