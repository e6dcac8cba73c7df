from .abi import Param
from .lower import Lowered, lower

__all__ = ["lower", "Lowered", "Param"]
