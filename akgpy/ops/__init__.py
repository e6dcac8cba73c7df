from .registry import OPS, OpDef, Category, lookup

__all__ = ["OPS", "OpDef", "Category", "lookup"]
