from .lower import Lowered, Param, lower

__all__ = ["lower", "Lowered", "Param"]
