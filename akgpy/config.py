"""Every akgpy flag, declared once: name, default, doc, and whether it changes generated code."""
from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Flag:
    name: str
    default: str
    doc: str
    affects_codegen: bool

    def get(self) -> str:
        return os.environ.get(self.name, self.default)


DUMP = Flag("AKGPY_DUMP", "", "directory: every stage writes what it produced there (graph, TVMScript, source)", False)
# the host Target's thread count comes from it, and the column-sum chunk count follows that
NUM_THREADS = Flag("TVM_NUM_THREADS", "", "CPU threads for kernels; akgpy defaults it to all cores at import", True)

CACHE = Flag("AKGPY_CACHE", "~/.cache/akgpy",
             "directory of the compile cache (docs/cache.md); 'off' compiles every time and stores nothing", False)
CACHE_KEY = Flag("AKGPY_CACHE_KEY", "~/.config/akgpy/cache.key",
                 "file holding the per-user HMAC key of cached artifacts (created 0600; keep it outside the cache)", False)

# a framework's kernels are checked once, where they are built: a wrong one is handed back
VERIFY_KERNELS = Flag("AKGPY_VERIFY_KERNELS", "1",
                      "'1': each kernel built for MindSpore is run once on random inputs against the numpy reference "
                      "and handed back on a mismatch (docs/mindspore.md); '0' skips that", False)

FLAGS = {f.name: f for f in (DUMP, NUM_THREADS, CACHE, CACHE_KEY, VERIFY_KERNELS)}


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def init_threads() -> None:
    """TVM's pool size is read once when the runtime starts; default it to every core here."""
    if "TVM_NUM_THREADS" not in os.environ and "OMP_NUM_THREADS" not in os.environ:
        os.environ["TVM_NUM_THREADS"] = str(_cores())


def threads() -> int:
    """The threads kernels will run on: the user's TVM_NUM_THREADS or OMP_NUM_THREADS, else every core."""
    for name in ("TVM_NUM_THREADS", "OMP_NUM_THREADS"):
        v = os.environ.get(name, "")
        if v.isdigit() and int(v) > 0:
            return int(v)
    return _cores()
