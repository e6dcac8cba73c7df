"""What the torch backend did with each FX graph: how many nodes akgpy runs, in how many
programs, and which ops stayed torch calls and why (`akgpy.torch.last_report()`)."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any


@dataclass
class PartitionReport:
    """One fused partition: its ATen ops, and per concrete input shape whether akgpy compiled it
    (`programs`) or it runs in torch (`fallbacks`: shape -> the reason)."""
    name: str
    ops: list[str]
    module: Any = None  # the FusedPartition running it (for inspection, not part of the report text)
    programs: int = 0
    fallbacks: dict[str, str] = field(default_factory=dict)

    @property
    def nodes(self) -> int:
        return len(self.ops)


@dataclass
class GraphReport:
    """One ATen FX graph (a forward, backward or inference graph of AOTAutograd)."""
    kind: str
    nodes: int  # ATen call nodes in the graph
    partitions: list[PartitionReport] = field(default_factory=list)
    in_torch: list[tuple[str, str, str]] = field(default_factory=list)  # (node, op, why) left to torch

    @property
    def fused_nodes(self) -> int:
        """Nodes of partitions akgpy compiled for at least one shape."""
        return sum(p.nodes for p in self.partitions if p.programs)

    @property
    def programs(self) -> int:
        return sum(p.programs for p in self.partitions)

    def left_to_torch(self) -> dict[str, str]:
        """op -> why, for every op that runs as a torch call: those akgpy does not convert, and
        those of partitions that fell back."""
        out = {op: why for _, op, why in self.in_torch}
        for p in self.partitions:
            for why in p.fallbacks.values():
                for op in p.ops:
                    out.setdefault(op, f"partition {p.name} fell back: {why}")
        return out

    def __str__(self) -> str:
        lines = [f"{self.kind} graph: {self.nodes} ATen nodes, {self.fused_nodes} fused by akgpy into "
                 f"{self.programs} programs ({len(self.partitions)} partitions)"]
        for p in self.partitions:
            state = f"{p.programs} compiled shapes" + (f", {len(p.fallbacks)} in torch" if p.fallbacks else "")
            lines.append(f"  {p.name}: {p.nodes} nodes, {state}: {', '.join(p.ops)}")
            lines += [f"    fallback {shape}: {why}" for shape, why in p.fallbacks.items()]
        lines += [f"  torch {node} ({op}): {why}" for node, op, why in self.in_torch]
        return "\n".join(lines)


@dataclass
class Report:
    """The graphs of one dynamo graph (one backend call): forward and, once it ran, backward."""
    graphs: list[GraphReport] = field(default_factory=list)

    def __str__(self) -> str:
        return "\n".join(map(str, self.graphs)) or "no graph compiled yet"


_lock = threading.Lock()
_last: Report | None = None


def start_report() -> Report:
    global _last
    with _lock:
        _last = Report()
        return _last


def last_report() -> Report | None:
    """The report of the latest graph torch.compile handed to the akgpy backend (None before any)."""
    return _last
