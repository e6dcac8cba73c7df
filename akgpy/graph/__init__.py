from .ir import Graph, Op, Tensor
from .builder import GraphBuilder
from .hash import structural_hash

__all__ = ["Graph", "Op", "Tensor", "GraphBuilder", "structural_hash"]
