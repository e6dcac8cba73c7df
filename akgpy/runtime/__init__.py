from .program import Kernel, Program

__all__ = ["Program", "Kernel"]
