"""Dtype names as the graph IR spells them, and their numpy counterparts."""
from __future__ import annotations

import numpy as np

from .errors import ShapeError

# The composite format's names; the IR keeps exactly these strings.
NUMPY = {
    "float16": np.float16, "float32": np.float32, "float64": np.float64,
    "bool": np.bool_, "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
    "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
    "complex64": np.complex64, "complex128": np.complex128,
}
COMPLEX = frozenset({"complex64", "complex128"})
INTS = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"})

# TVM has no complex dtype: a complex tensor is carried as a trailing pair of its part dtype.
COMPLEX_PART = {"complex64": "float32", "complex128": "float64"}


def vector_parts(ty) -> tuple[str, int]:
    """(element dtype, lanes) of a TVM type or dtype string: "float32x8" -> ("float32", 8)."""
    s = str(getattr(ty, "dtype", ty))
    elem, _, n = s.partition("x")
    return elem, int(n) if n else 1


def check(dtype: str, *, op: str | None = None, tensor: str | None = None) -> str:
    if dtype not in NUMPY:
        raise ShapeError(f"unknown data_type {dtype!r}; known: {sorted(NUMPY)}", op=op, tensor=tensor)
    return dtype


def to_numpy(dtype: str) -> np.dtype:
    return np.dtype(NUMPY[dtype])


def from_numpy(dt, *, tensor: str | None = None) -> str:
    """The IR's name for a numpy dtype."""
    dt = np.dtype(dt)
    for name, np_type in NUMPY.items():
        if np.dtype(np_type) == dt:
            return name
    raise ShapeError(f"dtype {dt} is not an akgpy dtype", tensor=tensor)


def widens_exactly(narrow: str, wide: str) -> bool:
    """Every `narrow` value is a `wide` value (float16 -> float32, int8 -> int32), so converting
    to `wide` and back to `narrow` is the identity. False for names outside the IR's."""
    if narrow == wide or narrow not in NUMPY or wide not in NUMPY:
        return False
    return bool(np.can_cast(NUMPY[narrow], NUMPY[wide], casting="safe"))
