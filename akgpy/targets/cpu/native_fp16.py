"""float16 arithmetic in float16 registers, on CPUs that have it (x86 AVX512-FP16).

The TE lowering computes a float16 op as float32 arithmetic on widened operands, rounded back:
`Cast(f16, fence(Cast(f32, a) * Cast(f32, b)))` (numpy's semantics, and the only form every
CPU runs). Where both operands are float16 values (or float32 constants that float16 holds
exactly) and the op is + - * /, this pass writes the op in float16 instead. The results are
bit-identical: the exact result rounded once to float32 and then to float16 equals the exact
result rounded once to float16 whenever float32's precision p' = 24 is at least 2p + 2 for
float16's p = 11 (Figueroa, "When is double rounding innocuous?", 1995), so the rounding to
float32 can be dropped. The fence stays, on the float16 op, so that LLVM does not contract a
product and a following sum into one FMA (one rounding where the graph has two).

On AVX512-FP16, LLVM then emits vmulph/vaddph on 32 lanes per register with no conversion
pair between ops. Interleaved A/B on a Xeon with 2 threads, kernel alone, inputs in cache:
bert gelu `~0750` 5.97 -> 3.71 ms, `~8645` 3.29 -> 1.64, layernorm `~3896` 1.55 -> 1.20,
`~8077` 1.35 -> 1.09, dropout-grad `~9026` 5.69 -> 4.86; all outputs bit-identical. Without
the feature LLVM would promote each float16 op to float32 itself, so the pass runs only where
the target has it (`llvm.build`).
"""
from __future__ import annotations

import numpy as np
from tvm import tirx

from ..half_round_trips import holds_in_half
from ..rewrite import FENCE, fence_id, rewrite_each, unfenced

_OPS = (tirx.Add, tirx.Sub, tirx.Mul, tirx.Div)


def _half(x):
    """x as a float16 value when it is a widened float16 or a finite constant float16 holds."""
    if isinstance(x, tirx.Cast) and str(x.ty) == "float32" and str(x.value.ty) == "float16":
        return x.value
    if isinstance(x, tirx.FloatImm) and str(x.ty) == "float32":
        v = float(x.value)
        if np.isfinite(v) and holds_in_half(v):
            return tirx.FloatImm("float16", v)
    return None


def native_fp16(func):
    """`func` with each float16-rounded float32 + - * / of float16 operands done in float16;
    unchanged when there is none. Runs on scheduled TIR, before vectorisation."""
    fid = fence_id()

    def to_half(c):  # operands first (inner_first): a chain turns float16 from its leaves up
        if not isinstance(c, tirx.Cast) or str(c.ty) != "float16":
            return None
        op = unfenced(c.value, fid)
        if not isinstance(op, _OPS) or str(op.ty) != "float32":
            return None
        a, b = _half(op.a), _half(op.b)
        if a is None or b is None:
            return None
        return tirx.call_llvm_pure_intrin("float16", FENCE, type(op)(a, b))

    return rewrite_each(func, tirx.Cast, to_half, inner_first=True)
