"""Load and call a kernel shared object that TVM exported, without importing tvm.

`import tvm` costs about a second; a warm `akgpy.fuse` (docs/cache.md) has 20 ms. An exported
kernel .so needs only TVM's C runtime: its packed entry `__tvm_ffi_<name>` calls the thread
pool and workspace allocator through function-pointer variables (`__TVMBackendParallelLaunch`,
...) that TVM's module loader fills from its registry of context symbols
(tvm/src/runtime/module.cc). Here libtvm_ffi.so and libtvm_runtime.so are loaded with ctypes
from the installed packages and those variables are filled with the same functions, so the
kernel runs on TVM's own pool (sized by TVM_NUM_THREADS) exactly as under tvm.runtime; or, with
`launcher="openmp"`, the parallel launch and barrier are runtime/launcher.py's, on the process's
OpenMP threads (torch's intra-op pool when torch is loaded).

Calling convention (tvm_ffi/include/tvm/ffi/c_api.h): `int f(void *self, const TVMFFIAny *args,
int32_t num_args, TVMFFIAny *result)`, each argument a DLTensor* (type index
kTVMFFIDLTensorPtr). akgpy compiles without argument asserts (targets/cpu/llvm.py): the caller
(runtime/program.py) checks dtypes, shapes and alignment before calling.
"""
from __future__ import annotations

import ctypes
import importlib.util
import os
import threading
from pathlib import Path
from typing import Sequence

import numpy as np

from ..errors import AkgpyError

# the context symbols TVM's loader fills in a library module, each from the runtime function of
# the same name without the leading "__" (tvm/src/runtime/module.cc TVM_INIT_CONTEXT_FUNC)
CONTEXT_SYMBOLS = ("TVMFFIFunctionCall", "TVMFFIErrorSetRaisedFromCStr", "TVMFFIEnvModLookupFromImports",
                   "TVMFFIHandleInitOnce", "TVMBackendAllocWorkspace", "TVMBackendFreeWorkspace",
                   "TVMBackendParallelLaunch", "TVMBackendParallelBarrier")

K_TVMFFI_DLTENSOR_PTR = 7  # TVMFFITypeIndex.kTVMFFIDLTensorPtr
K_DLCPU = 1
# numpy kind -> DLDataTypeCode (dlpack.h): int, uint, float, bool
_DL_CODE = {"i": 0, "u": 1, "f": 2, "b": 6}


class NativeLoadError(AkgpyError):
    """The TVM runtime libraries or a kernel's symbols could not be loaded with ctypes."""


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class TVMFFIAny(ctypes.Structure):
    _fields_ = [("type_index", ctypes.c_int32), ("zero_padding", ctypes.c_uint32), ("v_ptr", ctypes.c_void_p)]


_SAFE_CALL = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(TVMFFIAny), ctypes.c_int32,
                              ctypes.POINTER(TVMFFIAny))

_runtime_lock = threading.Lock()
_runtime: ctypes.CDLL | None = None


def _package_lib(package: str, lib: str) -> Path:
    spec = importlib.util.find_spec(package)  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise NativeLoadError(f"package {package!r} is not installed (needed for {lib})")
    for root in spec.submodule_search_locations:
        for sub in ("lib", "lib64", ""):
            p = Path(root) / sub / lib
            if p.is_file():
                return p
    raise NativeLoadError(f"{lib} not found in the installed {package!r} package")


def runtime() -> ctypes.CDLL:
    """libtvm_runtime.so (after libtvm_ffi.so), loaded once with RTLD_GLOBAL."""
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            ctypes.CDLL(str(_package_lib("tvm_ffi", "libtvm_ffi.so")), mode=ctypes.RTLD_GLOBAL)
            _runtime = ctypes.CDLL(str(_package_lib("tvm", "libtvm_runtime.so")), mode=ctypes.RTLD_GLOBAL)
        return _runtime


class NativeLibrary:
    """A kernel .so loaded with its context symbols filled; `function(name)` is a callable.
    `launcher`: whose threads run its parallel loops, "tvm" (TVM's pool) or "openmp" (see
    runtime/launcher.py). The slots are the library's: load one file once per launcher."""

    def __init__(self, path: str | os.PathLike, launcher: str = "tvm"):
        from . import launcher as omp
        self.launcher = omp.check(launcher)
        rt = runtime()
        ours = dict(zip(("TVMBackendParallelLaunch", "TVMBackendParallelBarrier"), omp.entries())) \
            if launcher == "openmp" else {}
        self.path = str(path)
        try:
            self._lib = ctypes.CDLL(self.path, mode=ctypes.RTLD_LOCAL)
        except OSError as e:
            raise NativeLoadError(f"cannot load kernel library {self.path}: {e}") from None
        for name in CONTEXT_SYMBOLS:
            try:
                slot = ctypes.c_void_p.in_dll(self._lib, "__" + name)
            except ValueError:
                continue  # this kernel does not use it
            slot.value = ours[name] if name in ours else ctypes.cast(getattr(rt, name), ctypes.c_void_p).value

    def function(self, entry: str, params: Sequence) -> "NativeFunction":
        try:
            fn = _SAFE_CALL(("__tvm_ffi_" + entry, self._lib))
        except AttributeError:
            raise NativeLoadError(f"kernel library {self.path} has no entry __tvm_ffi_{entry}") from None
        return NativeFunction(self, fn, params)


class NativeFunction:
    """A packed kernel entry called on numpy arrays, one per parameter (shapes and dtypes as
    `params` say: the caller has checked them). Argument records are built once per thread;
    a call only sets the data pointers."""

    def __init__(self, lib: NativeLibrary, fn, params: Sequence):
        self._lib, self._fn, self._params = lib, fn, list(params)  # _lib: keeps the .so loaded
        self._local = threading.local()

    def _records(self):
        n = len(self._params)
        tensors = (DLTensor * n)()
        anys = (TVMFFIAny * n)()
        keep = []
        for i, p in enumerate(self._params):
            dt = np.dtype(p.dtype)
            shape = (ctypes.c_int64 * max(1, len(p.shape)))(*p.shape)
            keep.append(shape)
            t = tensors[i]
            t.device = DLDevice(K_DLCPU, 0)
            t.ndim = len(p.shape)
            t.dtype = DLDataType(_DL_CODE[dt.kind], dt.itemsize * 8, 1)
            t.shape = ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64))
            t.strides = None
            t.byte_offset = 0
            anys[i].type_index = K_TVMFFI_DLTENSOR_PTR
            anys[i].v_ptr = ctypes.addressof(t)
        result = TVMFFIAny()
        slots = [ctypes.c_void_p.from_buffer(tensors, i * ctypes.sizeof(DLTensor)) for i in range(n)]
        return tensors, anys, result, keep, slots

    def __call__(self, *arrays: np.ndarray) -> None:
        rec = getattr(self._local, "rec", None)
        if rec is None:
            rec = self._local.rec = self._records()
        _, anys, result, _, slots = rec
        for slot, a in zip(slots, arrays):
            slot.value = a.__array_interface__["data"][0]
        result.type_index = 0
        rc = self._fn(None, anys, len(slots), ctypes.byref(result))
        if rc != 0:
            if self._lib.launcher == "openmp":
                from .launcher import LauncherError, last_error
                if last_error():
                    raise LauncherError(f"kernel {self._lib.path}: {last_error()}")
            raise AkgpyError(f"kernel {self._lib.path} returned error code {rc}")
