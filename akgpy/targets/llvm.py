"""The LLVM CPU target: the host's real CPU, never the generic x86-64 that `mcpu: native` gives."""
from __future__ import annotations

import functools

import tvm

from ..errors import CompileError


@functools.lru_cache(maxsize=None)
def host_cpu() -> str:
    return str(tvm.target.codegen.llvm_get_system_cpu())


@functools.lru_cache(maxsize=None)
def host_target() -> "tvm.target.Target":
    return tvm.target.Target({"kind": "llvm", "mcpu": host_cpu()})


def resolve(target) -> "tvm.target.Target":
    if isinstance(target, tvm.target.Target):
        return target
    if target in (None, "llvm", "cpu", "host"):
        return host_target()
    if isinstance(target, dict):
        return tvm.target.Target(target)
    raise CompileError(f"unsupported target {target!r}: akgpy compiles for 'llvm' (the host CPU) so far")


def build(mod, target):
    try:
        return tvm.compile(mod, target=resolve(target))
    except RuntimeError as e:
        raise CompileError(f"LLVM code generation failed: {str(e).strip().splitlines()[-1]}") from None
