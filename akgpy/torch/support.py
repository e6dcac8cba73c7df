"""Which ATen FX nodes akgpy converts: the OperatorSupport CapabilityBasedPartitioner asks, with
the reason for every node it refuses (for the report)."""
from __future__ import annotations

import operator
from typing import Any, Mapping

import torch
from torch.fx.passes.operator_support import OperatorSupportBase

from .convert import CONVERTERS, DTYPES


def _tensor_reason(val: Any, what: str, sizes: bool = False) -> str | None:
    """Why val is not a tensor akgpy takes (None when it is); with `sizes`, a size (an int, or a
    symbolic one: the program is specialised on its value per call) is taken too."""
    if isinstance(val, (tuple, list)):
        return next((r for r in (_tensor_reason(v, what, sizes) for v in val) if r), None)
    if sizes and isinstance(val, (int, torch.SymInt)):
        return None
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
        why = _tensor_reason(arg.meta.get("val"), f"input {arg.name}", sizes=True)
        if why:
            return why
    why = _CHECKS.get(node.target, lambda n: None)(node)
    if why:
        return why
    kw = node.kwargs
    if kw.get("rounding_mode") is not None:
        return f"rounding_mode={kw['rounding_mode']!r}"
    if node.target is torch.ops.aten._to_copy.default and any(
            kw.get(k) is not None and kw[k] not in ok for k, ok in (("device", (torch.device("cpu"), "cpu")),
                                                                    ("layout", (torch.strided,)))):
        return "a copy to another device or layout"
    return None


def _bool_only(node: torch.fx.Node) -> str | None:
    if any(a.meta["val"].dtype != torch.bool for a in node.all_input_nodes if isinstance(a.meta.get("val"), torch.Tensor)):
        return f"{node.target} of integers (converted for bool only)"
    return None


def _one_index(node: torch.fx.Node) -> str | None:
    pos = [d for d, i in enumerate(node.args[1]) if i is not None]
    if pos != list(range(pos[0], pos[-1] + 1)):
        return f"index tensors on dims {pos}, not consecutive (torch moves their dims first)"
    for i in node.args[1]:
        if i is not None and i.meta["val"].dtype not in (torch.int32, torch.int64):
            return f"indexing with a {i.meta['val'].dtype} index (converted: int32/int64)"
    return None


def _conv_reason(node: torch.fx.Node) -> str | None:
    x, w, _, stride, padding, dilation, transposed = node.args[:7]
    if len(x.meta["val"].shape) != 4:
        return f"a {len(x.meta['val'].shape) - 2}-D convolution (converted: 2-D)"
    if transposed:
        return "a transposed convolution"
    if any(d != 1 for d in dilation):
        return f"a dilated convolution (dilation {list(dilation)})"
    return None


def _pool_reason(node: torch.fx.Node) -> str | None:
    args = dict(zip(("x", "kernel", "stride", "padding", "dilation", "ceil_mode"), node.args)) | node.kwargs
    if any(d != 1 for d in args.get("dilation", [1])):
        return "a dilated max pool"
    if any(u.target is operator.getitem and u.args[1] == 1 for u in node.users):
        return "its indices are read (converted: the pooled values only)"
    return None


def _avg_pool_reason(node: torch.fx.Node) -> str | None:
    if len(node.args) > 6 and node.args[6] is not None or node.kwargs.get("divisor_override") is not None:
        return "avg_pool2d with divisor_override"
    return None


def _train_bn_reason(node: torch.fx.Node) -> str | None:
    return None if node.args[5] else "functional batch norm with training=False"


# per-op conditions beyond converter, dtype and device
aten = torch.ops.aten
_CHECKS = {aten.bitwise_not.default: _bool_only, aten.bitwise_and.Tensor: _bool_only,
           aten.bitwise_or.Tensor: _bool_only, aten.logical_and.default: _bool_only,
           aten.logical_or.default: _bool_only, aten.index.Tensor: _one_index,
           aten.convolution.default: _conv_reason, aten.max_pool2d_with_indices.default: _pool_reason,
           aten.avg_pool2d.default: _avg_pool_reason,
           aten._native_batch_norm_legit_functional.default: _train_bn_reason}


class AkgpySupport(OperatorSupportBase):
    def __init__(self):
        self.reasons: dict[torch.fx.Node, str] = {}

    def is_node_supported(self, submodules: Mapping[str, torch.nn.Module], node: torch.fx.Node) -> bool:
        why = unsupported_reason(node)
        if why is not None:
            self.reasons[node] = why
        return why is None
