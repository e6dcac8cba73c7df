"""A compiled Program as bytes and a JSON manifest, and back, with no lowering or scheduling.

`pack(program) -> (data, manifest)`: `data` is the kernels' shared objects (as
`executable.export_library` writes them) one after another; the manifest holds what a Program
needs besides the code: per kernel its name, packed entry, parameters (te/lower.Param as JSON:
kind, tensor, storage shape and dtype, alignment, stack members), where its bytes lie in `data`
and their sha256, its SchedulePath fields, the schedule report and what the graph stage changed
(collapsed dims). The result order and the collapsed views follow from the graph and the
parameters, so `unpack(graph, data, manifest)` rebuilds the Program from the graph it was
compiled from (checked by structural hash). The code is loaded by runtime/native.py (ctypes,
no tvm import); `loader="tvm"` uses tvm.runtime.load_module instead. `launcher` picks whose
threads run the kernels' parallel loops (runtime/launcher.py); `with_launcher(program, launcher)`
is a Program's round trip through both onto another launcher.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable

from ..errors import ArtifactError

ARTIFACT_VERSION = 1
ARTIFACT_FORMAT = "llvm-so/1"  # the CPU backend's: one shared object per kernel
PARAM_FIELDS = ("kind", "tensor", "shape", "dtype", "align", "members")


@dataclasses.dataclass(frozen=True)
class ArtifactParam:
    """A kernel parameter read back from a manifest: te/abi.Param's fields, without importing
    te/ (which imports tvm)."""
    kind: str
    tensor: str
    shape: tuple[int, ...]
    dtype: str
    align: int
    members: tuple[str, ...] = ()

    @property
    def tensors(self) -> tuple[str, ...]:
        return self.members or (self.tensor,)


def pack(program) -> tuple[bytes, dict]:
    """(data, manifest) of a compiled Program: every kernel's shared object and what calling it needs."""
    from ..graph.hash import structural_hash
    chunks, kernels, offset = [], [], 0
    for k in program.kernels:
        code = k.code if hasattr(k, "code") else _export(k)
        chunks.append(code)
        kernels.append({
            "name": k.name, "entry": k.entry,
            "params": [{f: jsonable(getattr(p, f)) for f in PARAM_FIELDS} for p in k.params],
            "offset": offset, "size": len(code), "sha256": hashlib.sha256(code).hexdigest(),
            "schedule_path": _path_fields(k), "report": k._report, "graph_note": k._graph_note,
        })
        offset += len(code)
    target = program.target
    g = program.graph
    manifest = {"version": ARTIFACT_VERSION, "format": ARTIFACT_FORMAT,
                "graph": structural_hash(g), "graph_name": g.name, "names": [*g.inputs, *g.outputs],
                "target": target.to_json() if hasattr(target, "to_json") else str(target), "kernels": kernels}
    return b"".join(chunks), manifest


