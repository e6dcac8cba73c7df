"""akgpy as the AKG of the real MindSpore wheel (issue 50): each zoo network runs under stock
MindSpore with akgpy's `akg` shim, and every graph kernel MindSpore asks for is compiled by akgpy
and computes what the unfused network computes.

Needs `mindspore==2.10.0` and `decorator` (.ci/run's marked step installs them); selected with
`-m mindspore`. Each run is its own subprocess with a fresh MS_COMPILER_CACHE_PATH
(akgpy/mindspore/runner.py).
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from akgpy.mindspore.runner import mode_env, run_network
from akgpy.mindspore.zoo import NETWORKS

pytestmark = pytest.mark.mindspore

STEPS = 4  # the first compiles; MindSpore's own threads settle in the second
TIMEOUT = 300

_HASHES = """
import json, sys
from pathlib import Path
import akgpy
from akgpy.graph.canonical import canonical_names
from akgpy.kernel_meta import kernel_object, target_from_info
out = {}
for info in sorted(Path(sys.argv[1]).glob("*.info")):
    js = info.with_suffix(".json")
    if not js.exists() or not json.loads(js.read_text()).get("compiler", "").startswith("akgpy "):
        continue  # not akgpy's kernel: test_every_kernel_compiled_by_akgpy names it
    g = akgpy.load_composite(info)
    out[info.stem] = kernel_object(canonical_names(g), target_from_info(g.meta.get("target_info"))).tir_hash
print(json.dumps(out))
"""


def _require_wheel() -> None:
    if importlib.util.find_spec("mindspore") is None:
        pytest.fail("mindspore is not installed: `python3 -m pip install mindspore==2.10.0 decorator` "
                    "(.ci/run's MindSpore step), or deselect with -m 'not mindspore'")


@pytest.fixture(scope="module", params=sorted(NETWORKS))
def runs(request, tmp_path_factory):
    """One network run without fusion, with the bundled AKG (the thread baseline), with akgpy, and
    with akgpy again on the same MindSpore cache."""
    _require_wheel()
    name = request.param
    base = tmp_path_factory.mktemp(name)
    r = {"name": name, "cache": base / "akgpy"}
    r["nofusion"] = run_network(name, "nofusion", STEPS, base / "nofusion", TIMEOUT)
    r["bundled"] = run_network(name, "bundled", STEPS, base / "bundled", TIMEOUT)
    r["akgpy"] = run_network(name, "akgpy", STEPS, r["cache"], TIMEOUT)
    meta = Path(r["akgpy"]["meta_dir"])
    r["log_before"] = (meta / "akgpy.log").read_text() if (meta / "akgpy.log").exists() else ""
    r["again"] = run_network(name, "akgpy", STEPS, r["cache"], TIMEOUT)
    return r


def _meta(runs) -> Path:
    return Path(runs["akgpy"]["meta_dir"])


def test_every_kernel_compiled_by_akgpy(runs):
    meta = _meta(runs)
    counts = runs["akgpy"]["meta"]
    infos = sorted(meta.glob("*.info"))
    assert infos, f"{runs['name']}: MindSpore asked for no graph kernel (is fusion on? flags {runs['akgpy']['flags']!r})"
    log = [json.loads(line) for line in (meta / "akgpy.log").read_text().splitlines() if line.strip()]
    handed = [f"{e['op']}: {e['detail']}" for e in log if e["status"] != "compiled"]
    assert not handed, f"{runs['name']}: {len(handed)} of {len(infos)} kernels handed back:\n" + "\n".join(handed)
    for info in infos:
        js = info.with_suffix(".json")
        assert js.exists(), f"{info.name}: no kernel .json (MindSpore split it)"
        assert json.loads(js.read_text()).get("compiler", "").startswith("akgpy "), f"{js.name} not written by akgpy"
    assert counts["json_akgpy"] == counts["info"] == len(infos) and counts["json_bundled"] == 0, counts
    assert not runs["akgpy"]["tvm_loaded"], "tvm was imported into MindSpore's process"


def test_recorded_tir_hash(runs):
    meta = _meta(runs)
    env = mode_env("akgpy", runs["cache"])
    env["AKGPY_CACHE"] = "off"
    r = subprocess.run([sys.executable, "-c", _HASHES, str(meta)], env=env, capture_output=True, text=True,
                       timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr[-4000:]
    recomputed = json.loads(r.stdout.splitlines()[-1])
    assert recomputed, f"no kernel of akgpy's in {meta}"
    for stem, tir_hash in recomputed.items():
        recorded = json.loads((meta / f"{stem}.json").read_text())["tir_hash"]
        assert recorded == tir_hash, f"{stem}: recorded tir_hash {recorded}, recompiled {tir_hash}"


def test_libraries_match_sha256_and_need_no_libtvm(runs):
    meta = _meta(runs)
    jsons = sorted(meta.glob("*.json"))
    assert jsons
    for js in jsons:
        desc = json.loads(js.read_text())
        lib = js.with_suffix(".so")
        assert hashlib.sha256(lib.read_bytes()).hexdigest() == desc["sha256"], f"{lib.name}: sha256 differs"
        dyn = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True, check=True).stdout
        assert "Dynamic section" in dyn, dyn
        assert "libtvm" not in dyn, f"{lib.name} needs libtvm:\n{dyn}"


def _outputs(result: dict) -> dict[str, np.ndarray]:
    with np.load(result["outputs"]) as z:
        return {k: z[k] for k in z.files}


def test_outputs_match_unfused(runs):
    got, want = _outputs(runs["akgpy"]), _outputs(runs["nofusion"])
    assert sorted(got) == sorted(want) and got
    tol = 1e-3 if "float16" in runs["nofusion"]["dtypes"] + runs["akgpy"]["dtypes"] else 1e-4
    for key in sorted(want):
        assert got[key].shape == want[key].shape and got[key].dtype == want[key].dtype, key
        np.testing.assert_allclose(got[key], want[key], rtol=tol, atol=tol, err_msg=f"{runs['name']} {key}")


def test_kernels_start_no_threads(runs):
    """From the second step on (MindSpore's launch pipeline started), the count stays put, and the
    akgpy run holds no thread, by name, beyond those of the bundled-AKG or the unfused run (how
    many actor threads MindSpore starts varies from run to run): kernels use MindSpore's pool."""
    from collections import Counter
    ours = runs["akgpy"]
    assert len(set(ours["threads_per_step"][1:])) == 1, ours["threads_per_step"]
    allowed = Counter(runs["bundled"]["thread_names"]) | Counter(runs["nofusion"]["thread_names"])
    extra = Counter(ours["thread_names"]) - allowed
    assert not extra, (ours["thread_names"], dict(allowed))


def test_second_run_compiles_nothing(runs):
    meta = _meta(runs)
    after = (meta / "akgpy.log").read_text() if (meta / "akgpy.log").exists() else ""
    assert after == runs["log_before"], f"the second run compiled:\n{after[len(runs['log_before']):]}"
    assert runs["again"]["meta"] == runs["akgpy"]["meta"]
    first, again = _outputs(runs["akgpy"]), _outputs(runs["again"])
    tol = 1e-3 if "float16" in runs["akgpy"]["dtypes"] else 1e-4
    for key in sorted(first):
        np.testing.assert_allclose(again[key], first[key], rtol=tol, atol=tol, err_msg=key)
