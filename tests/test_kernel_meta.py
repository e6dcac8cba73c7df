"""Self-contained kernels (akgpy.build_kernel_meta, docs/kernel_meta.md): built, loaded and called
through ctypes alone on the caller's callbacks, checked against the numpy reference."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import akgpy
from akgpy import reference
from akgpy.errors import FormatError
from akgpy.graph.builder import GraphBuilder
from akgpy.kernel_meta import build_kernel_meta, target_from_info
from akgpy.targets.cpu.standalone import needed_libraries, undefined_symbols
from akgpy.testing import compare, random_inputs

from .conftest import CORPUS
from .meta_host import Host


@pytest.fixture(scope="module")
def host(tmp_path_factory) -> Host:
    return Host(tmp_path_factory.mktemp("host"))


def _check(host: Host, g, meta_json: Path, *, misalign: bool = False, seed: int = 0) -> None:
    inputs = random_inputs(g, seed)
    ref_inputs = [a.copy() for a in inputs]
    got_inputs = [a.copy() for a in inputs]
    rc, outs = host.call(meta_json, got_inputs, misalign=misalign)
    assert rc == 0
    fake = g.fake_outputs
    real = [o for o, name in zip(outs, g.outputs) if name not in fake]
    want = reference.run(g, ref_inputs)
    bad = compare(g, real, got_inputs, want, ref_inputs)
    assert not bad, bad


def _reduce_graph(name: str = "Fused_reduce", x: str = "x") -> akgpy.Graph:
    b = GraphBuilder(name)
    a = b.input(x, (64, 4096), "float32")
    w = b.input("w", (4096,), "float32")
    y = a * w + a
    b.output(y.sum(axis=1), b.exp(y))
    return b.build()


def test_kernel_runs_on_the_callers_pool_and_matches(host, tmp_path):
    g = _reduce_graph()
    km = build_kernel_meta(g, tmp_path)
    assert km.library.name == "Fused_reduce.so" and km.symbol == "Fused_reduce_kernel"
    before = host.counts()
    _check(host, g, km.json)
    after = host.counts()
    assert after["launches"] > before["launches"], "the kernel's parallel loop did not use the caller's launcher"
    meta = json.loads(km.json.read_text())
    assert meta["kernelName"] == km.symbol and meta["compiler"] == f"akgpy {akgpy.__version__}"
    assert meta["graph_hash"] == g.hash() and len(meta["tir_hash"]) == 16
    assert [a["role"] for a in meta["args"]] == ["callbacks", "input", "input", "output", "output"]
    import hashlib
    assert meta["sha256"] == hashlib.sha256(km.library.read_bytes()).hexdigest()


def test_library_needs_no_tvm_and_exports_one_symbol(tmp_path):
    km = build_kernel_meta(_reduce_graph(), tmp_path)
    assert not [n for n in needed_libraries(km.library) if "tvm" in n.lower()]
    assert not [s for s in undefined_symbols(km.library) if "tvm" in s.lower()]
    out = subprocess.run(["nm", "-D", "--defined-only", "-P", str(km.library)], capture_output=True, text=True,
                         check=True).stdout
    assert [line.split()[0] for line in out.splitlines() if line.split()[1] in "TtDdBb"] == [km.symbol]
    # and it loads and runs in a process that never imported TVM
    code = f"""
import ctypes, sys
sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
from tests.meta_host import Host
import numpy as np, pathlib
h = Host(pathlib.Path({str(tmp_path)!r}))
x = np.ones((64, 4096), np.float32); w = np.ones(4096, np.float32)
rc, (s, e) = h.call(pathlib.Path({str(km.json)!r}), [x, w])
assert rc == 0 and np.allclose(s, 8192.0) and np.allclose(e, np.exp(2.0)), (rc, s[:3], e[0, :3])
assert not [m for m in sys.modules if m.split('.')[0] in ('tvm', 'tvm_ffi', 'akgpy')], 'imported tvm'
maps = open('/proc/self/maps').read()
assert 'libtvm' not in maps, 'libtvm was loaded'
print('ok')
"""
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.stdout.strip() == "ok", run.stderr[-2000:]


def test_outputs_at_the_callers_alignment(host, tmp_path):
    """By default a self-contained kernel assumes only the dtype's alignment of its outputs (a
    framework's buffers): a 4-byte-aligned output is written in place, nothing allocated."""
    g = _reduce_graph()
    km = build_kernel_meta(g, tmp_path)
    before = host.counts()
    _check(host, g, km.json, misalign=True)
    after = host.counts()
    assert after["mallocs"] == before["mallocs"]


