"""akgpy as MindSpore's `akg` (docs/mindspore.md), without MindSpore: recorded requests
(tests/data/mindspore/requests, captured from MindSpore 2.10 by bench/record_mindspore.py)
replayed through `akg.ms.compilewithjson`, each kernel called through ctypes against the
reference; refusals handed back, never raised; the opt-in shell lines."""
from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import akgpy
from akgpy import reference
from akgpy.mindspore.__main__ import SHIM
from akgpy.testing import compare, random_inputs

from .meta_host import Host

REQUESTS = sorted((Path(__file__).parent / "data" / "mindspore" / "requests").glob("*.json"))


@pytest.fixture(scope="module")
def akg_ms():
    """The shim's `akg.ms`, imported as MindSpore imports it (first `akg` on the path)."""
    saved = {k: v for k, v in sys.modules.items() if k == "akg" or k.startswith("akg.")}
    for k in saved:
        del sys.modules[k]
    sys.path.insert(0, str(SHIM))
    try:
        akg = importlib.import_module("akg")
        assert Path(akg.__file__).resolve().is_relative_to(SHIM)
        yield akg.ms
    finally:
        sys.path.remove(str(SHIM))
        for k in [k for k in sys.modules if k == "akg" or k.startswith("akg.")]:
            del sys.modules[k]
        sys.modules.update(saved)


@pytest.fixture(scope="module")
def host(tmp_path_factory) -> Host:
    return Host(tmp_path_factory.mktemp("host"))


def _log(meta_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (meta_dir / "akgpy.log").read_text().splitlines()]


def test_requests_were_recorded():
    assert len(REQUESTS) >= 8, "tests/data/mindspore/requests holds too few recorded requests"
    versions = {json.loads(p.read_text())["json"].get("version") for p in REQUESTS}
    assert versions == {2}


@pytest.mark.parametrize("path", REQUESTS, ids=lambda p: p.stem[:70])
def test_recorded_request_compiles_and_matches(akg_ms, host, tmp_path, path):
    rec = json.loads(path.read_text())
    attrs = dict(rec.get("attrs") or {}, compile_cache=str(tmp_path))
    assert akg_ms.compilewithjson(json.dumps(rec["json"]), json.dumps(attrs)) is True
    meta_dir = tmp_path / "akg_kernel_meta"
    op = rec["json"]["op"]
    log = _log(meta_dir)
    assert [e["status"] for e in log] == ["compiled"], log
    meta = json.loads((meta_dir / f"{op}.json").read_text())
    assert meta["compiler"] == f"akgpy {akgpy.__version__}" and meta["kernelName"] == f"{op}_kernel"
    g = akgpy.load_composite(rec["json"])
    inputs = random_inputs(g, 0)
    ref_inputs, got_inputs = [a.copy() for a in inputs], [a.copy() for a in inputs]
    rc, outs = host.call(meta_dir / f"{op}.json", got_inputs)
    assert rc == 0
    real = [o for o, n in zip(outs, g.outputs) if n not in g.fake_outputs]
    bad = compare(g, real, got_inputs, reference.run(g, ref_inputs), ref_inputs)
    assert not bad, bad


def test_refusals_are_handed_back_not_raised(akg_ms, tmp_path):
    attrs = json.dumps({"compile_cache": str(tmp_path)})
    unknown = {"composite": True, "op": "Fused_Frobnicate_1", "process": "cpu", "version": 2,
               "input_desc": [[{"data_type": "float32", "format": "DefaultFormat", "shape": [4], "tensor_name": "i0"}]],
               "output_desc": [{"data_type": "float32", "format": "DefaultFormat", "shape": [4], "tensor_name": "o0"}],
               "op_desc": [{"name": "Frobnicate", "attr": None,
                            "input_desc": [[{"data_type": "float32", "format": "DefaultFormat", "shape": [4],
                                             "tensor_name": "i0"}]],
                            "output_desc": [{"data_type": "float32", "format": "DefaultFormat", "shape": [4],
                                             "tensor_name": "o0"}]}]}
    assert akg_ms.compilewithjson(json.dumps(unknown), attrs) is True
    assert akg_ms.compilewithjson("{not json", attrs) is True
    assert akg_ms.compilewithjson(json.dumps(unknown), "[not, an, object") is True  # no directory to log to
    meta_dir = tmp_path / "akg_kernel_meta"
    assert not list(meta_dir.glob("*.json")) and not list(meta_dir.glob("*.so"))
    log = _log(meta_dir)
    assert [e["status"] for e in log] == ["handed back", "handed back"]
    assert "Frobnicate" in log[0]["detail"] and log[0]["op"] == "Fused_Frobnicate_1"


def test_importing_the_shim_imports_nothing_else():
    code = ("import sys; sys.path.insert(0, %r); import akg; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('akgpy', 'tvm', 'tvm_ffi', 'numpy')))" % str(SHIM))
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.stdout.strip() == "[]", run.stdout + run.stderr


def test_env_opts_a_shell_in_and_off_opts_it_out():
    py = sys.executable
    script = (f'eval "$({py} -m akgpy.mindspore env)"; {py} -c "import akg; print(akg.__file__)"; '
              f'echo "$MS_DEV_GRAPH_KERNEL_FLAGS"; eval "$({py} -m akgpy.mindspore off)"; '
              f'{py} -m akgpy.mindspore status')
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "MS_DEV_GRAPH_KERNEL_FLAGS")}
    run = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=120)
    lines = run.stdout.splitlines()
    assert run.returncode == 0, run.stderr
    assert Path(lines[0]).resolve() == SHIM / "akg" / "__init__.py"
    assert lines[1] == "--opt_level=2"
    assert "akgpy compiles" not in lines[2]
    # flags the user set are kept
    run = subprocess.run(["bash", "-c", f'eval "$({py} -m akgpy.mindspore env)"; echo "$MS_DEV_GRAPH_KERNEL_FLAGS"'],
                         capture_output=True, text=True, env={**env, "MS_DEV_GRAPH_KERNEL_FLAGS": "--opt_level=1"},
                         timeout=60)
    assert run.stdout.strip() == "--opt_level=1"


def test_a_kernel_that_fails_verification_is_withdrawn(akg_ms, tmp_path, monkeypatch):
    import akgpy.kernel_meta
    from akgpy.testing import Mismatch
    monkeypatch.setattr(akgpy.kernel_meta, "verify", lambda g, km, seed=0: [Mismatch("out", 1e-4, 1.0, 3, 10, "x")])
    rec = json.loads(REQUESTS[0].read_text())
    attrs = dict(rec.get("attrs") or {}, compile_cache=str(tmp_path))
    assert akg_ms.compilewithjson(json.dumps(rec["json"]), json.dumps(attrs)) is True
    meta_dir = tmp_path / "akg_kernel_meta"
    assert not list(meta_dir.glob("*.json")) and not list(meta_dir.glob("*.so"))
    (entry,) = _log(meta_dir)
    assert entry["status"] == "handed back" and "does not match the numpy reference" in entry["detail"]
