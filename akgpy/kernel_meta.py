"""A fused subgraph as a self-contained kernel for any framework: `<name>.so` exporting
`int <name>_kernel(void **args)` and `<name>.json` describing it (MindSpore's AKG kernel-meta pair,
docs/kernel_meta.md).

    akgpy.build_kernel_meta(json_or_graph, out_dir)      # library call
    python -m akgpy.kernel_meta FILE... [-o DIR]          # from a shell

The kernel is compiled from the same scheduled TIR `akgpy.fuse` produces, under names that are
positions (graph/canonical.py), so the object code is the same for every request of one
structure and the compile cache keeps it once (backend `object_format`); the table that maps the
caller's arguments, the exported symbol and the runtime are linked per request
(targets/cpu/standalone.py).
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import platform
import re
import sys
from pathlib import Path
from typing import Any, Sequence

from .errors import AkgpyError, FormatError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,200}\Z")


@dataclasses.dataclass(frozen=True)
class KernelMeta:
    """What `build_kernel_meta` wrote."""
    name: str
    symbol: str  # the exported C function
    library: Path  # <out_dir>/<name>.so
    json: Path  # <out_dir>/<name>.json
    meta: dict  # the .json's content


def build_kernel_meta(source: Any, out_dir: str | os.PathLike, attrs: Any = None, *, target=None,
                      config=None) -> KernelMeta:
    """Compile `source` (composite JSON text, a path, a dict or a Graph) into `<out_dir>/<name>.so`
    and `<out_dir>/<name>.json`, `name` being the graph's (the composite `op`). `attrs`: the
    framework's build attributes (a dict or JSON text, MindSpore's), checked to be an object and
    otherwise not read: akgpy's choices come from the target and the compile cache. `target`:
    what akgpy.resolve_target accepts; None: the graph's `target_info` (the machine compiling, when
    that names its architecture: the kernels run where they are compiled). `config`: an
    akgpy.ScheduleConfig; None: the backend's defaults for a kernel the caller's launcher runs
    (`Backend.standalone_config`). The .json is written
    last, so a reader that finds it finds the library too. Raises an AkgpyError naming the op
    and tensor for what akgpy refuses."""
    from .frontends.composite import load_composite
    from .graph.ir import Graph
    graph = source if isinstance(source, Graph) else load_composite(source)
    parse_attrs(attrs)
    if not _NAME.match(graph.name):
        raise FormatError(f"kernel name {graph.name!r} is not a C identifier (letters, digits, '_')")
    tgt = _target(graph, target)
    from .graph.canonical import canonical_names
    canon = canonical_names(graph)
    obj = kernel_object(canon, tgt, config)
    bindings, moves, args = plan(canon, obj.params, original=graph)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    symbol = f"{graph.name}_kernel"
    lib, meta_path = out / f"{graph.name}.so", out / f"{graph.name}.json"
    from .targets.cpu.standalone import link
    link(obj.code, obj.entry, symbol, bindings, moves, lib, label=graph.name)
    from .version import __version__
    meta = {"kernelName": symbol, "sha256": hashlib.sha256(lib.read_bytes()).hexdigest(),
            "compiler": f"akgpy {__version__}", "graph_hash": obj.graph_hash, "tir_hash": obj.tir_hash,
            "object_format": obj.format, "target": tgt.to_json(), "schedule_path": obj.schedule_path,
            "args": args}
    staged = meta_path.with_name(meta_path.name + f".{os.getpid()}.tmp")
    staged.write_text(json.dumps(meta, indent=1) + "\n")
    os.replace(staged, meta_path)
    return KernelMeta(graph.name, symbol, lib, meta_path, meta)


def kernel_object(graph, target, config=None):
    """The KernelObject (runtime/kernel_object.py) of `graph` (names canonical: graph/canonical.py)
    for a resolved target: from the compile cache, else compiled as akgpy.fuse compiles it, and
    stored. `config`: None is the backend's `standalone_config(target)`."""
    from .pipeline import compile_graph
    from .runtime.kernel_object import pack_object, unpack_object
    from .targets import backend_for
    from .tune.cache import cached
    backend = backend_for(target)
    config = config or backend.standalone_config(target)
    return cached(graph, target, schedule="poly", config=config,
                  compile=lambda t, cfg: compile_graph(graph, t, config=cfg, cache=False),
                  artifact_format=backend.object_format, pack=pack_object,
                  restore=lambda rec, t, recompile: unpack_object(rec.artifact, rec.manifest),
                  fresh=lambda prog, packed: unpack_object(*(packed or pack_object(prog))))


