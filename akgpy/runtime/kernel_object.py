"""A compiled one-kernel Program as relocatable object code and a manifest, and back: what a
self-contained kernel (docs/kernel_meta.md) is linked from, and what the compile cache keeps for
it under the backend's `object_format`. Nothing here loads or runs the code.
"""
from __future__ import annotations

import dataclasses
import hashlib

from ..errors import ArtifactError, CompileError
from .artifact import PARAM_FIELDS, ArtifactParam, jsonable

OBJECT_VERSION = 1


@dataclasses.dataclass(frozen=True)
class KernelObject:
    code: bytes  # the object file
    format: str  # the backend's object_format
    entry: str  # packed entry: the object defines __tvm_ffi_<entry>
    params: tuple[ArtifactParam, ...]
    graph_hash: str  # structural hash of the graph compiled
    tir_hash: str  # structural hash of the scheduled TIR it was built from
    schedule_path: dict  # schedule/poly.SchedulePath's fields

    def manifest(self) -> dict:
        return {"version": OBJECT_VERSION, "format": self.format, "entry": self.entry,
                "params": [{f: jsonable(getattr(p, f)) for f in PARAM_FIELDS} for p in self.params],
                "graph": self.graph_hash, "tir": self.tir_hash, "schedule_path": self.schedule_path,
                "sha256": hashlib.sha256(self.code).hexdigest()}


def pack_object(program) -> tuple[bytes, dict]:
    """(object code, manifest) of a freshly compiled Program of one kernel."""
    import tvm_ffi

    from ..graph.hash import structural_hash
    from ..targets import backend_for
    if len(program.kernels) != 1:
        raise CompileError(f"{program.graph.name} compiled to {len(program.kernels)} kernels; a self-contained "
                           "kernel is one")
    k = program.kernels[0]
    backend = backend_for(program.target)
    obj = KernelObject(
        backend.export_object(k._executable), backend.object_format, k.entry,
        tuple(ArtifactParam(p.kind, p.tensor, tuple(p.shape), p.dtype, p.align, tuple(p.members)) for p in k.params),
        structural_hash(program.graph), f"{tvm_ffi.structural_hash(k._mod):016x}",
        {f.name: getattr(k.schedule_path, f.name) for f in dataclasses.fields(k.schedule_path)})
    return obj.code, obj.manifest()


def unpack_object(code: bytes, manifest: dict) -> KernelObject:
    """The KernelObject `pack_object` described; ArtifactError when the manifest is malformed or
    the bytes do not match their hash."""
    if not isinstance(manifest, dict) or manifest.get("version") != OBJECT_VERSION:
        raise ArtifactError(f"kernel object manifest is not version {OBJECT_VERSION}")
    try:
        if hashlib.sha256(code).hexdigest() != manifest["sha256"]:
            raise ArtifactError("kernel object bytes do not match their sha256")
        params = tuple(ArtifactParam(p["kind"], p["tensor"], tuple(p["shape"]), p["dtype"], int(p["align"]),
                                     tuple(p["members"])) for p in manifest["params"])
        return KernelObject(bytes(code), manifest["format"], manifest["entry"], params, manifest["graph"],
                            manifest["tir"], dict(manifest["schedule_path"]))
    except (KeyError, TypeError, ValueError) as e:
        raise ArtifactError(f"kernel object manifest is malformed: {type(e).__name__}: {e}") from None

