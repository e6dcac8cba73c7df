"""akgpy.Target: resolved once from what the user passes; hardware facts and a stable fingerprint."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import tvm

import akgpy
from akgpy import config
from akgpy.errors import CompileError
from akgpy.target import GENERIC_L2_BYTES, GENERIC_LLC_BYTES, Target, resolve_target

HASWELL = {"kind": "llvm", "mcpu": "haswell"}


def test_host_names_resolve_to_this_machine():
    host = resolve_target(None)
    assert host.is_host and host.kind == "llvm"
    assert host.cpu == str(tvm.target.codegen.llvm_get_system_cpu())
    assert host.triple == str(tvm.target.codegen.llvm_get_system_triple())
    assert host.threads == config.threads()
    for name in ("llvm", "host", "cpu"):
        assert resolve_target(name) == host
    assert resolve_target(host) is host  # a Target passes through
    assert akgpy.Target is Target


def test_host_vector_bytes_follow_llvm_features():
    host = resolve_target(None)
    tgt = host.tvm()
    wide = all(tvm.target.codegen.target_has_features(f, tgt) for f in ("avx512f", "avx512bw", "avx512vl"))
    avx2 = bool(tvm.target.codegen.target_has_features("avx2", tgt))
    assert host.vector_bytes == (64 if wide else 32 if avx2 else 16)
    assert list(host.features) == sorted(set(host.features))


def test_dict_and_tvm_forms_agree():
    a = resolve_target(HASWELL)
    b = resolve_target(tvm.target.Target(HASWELL))
    assert a == b
    assert a.cpu == "haswell" and not a.is_host


def test_haswell_has_avx2_and_no_avx512():
    hw = resolve_target(HASWELL)
    assert hw.vector_bytes == 32
    assert "avx2" in hw.features and "fma" in hw.features
    assert not [f for f in hw.features if f.startswith("avx512")]
    # not the host's CPU: the documented generic caches, not sysfs
    if resolve_target(None).cpu != "haswell":
        assert (hw.l2_bytes, hw.llc_bytes) == (GENERIC_L2_BYTES, GENERIC_LLC_BYTES)


def test_akgpy_keys_override_facts_and_change_the_fingerprint():
    hw = resolve_target(HASWELL)
    small = resolve_target({**HASWELL, "l2_bytes": 256 << 10, "threads": 3})
    assert (small.l2_bytes, small.threads) == (256 << 10, 3)
    assert small.fingerprint != hw.fingerprint


def test_mattr_changes_features():
    hw = resolve_target({**HASWELL, "mattr": ["-avx2"]})
    assert "avx2" not in hw.features and hw.mattr == ("-avx2",)
    assert resolve_target({"kind": "llvm", "mcpu": "skylake-avx512"}).vector_bytes == 64


def test_fingerprint_is_stable_and_tells_targets_apart():
    host, hw = resolve_target(None), resolve_target(HASWELL)
    assert host.fingerprint == resolve_target("host").fingerprint
    assert len(hw.fingerprint) == 16 and int(hw.fingerprint, 16) >= 0
    if host.cpu != "haswell":
        assert host.fingerprint != hw.fingerprint
    # is_host is not part of it
    assert host.replace(is_host=False).fingerprint == host.fingerprint
    code = ("import json; from akgpy.target import resolve_target as r; "
            "print(json.dumps([r(None).fingerprint, r({'kind': 'llvm', 'mcpu': 'haswell'}).fingerprint]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [host.fingerprint, hw.fingerprint]


def test_json_round_trip():
    for t in (resolve_target(None), resolve_target(HASWELL)):
        d = t.to_json()
        assert Target.from_json(json.loads(json.dumps(d))) == t
    with pytest.raises(CompileError, match="missing"):
        Target.from_json({"kind": "llvm"})
    with pytest.raises(CompileError, match="vector_bytes"):
        Target.from_json({**resolve_target(HASWELL).to_json(), "vector_bytes": 0})


def test_tvm_form_is_what_codegen_uses():
    hw = resolve_target(HASWELL).tvm()
    assert hw.kind.name == "llvm" and str(hw.attrs["mcpu"]) == "haswell"
    assert not tvm.target.codegen.target_has_features("avx512f", hw)


@pytest.mark.parametrize("bad,match", [
    ("cuda", "not yet"), ("ascend", "not yet"), ({"kind": "cuda"}, "not yet"),
    ({"kind": "llvm", "mcpu": "no-such-cpu"}, "no-such-cpu"), ({"bogus": 1}, "kind"), ({"kind": 3}, "kind"),
    ({**HASWELL, "threads": 0}, "threads"), ({"kind": "llvm", "mtriple": "aarch64-linux-gnu"}, "triple"),
    ("llvm -mcpu=skylake", "unsupported target"), (42, "unsupported target"), (["llvm"], "unsupported target"),
])
def test_junk_and_later_kinds_are_refused(bad, match):
    with pytest.raises(CompileError, match=match):
        resolve_target(bad)


def test_tvm_cuda_target_is_not_yet():
    with pytest.raises(CompileError, match="not yet"):
        resolve_target(tvm.target.Target({"kind": "cuda", "arch": "sm_90"}))


def test_haswell_on_this_host_gives_avx2_code_with_32_byte_vectors():
    """Compiling for haswell uses no AVX-512 register or instruction, whatever the host has, and
    the kernel (AVX2 code runs on any AVX-512 host) matches the reference."""
    from akgpy import GraphBuilder
    from akgpy.testing import check_program
    host = resolve_target(None)
    if not host.has("avx2"):
        pytest.skip("the host cannot run AVX2 code")
    b = GraphBuilder("haswell_axpy")
    x, y = b.input("x", (64, 256)), b.input("y", (64, 256))
    b.output(x * 3.0 + y)
    g = b.build()
    prog = akgpy.fuse(g, target=HASWELL)
    kernel = prog.kernels[0]
    asm = kernel._executable.mod.inspect_source("s")
    assert "zmm" not in asm and "ymm" in asm
    ir = kernel.source
    assert '"target-cpu"="haswell"' in ir
    assert set(re.findall(r"<(\d+) x float>", ir)) == {"8"}  # one ymm register of float32 lanes
    assert "avx512" not in ir.split('"target-features"="', 1)[-1].split('"', 1)[0].replace("-avx512", "")
    assert not check_program(g, prog)
    if host.vector_bytes == 64:  # and the host's own kernel does use zmm registers: the target decides
        native = akgpy.fuse(g)
        assert "zmm" in native.kernels[0]._executable.mod.inspect_source("s")


def test_kernel_threads_are_a_codegen_switch(monkeypatch):
    """TVM_NUM_THREADS gives the host Target its threads, which the column-sum chunk count
    follows: the flag is declared to change code, so the compile cache's key names it."""
    from akgpy.tune.cache import codegen_flags
    assert config.NUM_THREADS.affects_codegen
    monkeypatch.setenv("TVM_NUM_THREADS", "3")
    three = resolve_target(None)
    assert three.threads == 3 and codegen_flags()["TVM_NUM_THREADS"] == "3"
    monkeypatch.setenv("TVM_NUM_THREADS", "5")
    assert resolve_target(None).threads == 5 and codegen_flags()["TVM_NUM_THREADS"] == "5"
    assert resolve_target(None).fingerprint != three.fingerprint


def test_program_repr_names_the_target_by_kind_cpu_and_fingerprint():
    from akgpy import GraphBuilder
    b = GraphBuilder("repr_add")
    x = b.input("x", (8, 16))
    b.output(x + 1.0)
    prog = akgpy.fuse(b.build(), target=HASWELL, cache=False)
    t = resolve_target(HASWELL)
    assert repr(prog) == f"Program('repr_add', 1 kernel(s), target=llvm haswell {t.fingerprint})"
