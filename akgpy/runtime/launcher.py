"""The OpenMP parallel launcher: TVM's parallel loops on the process's OpenMP threads.

A kernel .so calls its thread pool through `__TVMBackendParallelLaunch` and
`__TVMBackendParallelBarrier` (runtime/native.py fills them). With launcher "tvm" those are TVM's
own pool (TVM_NUM_THREADS threads that spin after each launch); with "openmp" they are this
module's `openmp_launcher.c`, which runs the tasks as one `#pragma omp parallel` team. Under torch
the team is torch's intra-op pool: the library links libgomp.so.1, which the loader binds to the
libgomp torch already loaded (or, torch installed but not yet imported, to torch's bundled copy,
loaded first here so that torch later binds to the same one). Two pools spinning on the same cores
made a 0.5 ms kernel cost 4.5 ms right after a torch op (docs/torch.md).

The library is compiled once per machine (`cc -fopenmp`) into `$AKGPY_CACHE/launcher/`, named by
the hash of its sources and compiler; with the cache off, or a cache directory others can write,
into a private temporary directory for this process.
"""
from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import os
import stat
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from .. import config
from ..errors import AkgpyError
from ..targets.cpu.standalone import RUNTIME_SOURCE

SOURCE = Path(__file__).with_name("openmp_launcher.c")
LAUNCHERS = ("tvm", "openmp")  # the choices of NativeLibrary(launcher=) and Program.with_launcher


class LauncherError(AkgpyError):
    """The OpenMP launcher could not be built or loaded, or a launch on it failed."""


@dataclass(frozen=True)
class LaunchStats:
    launches: int  # parallel launches so far in this process
    team: int  # OpenMP threads the last one ran on
    distinct_threads: int  # distinct OS threads among them


_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_failed: str | None = None


def check(launcher: str) -> str:
    if launcher not in LAUNCHERS:
        raise LauncherError(f"unknown parallel launcher {launcher!r}; available: {', '.join(map(repr, LAUNCHERS))}")
    return launcher


def library() -> ctypes.CDLL:
    """The launcher library, built on first use (LauncherError when it cannot be; the reason is
    kept, so a process does not try again on every kernel)."""
    global _lib, _failed
    with _lock:
        if _lib is None:
            if _failed is not None:
                raise LauncherError(_failed)
            try:
                _preload_torch_gomp()
                path = _build()
                lib = ctypes.CDLL(str(path), mode=ctypes.RTLD_LOCAL)
            except LauncherError as e:
                _failed = str(e)
                raise
            except OSError as e:
                _failed = f"cannot load the OpenMP launcher: {e}"
                raise LauncherError(_failed) from None
            lib.akgpy_omp_error.restype = ctypes.c_char_p
            lib.akgpy_omp_stats.restype = ctypes.c_long
            lib.akgpy_omp_stats.argtypes = [ctypes.POINTER(ctypes.c_int)] * 2
            _lib = lib
        return _lib


def entries() -> tuple[int, int]:
    """Addresses of the launch and barrier functions, for a kernel's context slots."""
    lib = library()
    return (ctypes.cast(lib.akgpy_omp_parallel_launch, ctypes.c_void_p).value,
            ctypes.cast(lib.akgpy_omp_parallel_barrier, ctypes.c_void_p).value)


def launch(body: int, cdata: int | None = None, num_task: int = 0) -> None:
    """One parallel launch of a TVM lambda (the address of `int body(int task, TVMParallelGroupEnv *,
    void *cdata)`) as a kernel makes it; LauncherError with the reason when a task fails or the
    task count cannot be honoured."""
    fn = library().akgpy_omp_parallel_launch
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    if fn(body, cdata, num_task) != 0:
        raise LauncherError(last_error() or f"parallel launch of {num_task} tasks failed")


def last_error() -> str:
    """Why this thread's last launch failed ('' when it did not or the library is not loaded)."""
    return _lib.akgpy_omp_error().decode() if _lib is not None else ""


def stats() -> LaunchStats:
    team, distinct = ctypes.c_int(), ctypes.c_int()
    n = library().akgpy_omp_stats(ctypes.byref(team), ctypes.byref(distinct))
    return LaunchStats(n, team.value, distinct.value)


def max_threads() -> int:
    """omp_get_max_threads() of the calling thread: the team a launch runs on."""
    return library().akgpy_omp_max_threads()


def _build() -> Path:
    cc = os.environ.get("CC", "cc")
    sources = SOURCE.read_bytes() + RUNTIME_SOURCE.read_bytes()
    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout
    except OSError as e:
        raise LauncherError(f"cannot build the OpenMP launcher: the C compiler {cc!r} does not run ({e}); "
                            "install gcc or clang, or use launcher='tvm'") from None
    digest = hashlib.sha256(sources + cc.encode() + version.encode()).hexdigest()[:20]
    out = _directory() / f"openmp_launcher-{digest}.so"
    if out.is_file():
        return out
    staged = out.with_name(out.name + f".{os.getpid()}.tmp")
    cmd = [cc, "-O2", "-fPIC", "-shared", "-std=gnu11", "-fopenmp", "-fvisibility=hidden",
           f"-I{RUNTIME_SOURCE.parent}", "-o", str(staged), str(SOURCE)]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        staged.unlink(missing_ok=True)
        raise LauncherError(f"cannot build the OpenMP launcher ({' '.join(cmd)}): "
                            f"{(run.stderr or run.stdout).strip()[-1500:]}; use launcher='tvm'")
    os.replace(staged, out)  # a reader never sees half a library
    return out


_private: Path | None = None


def _directory() -> Path:
    """$AKGPY_CACHE/launcher when it is ours and only ours to write; else a private temporary one."""
    global _private
    where = config.CACHE.get()
    if where.strip().lower() not in ("off", "0", "none", ""):
        d = Path(os.path.expanduser(where)) / "launcher"
        try:
            d.mkdir(parents=True, exist_ok=True, mode=0o700)
            st = d.stat()
            if st.st_uid == os.getuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                return d
        except OSError:
            pass
    if _private is None:
        _private = Path(tempfile.mkdtemp(prefix="akgpy-launcher-"))
    return _private


def _preload_torch_gomp() -> None:
    """When no libgomp is loaded yet and torch is installed, its bundled libgomp first (global), so
    this launcher and a torch imported later share one OpenMP runtime."""
    if _loaded_gomp():
        return
    spec = importlib.util.find_spec("torch")  # finds the package without importing it
    for root in (spec.submodule_search_locations or []) if spec else []:
        p = Path(root) / "lib" / "libgomp.so.1"
        if p.is_file():
            try:
                ctypes.CDLL(str(p), mode=ctypes.RTLD_GLOBAL)
            except OSError:
                pass
            return


def _loaded_gomp() -> list[str]:
    """Paths of the libgomp copies mapped in this process."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return []
    return sorted({line.split()[-1] for line in maps.splitlines() if "libgomp" in line.rsplit("/", 1)[-1]})
