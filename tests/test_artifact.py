"""runtime/artifact.py and runtime/native.py: a compiled Program packed to bytes + manifest and
restored without compiling, its kernels called through ctypes (no tvm import) or through
tvm.runtime, bit for bit the same results as the Program that was packed."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import akgpy
from akgpy import GraphBuilder
from akgpy.errors import ArtifactError
from akgpy.runtime import artifact
from akgpy.testing import random_inputs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _fp32():
    b = GraphBuilder("art_fp32")
    x, y = b.input("x", (64, 128)), b.input("y", (64, 128))
    b.output((x * y).sum(axis=1))
    b.output(b.exp(x) + y)
    return b.build()


def _fp16():
    b = GraphBuilder("art_fp16")
    x, w = b.input("x", (32, 256), "float16"), b.input("w", (256,), "float16")
    b.output(b.mul(x, w))
    b.output(b.cast(b.cast(x, "float32").sum(axis=1), "float16"))
    return b.build()


def _scratch():
    """A float32 bias rounded to float16 once per column and kept inside the parallel row loop
    (a 4 KiB row): with the stack bound below it (_compile), the kernel calls TVM's workspace
    allocator through its context symbols."""
    b = GraphBuilder("art_scratch")
    x, bias = b.input("x", (256, 2048), "float16"), b.input("bias", (2048,), "float32")
    y = b.add(x, b.cast(bias, "float16"))
    b.output(b.mul(b.tanh(y), y))
    return b.build()


def _stacked():
    b = GraphBuilder("art_stacked")
    xs = [b.input(f"x{i}", (8,)) for i in range(300)]
    b.output(b.op("AddN", xs, (8,), "float32"))
    return b.build()


def _collapsed():
    b = GraphBuilder("art_collapsed")
    x = b.input("x", (4, 8, 16))
    b.output(b.transpose(x, (0, 2, 1)) * 2.0)
    return b.build()


GRAPHS = [_fp32, _fp16, _scratch, _stacked, _collapsed]


def _compile(make, monkeypatch):
    g = make()
    if make is _scratch:
        from akgpy.targets.cpu import stack_scratch
        with monkeypatch.context() as m:
            m.setattr(stack_scratch, "STACK_SCRATCH_BYTES", 1024)  # under the row: the allocator keeps it
            return g, akgpy.fuse(g)
    return g, akgpy.fuse(g)


@pytest.mark.parametrize("make", GRAPHS, ids=lambda f: f.__name__[1:])
@pytest.mark.parametrize("loader", ["native", "tvm"])
def test_unpacked_program_matches_bit_for_bit(make, loader, monkeypatch):
    g, prog = _compile(make, monkeypatch)
    data, manifest = artifact.pack(prog)
    json.dumps(manifest)  # plain JSON: the cache stores it as text
    restored = artifact.unpack(g, data, manifest, loader=loader)
    for seed in (0, 1):
        args = random_inputs(g, seed=seed)
        want = prog(*[a.copy() for a in args])
        got = restored(*[a.copy() for a in args])
        assert len(got) == len(want)
        for w, r in zip(want, got):
            assert r.shape == w.shape and r.dtype == w.dtype
            assert w.tobytes() == r.tobytes()
    assert restored.kernels[0].schedule_path == prog.kernels[0].schedule_path


def test_scratch_kernel_uses_the_workspace_allocator(monkeypatch):
    # the case the context symbols exist for: without them the restored kernel would jump to null
    data, _ = artifact.pack(_compile(_scratch, monkeypatch)[1])
    assert b"__TVMBackendAllocWorkspace" in data and b"__TVMBackendParallelLaunch" in data


def test_repack_of_a_restored_program_is_identical():
    g = _fp32()
    data, manifest = artifact.pack(akgpy.fuse(g))
    data2, manifest2 = artifact.pack(artifact.unpack(g, data, manifest))
    assert data2 == data and manifest2 == manifest


def test_restored_kernel_recompiles_for_tir_or_says_there_is_none():
    g = _fp32()
    prog = akgpy.fuse(g)
    data, manifest = artifact.pack(prog)
    bare = artifact.unpack(g, data, manifest)
    assert "cached artifact" in bare.explain() and "no TIR kept" in bare.explain()
    with pytest.raises(ArtifactError, match="not available"):
        bare.kernels[0].tir
    calls = []

    def recompile(i):
        calls.append(i)
        return akgpy.fuse(g).kernels[i]
    lazy = artifact.unpack(g, data, manifest, recompile=recompile)
    assert not calls  # restoring compiles nothing
    assert lazy.kernels[0].tir == prog.kernels[0].tir
    assert "cached artifact" in lazy.explain() and "== scheduled TIR" in lazy.explain()
    assert calls == [0]


def test_unpack_refuses_another_graph_and_tampered_bytes():
    g = _fp32()
    data, manifest = artifact.pack(akgpy.fuse(g))
    with pytest.raises(ArtifactError, match="not from 'art_fp16'"):
        artifact.unpack(_fp16(), data, manifest)
    flipped = bytearray(data)
    flipped[len(flipped) // 2] ^= 1
    with pytest.raises(ArtifactError, match="sha256"):
        artifact.unpack(g, bytes(flipped), manifest)
    with pytest.raises(ArtifactError, match="version"):
        artifact.unpack(g, data, {**manifest, "version": 99})
    with pytest.raises(ArtifactError, match="malformed"):
        artifact.unpack(g, data, {**manifest, "kernels": [{"name": "x"}]})
    with pytest.raises(ArtifactError, match="loader"):
        artifact.unpack(g, data, manifest, loader="dlopen")


def test_native_loader_imports_no_tvm_and_sizes_the_pool(tmp_path):
    """In a fresh process: the restored kernel runs without tvm in sys.modules, gives the packed
    Program's bytes, and its parallel loop runs on TVM_NUM_THREADS threads (the pool starts
    THREADS - 1 workers beside the caller)."""
    g = _fp32()
    prog = akgpy.fuse(g)
    data, manifest = artifact.pack(prog)
    args = random_inputs(g, seed=3)
    want = prog(*[a.copy() for a in args])
    (tmp_path / "k.bin").write_bytes(data)
    (tmp_path / "k.json").write_text(json.dumps(manifest))
    np.savez(tmp_path / "args.npz", *args)
    np.savez(tmp_path / "want.npz", *want)
    script = textwrap.dedent(f"""
        import json, os, sys
        import numpy as np
        sys.path.insert(0, {REPO!r})
        from tests.test_artifact import _fp32
        from akgpy.runtime import artifact
        d = {str(tmp_path)!r}
        g = _fp32()
        prog = artifact.unpack(g, open(d + "/k.bin", "rb").read(), json.load(open(d + "/k.json")))
        args = list(np.load(d + "/args.npz").values())
        before = len(os.listdir("/proc/self/task"))
        got = prog(*args)
        threads = len(os.listdir("/proc/self/task")) - before
        want = list(np.load(d + "/want.npz").values())
        print(json.dumps({{"tvm": "tvm" in sys.modules, "same": all(w.tobytes() == r.tobytes() for w, r in zip(want, got)),
                          "threads": threads}}))
    """)
    for n in (1, 3):
        env = {**os.environ, "TVM_NUM_THREADS": str(n)}
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
        assert out.returncode == 0, out.stderr
        res = json.loads(out.stdout.strip().splitlines()[-1])
        assert res == {"tvm": False, "same": True, "threads": n - 1}
