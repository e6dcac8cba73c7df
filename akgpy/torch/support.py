"""Which ATen FX nodes akgpy converts: the OperatorSupport CapabilityBasedPartitioner asks, with
the reason for every node it refuses (for the report)."""
from __future__ import annotations

import operator
from typing import Any, Mapping

import torch
from torch.fx.passes.operator_support import OperatorSupportBase

from .convert import CONVERTERS, DTYPES


def _tensor_reason(val: Any, what: str) -> str | None:
    if isinstance(val, (tuple, list)):
        return next((r for r in (_tensor_reason(v, what) for v in val) if r), None)
    if not isinstance(val, torch.Tensor):
        return f"{what} is a {type(val).__name__}, not a tensor (a symbolic size)"
    if val.dtype not in DTYPES:
        return f"{what} has dtype {val.dtype}"
    if val.device.type != "cpu" or val.layout != torch.strided:
        return f"{what} is a {val.layout} tensor on {val.device}"
    return None


def unsupported_reason(node: torch.fx.Node) -> str | None:
    """Why akgpy does not convert this node, or None when it does."""
    if node.op != "call_function":
        return f"FX {node.op} node"
    if node.target is operator.getitem:
        src = node.args[0]
        return unsupported_reason(src) if isinstance(src, torch.fx.Node) else "getitem of a non-node"
    if node.target not in CONVERTERS:
        return f"no akgpy converter for {node.target}"
    why = _tensor_reason(node.meta.get("val"), "its result")
    if why:
        return why
    for arg in node.all_input_nodes:
        why = _tensor_reason(arg.meta.get("val"), f"input {arg.name}")
        if why:
            return why
    kw = node.kwargs
    if node.target is torch.ops.aten.bitwise_not.default and node.args[0].meta["val"].dtype != torch.bool:
        return "bitwise_not of integers (converted for bool only)"
    if kw.get("rounding_mode") is not None:
        return f"rounding_mode={kw['rounding_mode']!r}"
    if node.target is torch.ops.aten._to_copy.default and any(
            kw.get(k) is not None and kw[k] not in ok for k, ok in (("device", (torch.device("cpu"), "cpu")),
                                                                    ("layout", (torch.strided,)))):
        return "a copy to another device or layout"
    return None


class AkgpySupport(OperatorSupportBase):
    def __init__(self):
        self.reasons: dict[torch.fx.Node, str] = {}

    def is_node_supported(self, submodules: Mapping[str, torch.nn.Module], node: torch.fx.Node) -> bool:
        why = unsupported_reason(node)
        if why is not None:
            self.reasons[node] = why
        return why is None
