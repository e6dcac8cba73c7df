"""akgpy's TIR pipelines for CPU targets: TVM's default lowering, then akgpy's passes over the
vectorised code (they need vector loads and stores, which exist only after TVM's lowering):
the target-generic ones of targets/ and the CPU ones of targets/cpu/.

    akgpy          + broadcast operands' vector loads as a load and a shuffle (vector_loads),
                   float64 sums of float16 terms in float32 runs of up to 8 (sum_runs),
                   float64 sums of a local buffer's lanes as vectors, then halved (lane_sums),
                   loop-carried vector updates of odd widths in register-sized chunks
                   (split_accumulators),
                   float max/min with numpy's NaN and -inf semantics (nan_extrema),
                   vector casts of comparisons to numbers as selects (bool_casts),
                   software prefetch ahead of streamed reads where the schedule asks (prefetch);
                   after TVM's host finalization, small workspace allocations on the
                   stack (stack_scratch)
    akgpy-stream   + streaming stores into the outputs the schedule marked (stream_stores);
                   x86 only: the stores are x86 non-temporal moves and an sfence
"""
from __future__ import annotations

import tvm
from tvm import tirx

from ..bool_casts import bool_casts
from ..lane_sums import lane_sums
from ..nan_extrema import nan_extrema
from ..split_accumulators import split_func
from ..sum_runs import sum_runs
from ..vector_loads import shuffle_loads
from .prefetch import prefetch_func
from .stack_scratch import stack_scratch
from .stream_stores import stream_func

PLAIN, STREAM = "akgpy", "akgpy-stream"


def _factory(stream: bool):
    def make():
        from tvm.s_tir.pipeline import default_s_tir_pipeline
        lower, finalize_host, finalize_device = default_s_tir_pipeline()

        def passes(f, _mod, _ctx):
            f = prefetch_func(bool_casts(nan_extrema(split_func(lane_sums(sum_runs(shuffle_loads(f)))))))
            return stream_func(f) if stream else f

        @tvm.transform.module_pass(opt_level=0, name="akgpy.VectorPasses")
        def pipeline(mod, _ctx):
            return tirx.transform.prim_func_pass(passes, opt_level=0)(lower(mod))

        def host():  # after TVM's LowerTVMBuiltin, which made the workspace calls
            scratch = tirx.transform.prim_func_pass(lambda f, _m, _c: stack_scratch(f), opt_level=0,
                                                    name="akgpy.StackScratch")
            return tvm.ir.transform.Sequential([finalize_host(), scratch])

        return pipeline, host, finalize_device
    return make


def register(stream: bool) -> str:
    """Register akgpy's pipelines (once); the name of the one with or without streaming stores."""
    from tvm.tirx.compilation_pipeline import PIPELINE_MAP, register_tir_pipeline
    for name, flag in ((PLAIN, False), (STREAM, True)):
        if name not in PIPELINE_MAP:
            register_tir_pipeline(name, _factory(flag))
    return STREAM if stream else PLAIN
