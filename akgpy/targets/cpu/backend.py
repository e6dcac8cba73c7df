"""The CPU backend (Target kind "llvm"): x86 and other LLVM CPUs.

How the schedule's marks map to the hardware: a parallel loop runs on TVM's thread pool
(`target.threads` workers), a vector loop is `target.vector_bytes` wide (the schedule sized it
so), and the marks only CPUs realise are added here (`prepare`): streaming (non-temporal) stores
into large outputs and software prefetch, both realised by the TIR passes of `tir_pipeline`.
"""
from __future__ import annotations

from ...schedule.config import ScheduleConfig
from ...target import Target
from ..backend import Backend
from . import defaults, llvm, standalone
from .stream import mark_prefetch, mark_stream_outputs, stream_candidates


class CpuBackend(Backend):
    kind = "llvm"
    # a shared library TVM's runtime loads (Executable.export_library); bump on an ABI change
    artifact_format = "llvm-so/1"
    object_format = standalone.OBJECT_FORMAT

    def default_config(self, target: Target) -> ScheduleConfig:
        return defaults.default_config(target)

    def streams(self, lowered, cfg: ScheduleConfig, target: Target) -> bool:
        return bool(stream_candidates(lowered, cfg)[0])

    def prepare(self, mod, lowered, cfg: ScheduleConfig, target: Target):
        mod, stream_note = mark_stream_outputs(mod, lowered, cfg)
        mod, prefetch_note = mark_prefetch(mod, cfg)
        return mod, [stream_note, prefetch_note]

    def build(self, mod, target: Target):
        return llvm.build(mod, target)

    def export(self, executable, path) -> None:
        executable.export_library(str(path))

    def standalone_config(self, target: Target) -> ScheduleConfig:
        return defaults.standalone_config(target)

    def export_object(self, executable) -> bytes:
        return standalone.object_code(executable)


CPU = CpuBackend()
