"""Self-contained CPU kernels: the kernel's object code linked with a small C runtime into a
shared object that needs no libtvm, called as `int <symbol>(void **args)` (MindSpore's AKG
convention: args[0] the caller's callbacks, then the inputs, then the outputs; docs/kernel_meta.md).

The object code is what `Backend.build` made of the scheduled TIR, written out by TVM (format
`OBJECT_FORMAT`); it has no name of the request in it, so the compile cache keeps it once. What is
per request is generated here: the table that maps the caller's arguments onto the kernel's
parameters, the exported symbol, and the runtime (`standalone_rt.c`) that implements TVM's backend
calls (parallel launch and barrier, workspace, errors) on the caller's callbacks.
"""
from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Sequence

from ...errors import CompileError

OBJECT_FORMAT = "llvm-obj/1"  # a relocatable ELF object with the packed entry __tvm_ffi_<entry>
RUNTIME_SOURCE = Path(__file__).with_name("standalone_rt.c")
# TVM's context slots (tvm/src/runtime/module.cc) standalone_rt.c fills; a kernel that uses
# another (calls into TVM's registry or other modules) cannot run without libtvm
PROVIDED = frozenset({"__TVMBackendParallelLaunch", "__TVMBackendParallelBarrier", "__TVMBackendAllocWorkspace",
                      "__TVMBackendFreeWorkspace", "__TVMFFIErrorSetRaisedFromCStr"})
_DL_CODE = {"int": 0, "uint": 1, "float": 2, "bfloat": 4, "bool": 6}
_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class StandaloneError(CompileError):
    """A kernel that cannot be made a self-contained shared object (a missing tool, a call into
    TVM's runtime the standalone runtime does not provide, a failed link)."""


@dataclasses.dataclass(frozen=True)
class Copy:
    arg: int  # index into the caller's args (0 is the callbacks)
    offset: int  # bytes into the kernel's temporary parameter
    nbytes: int


@dataclasses.dataclass(frozen=True)
class Binding:
    """How the caller's arguments reach one kernel parameter: passed as they are (`direct`, when
    aligned as `align` says; else through a temporary, copied in if `reads`, out if `writes`), or
    a temporary filled from `copy_in` before the call and copied to `copy_out` after."""
    dtype: str
    shape: tuple[int, ...]
    align: int
    direct: int = -1
    reads: bool = False
    writes: bool = False
    copy_in: tuple[Copy, ...] = ()
    copy_out: tuple[Copy, ...] = ()

    @property
    def nbytes(self) -> int:
        n = _bits(self.dtype) // 8
        for s in self.shape:
            n *= s
        return n


@dataclasses.dataclass(frozen=True)
class Move:
    """After the call: the caller's argument `dst` receives a copy of argument `src` (an output
    slot repeating another slot, or an output that is an input)."""
    src: int
    dst: int
    nbytes: int


def object_code(executable) -> bytes:
    """The relocatable object TVM's export writes for `executable` (one LLVM module)."""
    objects: list[bytes] = []

    def keep(output, files, options=None, **kwargs):
        objects.extend(Path(f).read_bytes() for f in files)
        Path(output).write_bytes(b"")
    keep.output_format = "so"
    with tempfile.TemporaryDirectory(prefix="akgpy-obj-") as d:
        executable.export_library(os.path.join(d, "kernel.so"), fcompile=keep)
    if len(objects) != 1:
        raise StandaloneError(f"expected the kernel's code as one object file, TVM wrote {len(objects)}")
    return objects[0]


def link(code: bytes, entry: str, symbol: str, bindings: Sequence[Binding], moves: Sequence[Move],
         out_path: str | os.PathLike, *, label: str = "") -> None:
    """Write the shared object `out_path`: the object `code` (packed entry `__tvm_ffi_<entry>`),
    the runtime and the per-request table, exporting `symbol` and nothing else. StandaloneError
    when the object needs what the runtime does not provide or the result still needs libtvm."""
    if not _SYMBOL.match(symbol):
        raise StandaloneError(f"kernel symbol {symbol!r} is not a C identifier")
    if not _SYMBOL.match(entry):
        raise StandaloneError(f"packed entry {entry!r} is not a C identifier")
    cc = _tool(os.environ.get("CC", "cc"))
    out_path = Path(out_path)
    with tempfile.TemporaryDirectory(prefix="akgpy-link-") as d:
        obj = Path(d) / "kernel.o"
        obj.write_bytes(code)
        _check_context(obj)
        src = Path(d) / "entry.c"
        src.write_text(RUNTIME_SOURCE.read_text() + "\n" + _table(entry, symbol, bindings, moves, label or symbol))
        script = Path(d) / "exports.map"
        script.write_text(f"{{ global: {symbol}; local: *; }};\n")
        tmp_out = Path(d) / "kernel.so"
        cmd = [cc, "-O2", "-fPIC", "-shared", "-std=gnu11", "-fvisibility=hidden", "-o", str(tmp_out), str(src),
               str(obj), f"-Wl,--version-script={script}", "-Wl,-z,defs", "-Wl,--as-needed", "-lm"]
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            raise StandaloneError(f"linking {label or symbol} failed: {(run.stderr or run.stdout).strip()[-2000:]}")
        _check_self_contained(tmp_out)
        # written under a temporary name, then renamed: a reader never sees half a library
        staged = out_path.with_name(out_path.name + f".{os.getpid()}.tmp")
        shutil.copyfile(tmp_out, staged)
        os.replace(staged, out_path)


