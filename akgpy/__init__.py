"""akgpy: a graph-kernel fusion compiler (composite JSON / GraphBuilder -> TVM TE -> LLVM CPU kernels)."""
from . import config

config.init_threads()  # before anything starts the TVM runtime

from . import errors, reference  # noqa: E402
from .errors import AkgpyError
from .frontends.composite import load_composite
from .graph import Graph, GraphBuilder, Op, Tensor, structural_hash
from .schedule.config import ScheduleConfig  # noqa: E402  (plain data; imports no tvm)

__version__ = "0.1.0"


def fuse(graph, target: str = "llvm", **options):
    """Compile a Graph (or a composite file/string) into a callable Program.

    options: schedule="poly" (default)|"plain", config=akgpy.ScheduleConfig(...) (schedule knobs)."""
    from .pipeline import compile_graph
    return compile_graph(graph, target=target, **options)


__all__ = ["fuse", "load_composite", "ScheduleConfig", "Graph", "GraphBuilder", "Op", "Tensor", "structural_hash",
           "errors", "reference", "AkgpyError"]
