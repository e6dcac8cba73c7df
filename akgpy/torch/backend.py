"""`torch.compile(model, backend="akgpy")`: an AOTAutograd backend (forward and backward arrive
as ATen FX graphs after torch's core-ATen decompositions). Each graph is partitioned with
torch's CapabilityBasedPartitioner on what akgpy converts (support.py); each partition becomes
a FusedPartition (fused.py), everything else stays a torch call in the returned GraphModule."""
from __future__ import annotations

import operator
from typing import Sequence

import torch
from torch._decomp import core_aten_decompositions
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.aot_autograd import make_boxed_func
from torch.fx.node import _get_qualified_name
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.utils.fuser_utils import fuse_by_partitions

from .convert import VIEW_OPS
from .fused import FusedPartition
from .report import GraphReport, PartitionReport, Report, start_report

PREFIX = "akgpy_"


def op_name(target) -> str:
    return "getitem" if target is operator.getitem else str(target)


def _is_size(val) -> bool:
    return isinstance(val, (int, torch.SymInt)) and not isinstance(val, bool)


def partition_graph(gm: torch.fx.GraphModule, kind: str = "forward",
                    static_inputs: Sequence[int] = ()) -> tuple[torch.fx.GraphModule, GraphReport]:
    """gm with every fused partition replaced by a FusedPartition submodule (in place), and its
    report. `static_inputs` are the graph inputs held constant across calls (an inference
    graph's parameters and buffers): a partition folds what it computes from them alone."""
    from .support import AkgpySupport
    support = AkgpySupport()
    # size arithmetic on symbolic sizes (sym_size, operator.mul ...) is Python int math, not a
    # tensor op: it stays outside partitions and out of the counts
    calls = [n for n in gm.graph.nodes if n.op == "call_function" and not _is_size(n.meta.get("val"))]
    partitioner = CapabilityBasedPartitioner(gm, support, allows_single_node_partition=False,
                                             non_compute_ops=[_get_qualified_name(op) for op in VIEW_OPS])
    partitions = partitioner.propose_partitions()
    report = GraphReport(kind, len(calls))
    inside = {n for p in partitions for n in p.nodes}
    for n in calls:
        if n not in inside:
            why = support.reasons.get(n, "converted, but its partition had one compute op or only views")
            report.in_torch.append((n.name, op_name(n.target), why))
    order = {n: k for k, n in enumerate(calls)}
    records = [PartitionReport(f"{PREFIX}{k}", [op_name(n.target) for n in sorted(p.nodes, key=order.__getitem__)])
               for k, p in enumerate(partitions)]
    gm = fuse_by_partitions(gm, [dict(p.nodes) for p in partitions], prefix=PREFIX, always_return_tuple=True)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    static = {placeholders[i] for i in static_inputs if i < len(placeholders)}
    calls_of = {n.target: n for n in gm.graph.nodes if n.op == "call_module"}
    for rec in records:
        call = calls_of.get(rec.name)
        held = tuple(k for k, a in enumerate(call.args) if a in static) if call is not None else ()
        part = FusedPartition(getattr(gm, rec.name), rec, held)
        rec.module = part
        setattr(gm, rec.name, part)
        report.partitions.append(rec)
    gm.recompile()
    return gm, report


def _compiler(report: Report, kind: str):
    def compile_fx(gm: torch.fx.GraphModule, example_inputs):
        gm, graph_report = partition_graph(gm, kind, _static_inputs() if kind == "inference" else ())
        report.graphs.append(graph_report)
        gm.akgpy_report = graph_report
        return make_boxed_func(gm.forward)
    return compile_fx


def _static_inputs() -> tuple[int, ...]:
    """The inputs AOTAutograd marks static (parameters and buffers, which dynamo lifts to graph
    inputs): only an inference graph holds them constant; a training step changes them."""
    ctx = torch._guards.TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None) if ctx is not None else None
    return tuple(getattr(meta, "static_input_indices", None) or ())


def akgpy_backend(gm: torch.fx.GraphModule, example_inputs, **kwargs):
    """The dynamo backend (entry point `akgpy` of `torch_dynamo_backends`)."""
    report = start_report()
    backend = aot_autograd(fw_compiler=_compiler(report, "forward"), bw_compiler=_compiler(report, "backward"),
                           inference_compiler=_compiler(report, "inference"),
                           decompositions=core_aten_decompositions())
    return backend(gm, example_inputs, **kwargs)