def plan(graph, params: Sequence, *, original=None):
    """(bindings, moves, args) for `graph`'s kernel parameters `params` under the calling
    convention args[0] = callbacks, then graph.inputs, then graph.outputs in order (fake outputs
    too: their slots are left unwritten). `args` describes each argument for the .json (names
    from `original`, the graph before canonical renaming)."""
    from .dtypes import to_numpy
    from .targets.cpu.standalone import Binding, Copy, Move
    src = original or graph
    n_in = len(graph.inputs)
    in_arg = {t: 1 + i for i, t in enumerate(graph.inputs)}
    out_slots: dict[str, list[int]] = {}
    for j, t in enumerate(graph.outputs):
        out_slots.setdefault(t, []).append(1 + n_in + j)
    fake = graph.fake_outputs
    nbytes = {n: graph.tensors[n].size * to_numpy(graph.tensors[n].dtype).itemsize for n in graph.tensors}
    bindings, moves, bound = [], [], set()
    read = _read_inputs(params)
    for p in params:
        members = p.members or (p.tensor,)
        if p.kind == "output":
            bound.update(members)
            outs = [out_slots[m][0] for m in members]
            moves += [Move(out_slots[m][0], dst, nbytes[m]) for m in members for dst in out_slots[m][1:]]
            if p.members:
                size = nbytes[members[0]]
                bindings.append(Binding(p.dtype, p.shape, p.align, copy_out=tuple(
                    Copy(a, k * size, size) for k, a in enumerate(outs))))
            else:
                bindings.append(Binding(p.dtype, p.shape, p.align, direct=outs[0], writes=True))
        elif p.members:  # a stacked input: the members copied into one temporary
            size = nbytes[members[0]]
            bindings.append(Binding(p.dtype, p.shape, p.align, copy_in=tuple(
                Copy(in_arg[m], k * size, size) for k, m in enumerate(members))))
        elif p.kind == "inplace" and p.tensor in read:
            # the kernel reads the target's old values through another parameter: written apart
            bindings.append(Binding(p.dtype, p.shape, p.align, copy_out=(Copy(in_arg[p.tensor], 0, nbytes[p.tensor]),)))
        else:
            bindings.append(Binding(p.dtype, p.shape, p.align, direct=in_arg[p.tensor], reads=True,
                                    writes=p.kind == "inplace"))
    for t, slots in out_slots.items():
        if t in bound or t in fake:
            continue
        if t in in_arg:  # an output that is an input, passed through
            moves += [Move(in_arg[t], dst, nbytes[t]) for dst in slots]
        else:
            raise AkgpyError(f"output {t!r} is not computed by the kernel", tensor=t)
    args = [{"index": 0, "role": "callbacks"}]
    for i, t in enumerate(graph.inputs):
        args.append(_arg(1 + i, "input", src.inputs[i], graph.tensors[t]))
    for j, t in enumerate(graph.outputs):
        args.append(_arg(1 + n_in + j, "fake_output" if t in fake else "output", src.outputs[j], graph.tensors[t]))
    return bindings, moves, args


def call(meta_json: str | os.PathLike, inputs: Sequence, outputs: Sequence) -> int:
    """Call a kernel `build_kernel_meta` wrote, in this process, on numpy arrays (inputs, then
    every output slot, as its .json lists them): loaded with ctypes, its parallel loops run in
    place (no launcher given), memory from libc. Returns the kernel's return code."""
    import ctypes

    import _ctypes
    meta = json.loads(Path(meta_json).read_text())
    libc = ctypes.CDLL(None)
    callbacks = (ctypes.c_void_p * 4)(None, ctypes.cast(libc.malloc, ctypes.c_void_p).value,
                                      ctypes.cast(libc.free, ctypes.c_void_p).value, None)
    arrays = [*inputs, *outputs]
    if len(arrays) + 1 != len(meta["args"]):
        raise AkgpyError(f"{meta['kernelName']} takes {len(meta['args']) - 1} arrays, got {len(arrays)}")
    lib = ctypes.CDLL(str(Path(meta_json).with_suffix(".so")), mode=ctypes.RTLD_LOCAL)
    try:
        fn = getattr(lib, meta["kernelName"])
        fn.restype, fn.argtypes = ctypes.c_int, [ctypes.POINTER(ctypes.c_void_p)]
        ptrs = [ctypes.addressof(callbacks)] + [a.ctypes.data for a in arrays]
        return fn((ctypes.c_void_p * len(ptrs))(*ptrs))
    finally:
        _ctypes.dlclose(lib._handle)


