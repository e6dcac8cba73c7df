"""The interface every code generator implements: one Backend per target kind.

The pipeline asks the backend of the resolved Target (`targets.backend_for`) for the default
schedule choices, then lets it add the marks only that hardware realises (`prepare`), builds the
scheduled module (`build`) and writes the artifact (`export`). A new kind (CUDA, Ascend) is a
subclass registered in `targets/__init__.py`; the schedule stages know nothing of it beyond the
Target's facts (docs/targets.md).
"""
from __future__ import annotations

from abc import ABC, abstractmethod

from ..schedule.config import ScheduleConfig
from ..target import Target


class Backend(ABC):
    kind: str = ""  # Target.kind this backend builds for
    artifact_format: str = ""  # what `export` writes, with a version ("llvm-so/1")
    object_format: str = ""  # what `export_object` returns ("llvm-obj/1"); "" where there is none

    @abstractmethod
    def default_config(self, target: Target) -> ScheduleConfig:
        """The schedule choices this backend starts from for `target` (a tuner's trial 0)."""

    def streams(self, lowered, cfg: ScheduleConfig, target: Target) -> bool:
        """Whether `prepare` will write some of the kernel's outputs with streaming stores: the
        poly schedule plans its tiles for that (whole cache lines). False where there are none."""
        return False

    def prepare(self, mod, lowered, cfg: ScheduleConfig, target: Target):
        """(mod, notes): the scheduled module with the marks only this target realises (CPU:
        streaming stores, software prefetch); notes for explain()."""
        return mod, []

    @abstractmethod
    def build(self, mod, target: Target):
        """The scheduled, prepared module compiled into a tvm Executable for `target`."""

    @abstractmethod
    def export(self, executable, path) -> None:
        """Write `executable` to `path` as one artifact of `artifact_format`."""

    def standalone_config(self, target: Target) -> ScheduleConfig:
        """The choices for a self-contained kernel, whose parallel loops run on the caller's
        launcher (docs/kernel_meta.md) rather than this backend's own runtime."""
        return self.default_config(target)

    def export_object(self, executable) -> bytes:
        """The kernel's relocatable object code (`object_format`), for a self-contained kernel
        linked with its own runtime (docs/kernel_meta.md)."""
        from ..errors import CompileError
        raise CompileError(f"the {self.kind or type(self).__name__} backend cannot export object code")
