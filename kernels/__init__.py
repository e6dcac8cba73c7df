"""A library of common fused patterns written with `akgpy.GraphBuilder`, at realistic sizes.

    from kernels import PATTERNS
    g = PATTERNS["layernorm"]()            # BERT-base sizes
    g = PATTERNS["layernorm"](**PATTERNS["layernorm"].small)
    prog = akgpy.fuse(g)

Every entry is `build(**sizes) -> akgpy.Graph`, with two attributes: `small` (keyword sizes
for a fast smoke run) and `numpy_impl(*inputs)` (the same computation in plain numpy
float32, used by `python -m kernels` as the speed baseline).
"""
from __future__ import annotations

from . import norm, activation, layout, optim  # noqa: F401,I001  (registers the patterns, in table order)
from ._registry import PATTERNS, pattern

__all__ = ["PATTERNS", "pattern"]
