"""akgpy: a graph-kernel fusion compiler (composite JSON / GraphBuilder -> TVM TE -> LLVM CPU kernels)."""
from . import config

config.init_threads()  # before anything starts the TVM runtime

from . import errors, reference  # noqa: E402
from .errors import AkgpyError
from .frontends.composite import load_composite
from .graph import Graph, GraphBuilder, Op, Tensor, structural_hash
from .schedule.config import ScheduleConfig  # noqa: E402  (plain data; imports no tvm)
from .target import Target, resolve_target  # noqa: E402  (imports tvm only when resolving)

from .version import __version__  # noqa: E402


def fuse(graph, target=None, **options):
    """Compile a graph into a callable program.

    A fused graph (composite JSON file/string, or a GraphBuilder graph) becomes one kernel: a
    Program. A model graph (`akgpy.from_onnx`, `GraphBuilder(..., model=True)`) is partitioned
    into fused groups first (docs/fusion.md): a ModelProgram running one step per group.

    options: schedule="poly" (default)|"plain", config=akgpy.ScheduleConfig(...) (schedule knobs);
    for model graphs also contraction="auto"|"generated"|"library", fuse=True|False, limits=Limits(...)."""
    from .pipeline import compile_graph, compile_model
    if isinstance(graph, Graph) and graph.kind == "model":
        return compile_model(graph, target=target, **options)
    return compile_graph(graph, target=target, **options)


def build_kernel_meta(source, out_dir, attrs=None, *, target=None):
    """A fused subgraph as a self-contained kernel: `<out_dir>/<name>.so` exporting
    `int <name>_kernel(void **args)` and `<out_dir>/<name>.json`; see docs/kernel_meta.md."""
    from .kernel_meta import build_kernel_meta as build
    return build(source, out_dir, attrs, target=target)


def from_onnx(model, shapes=None, *, name=None):
    """An ONNX model (ModelProto, file path or bytes) as an akgpy model Graph; see docs/onnx.md."""
    from .frontends.onnx import from_onnx as load
    return load(model, shapes=shapes, name=name)


__all__ = ["fuse", "build_kernel_meta", "from_onnx", "load_composite", "ScheduleConfig", "Target", "resolve_target", "Graph", "GraphBuilder", "Op", "Tensor", "structural_hash",
           "errors", "reference", "AkgpyError"]
