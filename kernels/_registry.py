"""The pattern registry: `@pattern` records a build function with its small sizes and the
hand-written numpy float32 twin that the driver times against."""
from __future__ import annotations

from typing import Any, Callable

import akgpy

PATTERNS: dict[str, Callable[..., akgpy.Graph]] = {}


def pattern(name: str, *, small: dict[str, Any], numpy_impl: Callable[..., tuple]):
    """Register `build(**sizes) -> Graph` under `name`.

    `small`: keyword sizes for a fast smoke run (`python -m kernels --small`, the tests).
    `numpy_impl(*inputs)`: the same computation in plain numpy on the graph's inputs (in
    input order); it returns the real outputs and writes in-place targets into its
    arguments, like a compiled Program does.
    """
    def deco(build: Callable[..., akgpy.Graph]):
        if name in PATTERNS:
            raise ValueError(f"pattern {name!r} registered twice")
        build.pattern_name = name
        build.small = dict(small)
        build.numpy_impl = numpy_impl
        PATTERNS[name] = build
        return build
    return deco