def verify(graph, km: KernelMeta, seed: int = 0) -> list:
    """Run the kernel once on random inputs (akgpy.testing.random_inputs) and compare it with the
    numpy reference: the mismatches (akgpy.testing.Mismatch), empty when it matches."""
    import numpy as np

    from . import reference
    from .dtypes import to_numpy
    from .testing import Mismatch, compare, poison, random_inputs
    inputs = random_inputs(graph, seed)
    ref_inputs, got_inputs = [a.copy() for a in inputs], [a.copy() for a in inputs]
    outputs = [np.empty(graph.tensors[t].shape, to_numpy(graph.tensors[t].dtype)) for t in graph.outputs]
    poison(outputs)
    rc = call(km.json, got_inputs, outputs)
    if rc != 0:
        return [Mismatch(km.name, 0.0, float("inf"), 0, 0, f"the kernel returned {rc}")]
    fake = graph.fake_outputs
    real = [o for o, t in zip(outputs, graph.outputs) if t not in fake]
    return compare(graph, real, got_inputs, reference.run(graph, ref_inputs), ref_inputs)


def _read_inputs(params) -> set[str]:
    return {n for p in params if p.kind == "input" for n in (p.members or (p.tensor,))}


def _arg(index: int, role: str, name: str, t) -> dict:
    return {"index": index, "role": role, "name": name, "shape": list(t.shape), "dtype": t.dtype}


def parse_attrs(attrs: Any) -> dict:
    """Build attrs (None, a dict or JSON text) as a dict; FormatError when they are not a JSON object."""
    if attrs is None:
        return {}
    if isinstance(attrs, (str, bytes)):
        try:
            attrs = json.loads(attrs) if attrs.strip() else {}
        except json.JSONDecodeError as e:
            raise FormatError(f"build attrs are not JSON: {e.msg} at column {e.colno}") from None
    if not isinstance(attrs, dict):
        raise FormatError(f"build attrs must be a JSON object, got {type(attrs).__name__}")
    return attrs


def _target(graph, target):
    from .target import resolve_target
    if target is not None:
        return resolve_target(target)
    return target_from_info(graph.meta.get("target_info"))


def target_from_info(info: Any):
    """The Target a framework's `target_info` ({"arch", "cpu", "feature", "system"}) means: this
    machine when it names this machine's architecture and system (the framework compiles for the
    process it runs in; its `cpu` is a coarse class, "core-avx2" on an AVX-512 host), else that
    CPU by its LLVM name."""
    from .target import resolve_target
    if not info:
        return resolve_target(None)
    if not isinstance(info, dict):
        raise FormatError(f"target_info must be an object, got {info!r:.60}")
    arch = str(info.get("arch") or platform.machine())
    system = str(info.get("system") or platform.system()).lower()
    if arch == platform.machine() and system == platform.system().lower():
        return resolve_target(None)
    spec = {"kind": "llvm", "mtriple": f"{arch}-unknown-{system}-gnu"}
    if info.get("cpu"):
        spec["mcpu"] = str(info["cpu"])
    return resolve_target(spec)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m akgpy.kernel_meta",
                                 description="Build self-contained kernels (<op>.so + <op>.json) from composite JSON.")
    ap.add_argument("files", nargs="+", help="composite JSON files (.info/.json)")
    ap.add_argument("-o", "--out", default="akg_kernel_meta", help="output directory (default: %(default)s)")
    ap.add_argument("--target", default=None, help="LLVM CPU name (default: the file's target_info, else this machine)")
    ns = ap.parse_args(argv)
    target = {"kind": "llvm", "mcpu": ns.target} if ns.target else None
    failed = 0
    for f in ns.files:
        try:
            km = build_kernel_meta(Path(f), ns.out, target=target)
            print(f"{f}: {km.library} ({km.symbol})")
        except AkgpyError as e:
            failed += 1
            print(f"{f}: error: {e}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