def test_misaligned_outputs_go_through_temporaries(host, tmp_path):
    """A kernel compiled to assume 64-byte outputs (ScheduleConfig.output_align=64, akgpy's own
    runtime's contract) still takes any output: the runtime computes into an aligned temporary
    from the caller's malloc and copies it out."""
    from akgpy.target import resolve_target
    from akgpy.targets import default_config
    g = _reduce_graph()
    km = build_kernel_meta(g, tmp_path, config=default_config(resolve_target(None)).replace(output_align=64))
    before = host.counts()
    _check(host, g, km.json, misalign=True)
    after = host.counts()
    assert after["mallocs"] - before["mallocs"] >= 2
    assert after["mallocs"] - before["mallocs"] == after["frees"] - before["frees"]


def _corpus_pick():
    """Corpus graphs that exercise the argument table: in-place targets and fake outputs,
    float16, a transpose, a reduction to a scalar, a contraction, several outputs."""
    want = {"InplaceAssign": None, "float16": None, "Transpose": None, "MatMul": None, "outputs>=3": None}
    for p in sorted(CORPUS.rglob("*.info")):
        text = p.read_text()
        d = json.loads(text)
        if d.get("process") not in ("cpu", "cuda"):
            continue
        keys = [k for k in ("InplaceAssign", "Transpose", "MatMul") if f'"name": "{k}"' in text or f'"name":"{k}"' in text]
        if '"float16"' in text:
            keys.append("float16")
        if len(d.get("output_desc") or []) >= 3:
            keys.append("outputs>=3")
        for k in keys:
            if want.get(k, 1) is None and p.stat().st_size < 40_000:
                want[k] = p
    return [p for p in want.values() if p is not None]


@pytest.mark.parametrize("path", _corpus_pick(), ids=lambda p: p.name[:60])
def test_corpus_graphs(host, tmp_path, path):
    g = akgpy.load_composite(path)
    km = build_kernel_meta(path, tmp_path)
    _check(host, g, km.json)
    _check(host, g, km.json, misalign=True, seed=1)


