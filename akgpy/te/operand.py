"""A graph tensor as the TE builders see it (`Operand`), and the storage and compute dtypes
they share with the Lowerer that drives them."""
from __future__ import annotations

import numpy as np
from tvm import tirx

from ..dtypes import COMPLEX_PART
from ..graph.ir import Tensor
from ..ops.registry import uses_logical_broadcast
from .index import operand_index


def storage(t: Tensor) -> tuple[tuple[int, ...], str]:
    """(shape, dtype) of `t`'s array: a complex tensor is float pairs with a trailing dim of 2."""
    if t.dtype in COMPLEX_PART:
        return (*t.shape, 2), COMPLEX_PART[t.dtype]
    return t.shape, t.dtype


def compute_dtype(dtype: str) -> str:
    return "float32" if dtype == "float16" else dtype


class Operand:
    """A graph tensor as TE sees it: a te.Tensor, or a compile-time scalar."""

    def __init__(self, desc: Tensor, tensor=None):
        self.desc, self.tensor = desc, tensor

    @property
    def is_complex(self) -> bool:
        return self.desc.dtype.startswith("complex")

    def load(self, dst: Tensor, idx, logical: bool = False, part: int | None = None):
        if self.tensor is None:
            _, dt = storage(self.desc)
            v = self.desc.value
            if self.is_complex:
                v = v.real if part == 0 else (v.imag if isinstance(v, complex) else 0)
            if dt in ("float16", "float32"):  # the dtype's value: TVM widens a FloatImm's double as is
                v = float(np.asarray(v, dtype=dt))
            return tirx.const(v, dt)
        src_idx = operand_index(self.desc, dst, idx, logical=logical)
        if self.is_complex:
            src_idx = [*src_idx, part]
        return self.tensor(*src_idx)

    def value(self, dst: Tensor, idx, logical: bool = False):
        """The element as a compute-dtype expression (float16 widened to float32)."""
        x = self.load(dst, idx, logical)
        want = compute_dtype(self.desc.dtype)
        return x.astype(want) if want != str(x.ty) else x


def logical(ins: list[Operand], out: Tensor) -> bool:
    """Whether the op reads its operands through the logical broadcast of mixed FRACTAL_NZ and
    plain tensors."""
    return uses_logical_broadcast([o.desc for o in ins], out)
