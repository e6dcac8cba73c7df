"""Every error akgpy raises on bad input derives from AkgpyError.

Errors carry the op and tensor they concern so a user can find the offending node
in a graph of hundreds without a debugger.
"""
from __future__ import annotations


class AkgpyError(Exception):
    """Base class: catch this to handle any akgpy failure."""

    def __init__(self, message: str, *, op: str | None = None, tensor: str | None = None):
        self.message, self.op, self.tensor = message, op, tensor
        where = []
        if op is not None:
            where.append(f"op {op}")
        if tensor is not None:
            where.append(f"tensor {tensor!r}")
        super().__init__(f"{message} [{', '.join(where)}]" if where else message)


class FormatError(AkgpyError):
    """The input file or string is not a well-formed composite graph."""


class UnsupportedOpError(AkgpyError):
    """An op name akgpy has no definition for, or one it cannot lower."""


class AttrError(AkgpyError):
    """A required attribute is missing or has the wrong type or value."""


class ShapeError(AkgpyError):
    """Shapes or dtypes disagree with an op's shape rule."""


class ArgumentError(AkgpyError):
    """Arrays passed to a compiled program do not match the graph's inputs."""


class CompileError(AkgpyError):
    """Lowering, scheduling or code generation failed for a well-formed graph."""


class CacheWarning(UserWarning):
    """The compile cache ignored something it found (a corrupt database, an artifact whose HMAC
    does not match, a bad shipped record, a directory others can write) and carried on without
    it; the kernel is compiled instead."""


class ArtifactError(AkgpyError):
    """A compiled-kernel artifact (runtime/artifact.py) is malformed or belongs to another graph."""
