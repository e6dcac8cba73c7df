from .llvm import host_target

__all__ = ["host_target"]