def needed_libraries(path: str | os.PathLike) -> list[str]:
    """The DT_NEEDED entries of a shared object (what the dynamic loader loads with it)."""
    out = _run([_tool("readelf"), "-d", str(path)])
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def undefined_symbols(path: str | os.PathLike) -> list[str]:
    out = _run([_tool("nm"), "-D", "--undefined-only", "-P", str(path)])
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _check_context(obj: Path) -> None:
    out = _run([_tool("nm"), "-P", str(obj)])
    wanted = sorted({line.split()[0] for line in out.splitlines()
                     if line.startswith(("__TVM", "TVM")) and line.split()[0] not in PROVIDED})
    if wanted:
        raise StandaloneError(f"the kernel calls TVM's runtime through {', '.join(wanted)}, which a self-contained "
                              "kernel does not provide")


def _check_self_contained(path: Path) -> None:
    libs = [n for n in needed_libraries(path) if "tvm" in n.lower()]
    syms = [s for s in undefined_symbols(path) if "tvm" in s.lower()]
    if libs or syms:
        raise StandaloneError(f"{path.name} still needs TVM's runtime: {', '.join(libs + syms)}")


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise StandaloneError(f"{name!r} is not on PATH: a self-contained kernel is linked with the system's C "
                              "toolchain (gcc or clang, and binutils)")
    return found


def _run(cmd: list[str]) -> str:
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        raise StandaloneError(f"{' '.join(cmd)} failed: {run.stderr.strip()[-500:]}")
    return run.stdout


def _bits(dtype: str) -> int:
    if dtype == "bool":
        return 8
    m = re.fullmatch(r"[a-z]+?(\d+)", dtype)
    if m is None:
        raise StandaloneError(f"no storage width for dtype {dtype!r}")
    return int(m.group(1))


def _dl_type(dtype: str) -> str:
    kind = "bool" if dtype == "bool" else re.sub(r"\d+$", "", dtype)
    if kind not in _DL_CODE:
        raise StandaloneError(f"no DLPack type for dtype {dtype!r}")
    return f"{{{_DL_CODE[kind]}, {_bits(dtype)}, 1}}"


def _c_string(text: str) -> str:
    return '"' + "".join(c if c.isalnum() or c in " _-.:/#" else f"\\{ord(c):03o}" for c in text) + '"'


def _table(entry: str, symbol: str, bindings: Sequence[Binding], moves: Sequence[Move], label: str) -> str:
    """The per-request C: shapes, copies, the parameter table and the exported entry."""
    lines = ["/* per request: generated by akgpy/targets/cpu/standalone.py */"]
    rows = []
    for i, b in enumerate(bindings):
        if b.align & (b.align - 1) or b.align <= 0:
            raise StandaloneError(f"parameter {i}: alignment {b.align} is not a power of two")
        dims = ", ".join(str(s) for s in b.shape) or "1"
        lines.append(f"static const int64_t akgpy_shape_{i}[] = {{{dims}}};")
        refs = []
        for tag, copies in (("in", b.copy_in), ("out", b.copy_out)):
            if copies:
                body = ", ".join(f"{{{c.arg}, {c.offset}, {c.nbytes}}}" for c in copies)
                lines.append(f"static const akgpy_copy akgpy_{tag}_{i}[] = {{{body}}};")
                refs.append(f"akgpy_{tag}_{i}")
            else:
                refs.append("NULL")
        rows.append(f"  {{{_dl_type(b.dtype)}, {len(b.shape)}, akgpy_shape_{i}, {b.nbytes}, {b.align}, {b.direct}, "
                    f"{int(b.reads)}, {int(b.writes)}, {len(b.copy_in)}, {len(b.copy_out)}, {refs[0]}, {refs[1]}}},")
    lines += ["static const akgpy_param akgpy_params[] = {", *rows, "};"]
    if moves:
        body = ", ".join(f"{{{m.src}, {m.dst}, {m.nbytes}}}" for m in moves)
        lines.append(f"static const akgpy_move akgpy_moves[] = {{{body}}};")
    n = len(bindings)
    lines += [
        f"int __tvm_ffi_{entry}(void *, const akgpy_any *, int32_t, akgpy_any *);",
        f"static const akgpy_kernel akgpy_this = {{{_c_string(label)}, __tvm_ffi_{entry}, {n}, akgpy_params, "
        f"{len(moves)}, {'akgpy_moves' if moves else 'NULL'}}};",
        f"__attribute__((visibility(\"default\"))) int {symbol}(void **args) {{",
        f"  akgpy_dltensor t[{n}];",
        f"  akgpy_any a[{n}];",
        f"  void *tmp[{n}];",
        "  return akgpy_run(args, &akgpy_this, t, a, tmp);",
        "}",
    ]
    return "\n".join(lines) + "\n"