def unpack(graph, data: bytes, manifest: dict, *, target: Any = None, loader: str = "native",
           recompile: Callable[[int], Any] | None = None, launcher: str = "tvm"):
    """The Program `pack` described, for `graph` (the graph it was compiled from). `target`:
    what Program.target reports (default: the manifest's). `recompile(i)` returns kernel i
    compiled again, for tir/source/explain of the restored kernels; None: they say there is none.
    ArtifactError when the manifest is malformed, names another graph, or a kernel's bytes do
    not match their hash."""
    from ..graph.hash import structural_hash
    from .program import Program, RestoredKernel
    if loader not in ("native", "tvm"):
        raise ArtifactError(f"unknown artifact loader {loader!r}; available: 'native', 'tvm'")
    if loader == "tvm" and launcher != "tvm":
        raise ArtifactError(f"loader 'tvm' runs kernels on TVM's pool only; launcher {launcher!r} needs loader 'native'")
    if not isinstance(manifest, dict) or manifest.get("version") != ARTIFACT_VERSION \
            or manifest.get("format") != ARTIFACT_FORMAT:
        raise ArtifactError(f"artifact manifest is not version {ARTIFACT_VERSION} of {ARTIFACT_FORMAT}: "
                            f"{_brief(manifest)}")
    if manifest.get("graph") != structural_hash(graph):
        raise ArtifactError(f"artifact was compiled from graph {manifest.get('graph_name')!r} "
                            f"(hash {str(manifest.get('graph'))[:16]}), not from {graph.name!r}")
    kernels = []
    try:
        # the hash ignores names: a structurally equal graph (a model's repeated group) names its
        # inputs and outputs otherwise, position for position
        rename = dict(zip(manifest["names"], [*graph.inputs, *graph.outputs]))
        entries = list(manifest["kernels"])
        for i, m in enumerate(entries):
            code = bytes(data[m["offset"]:m["offset"] + m["size"]])
            if len(code) != m["size"] or hashlib.sha256(code).hexdigest() != m["sha256"]:
                raise ArtifactError(f"artifact bytes of kernel {m['name']!r} do not match their sha256")
            params = [ArtifactParam(p["kind"], rename.get(p["tensor"], p["tensor"]), tuple(p["shape"]), p["dtype"],
                                    int(p["align"]), tuple(rename.get(n, n) for n in p["members"]))
                      for p in m["params"]]
            func = _load(code, m["entry"], params, loader, launcher)
            kernels.append(RestoredKernel(
                m["name"], m["entry"], params, func, schedule_path=m["schedule_path"], schedule_report=m["report"],
                graph_note=m["graph_note"], code=code, recompile=(lambda i=i: recompile(i)) if recompile else None))
    except (KeyError, TypeError, ValueError) as e:
        raise ArtifactError(f"artifact manifest is malformed: {type(e).__name__}: {e}") from None
    if target is None:
        from ..target import Target
        target = manifest["target"]
        target = Target.from_json(target) if isinstance(target, dict) else target
    return Program(graph, kernels, target)


def _export(kernel) -> bytes:
    with tempfile.TemporaryDirectory(prefix="akgpy-pack-") as d:
        path = os.path.join(d, f"{kernel.name}.so")
        kernel._executable.export_library(path)
        return Path(path).read_bytes()


def _path_fields(kernel) -> dict:
    return {f.name: getattr(kernel.schedule_path, f.name) for f in dataclasses.fields(kernel.schedule_path)}


_dir_lock = threading.Lock()
_dir: str | None = None


def _load(code: bytes, entry: str, params, loader: str, launcher: str = "tvm"):
    """The kernel's packed entry as a callable on numpy arrays. The object is written under
    its content hash to a private temporary directory (dlopen needs a file; a name means one
    content, so the dynamic loader's reuse of an already loaded name is harmless), then removed."""
    global _dir
    with _dir_lock:
        if _dir is None or not os.path.isdir(_dir):
            _dir = tempfile.mkdtemp(prefix="akgpy-so-")
        # one file name per launcher: the dynamic loader reuses a loaded name, and with it the
        # context slots NativeLibrary filled for another launcher
        tag = "" if launcher == "tvm" else f"-{launcher}"
        path = os.path.join(_dir, hashlib.sha256(code).hexdigest()[:32] + tag + ".so")
        tmp = path + f".{os.getpid()}.tmp"
        Path(tmp).write_bytes(code)
        os.replace(tmp, path)
        try:
            if loader == "native":
                from .native import NativeLibrary
                return NativeLibrary(path, launcher).function(entry, params)
            import tvm
            return tvm.runtime.load_module(path)[entry]
        finally:
            os.unlink(path)


def with_launcher(program, launcher: str):
    """`program` (a Program) with its kernels loaded again, their parallel loops on `launcher`
    ("tvm" or "openmp", runtime/launcher.py); tir/source/explain still come from its kernels. A
    freshly compiled kernel is exported first (one link), a restored one reuses its bytes."""
    from .launcher import check
    check(launcher)
    data, manifest = pack(program)
    kernels = program.kernels

    def recompile(i):
        k = kernels[i]
        return k.compiled() if hasattr(k, "compiled") else k
    return unpack(program.graph, data, manifest, target=program.target, recompile=recompile, launcher=launcher)


def jsonable(v):
    return list(v) if isinstance(v, tuple) else v


def _brief(x) -> str:
    text = repr(x)
    return text if len(text) <= 120 else text[:117] + "..."