def test_repeated_and_passed_through_outputs(host, tmp_path):
    b = GraphBuilder("Fused_repeat")
    x = b.input("x", (33, 65), "float32")
    y = b.exp(x * 2.0)
    b.output(y, x * 3.0, y)
    g = b.build()
    km = build_kernel_meta(g, tmp_path)
    x0 = np.random.default_rng(0).standard_normal((33, 65)).astype(np.float32)
    rc, (a, c, a2) = host.call(km.json, [x0.copy()])
    assert rc == 0
    np.testing.assert_allclose(a, np.exp(x0 * 2.0), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(a, a2)
    np.testing.assert_allclose(c, x0 * 3.0, rtol=1e-6)


def test_stacked_parameters(host, tmp_path):
    """More inputs than a kernel takes one by one (te/abi.MAX_KERNEL_PARAMS): the stacked
    parameter is filled from the caller's arrays by the runtime's copies."""
    n = 260
    b = GraphBuilder("Fused_many")
    xs = [b.input(f"x{i}", (8,), "float32") for i in range(n)]
    acc = xs[0]
    for v in xs[1:]:
        acc = acc + v
    b.output(acc)
    g = b.build()
    km = build_kernel_meta(g, tmp_path)
    _check(host, g, km.json)


def test_object_code_is_cached_once_per_structure(tmp_path, monkeypatch):
    from akgpy.tune import cache
    monkeypatch.setenv("AKGPY_CACHE", str(tmp_path / "cache"))
    cache.reset_stats()
    first = build_kernel_meta(_reduce_graph("Fused_a", "x"), tmp_path / "a")
    second = build_kernel_meta(_reduce_graph("Fused_b", "other_name"), tmp_path / "b")
    stats = cache.stats()
    assert stats["compiles"] == 1 and stats["hits"] == 1, stats
    assert first.meta["tir_hash"] == second.meta["tir_hash"]
    assert second.meta["kernelName"] == "Fused_b_kernel"
    rec = cache.default_cache().records()
    assert {r.key.artifact_format for r in rec} == {"llvm-obj/1"}


def test_cli(tmp_path):
    src = tmp_path / "Fused_cli.json"
    src.write_text(_reduce_graph("Fused_cli").to_composite())
    bad = tmp_path / "broken.json"
    bad.write_text("{not json")
    env = {**os.environ, "AKGPY_CACHE": "off"}
    run = subprocess.run([sys.executable, "-m", "akgpy.kernel_meta", str(src), "-o", str(tmp_path / "out")],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "out" / "Fused_cli.so").is_file() and (tmp_path / "out" / "Fused_cli.json").is_file()
    run = subprocess.run([sys.executable, "-m", "akgpy.kernel_meta", str(bad), "-o", str(tmp_path / "out")],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 1 and "malformed JSON" in run.stderr


def test_bad_requests_are_named(tmp_path):
    g = _reduce_graph("not-a-c-name")
    with pytest.raises(FormatError, match="not a C identifier"):
        build_kernel_meta(g, tmp_path)
    with pytest.raises(FormatError, match="malformed JSON"):
        build_kernel_meta("{", tmp_path)
    with pytest.raises(FormatError, match="attrs"):
        build_kernel_meta(_reduce_graph(), tmp_path, attrs="[1, 2]")
    assert not list(tmp_path.iterdir())


def test_target_info_of_this_machine_is_the_host():
    import platform
    t = target_from_info({"arch": platform.machine(), "cpu": "core-avx2", "feature": "avx", "system": "linux"})
    assert t.is_host
    other = target_from_info({"arch": "x86_64", "cpu": "haswell", "system": "freebsd"})
    assert not other.is_host and other.cpu == "haswell"


def test_workspaces_come_from_the_callers_malloc(host, tmp_path):
    """A GEMM whose B is packed into panels allocates them from TVM's workspace allocator: in a
    self-contained kernel that is the caller's malloc, freed before the call returns."""
    from akgpy.testing import workspace_allocations
    b = GraphBuilder("Fused_mm")
    b.output(b.relu(b.matmul(b.input("x", (256, 256)), b.input("w", (256, 1024)))))
    g = b.build()
    assert workspace_allocations(akgpy.fuse(g)), "the kernel no longer uses a workspace: pick another"
    km = build_kernel_meta(g, tmp_path)
    before = host.counts()
    _check(host, g, km.json)
    after = host.counts()
    assert after["mallocs"] > before["mallocs"]
    assert after["mallocs"] - before["mallocs"] == after["frees"] - before["frees"]


def test_launchers_that_take_the_task_count_literally(tmp_path, capfd):
    """TVM asks for 0 tasks ("as many as you have"): a launcher that runs exactly the count it is
    given runs none, and the kernel then runs its loop itself; one that runs fewer tasks than it
    announces is an error, not a silently missing part of the output."""
    g = _reduce_graph()
    km = build_kernel_meta(g, tmp_path)
    literal = Host(tmp_path, launcher="host_launch_literal")
    _check(literal, g, km.json)
    short = Host(tmp_path, launcher="host_launch_short")
    x = np.ones((64, 4096), np.float32)
    rc, _ = short.call(km.json, [x, np.ones(4096, np.float32)])
    assert rc != 0
    assert "ran another number of tasks than it announced" in capfd.readouterr().err


def test_verify_catches_a_kernel_of_another_computation(tmp_path):
    from akgpy.kernel_meta import verify

    def scaled(k: float) -> akgpy.Graph:
        b = GraphBuilder("Fused_scale")
        b.output(b.input("x", (16, 40), "float32") * k)
        return b.build()
    km = build_kernel_meta(scaled(2.0), tmp_path)
    assert verify(scaled(2.0), km) == []
    bad = verify(scaled(3.0), km)
    assert bad and bad[0].bad == 16 * 40


def test_small_kernels_do_not_launch_tasks(host, tmp_path):
    """A launch on the caller's pool costs microseconds (an OpenMP region, more when another
    process holds a core): a nest under `standalone_config`'s min_parallel_work runs serially."""
    from akgpy.target import resolve_target
    from akgpy.targets import backend_for
    t = resolve_target(None)
    limit = backend_for(t).standalone_config(t).min_parallel_work
    b = GraphBuilder("Fused_small")
    x = b.input("x", (limit // 256, 128), "float32")
    b.output(b.exp(x * 2.0))
    g = b.build()
    km = build_kernel_meta(g, tmp_path)
    before = host.counts()
    _check(host, g, km.json)
    assert host.counts()["launches"] == before["launches"]
