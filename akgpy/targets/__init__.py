"""Code generation, one backend per target kind (targets/backend.py); CPU: targets/cpu/."""
from __future__ import annotations

from ..errors import CompileError
from ..target import Target
from .backend import Backend


def backend_for(target: Target) -> Backend:
    """The Backend that builds for `target` (a resolved akgpy.Target)."""
    if not isinstance(target, Target):
        raise CompileError(f"backend_for expects a resolved akgpy.Target (resolve_target), got {target!r:.80}")
    if target.kind == "llvm":
        from .cpu.backend import CPU
        return CPU
    raise CompileError(f"no backend for target kind {target.kind!r} yet")


def default_config(target=None):
    """The default ScheduleConfig for what akgpy.resolve_target accepts (None: this machine):
    what compile_graph uses when given no config."""
    from ..target import resolve_target
    tgt = resolve_target(target)
    return backend_for(tgt).default_config(tgt)


__all__ = ["Backend", "backend_for", "default_config"]
