"""`akg.ms.compilewithjson` for MindSpore: each fused subgraph MindSpore sends is built by
akgpy into its kernel-meta directory, or handed back for MindSpore to split (docs/mindspore.md).

MindSpore (mindspore/_extends/parallel_compile/akg_compiler/akg_process.py) calls
`compilewithjson(json_str, attrs_json_str)` in forked pool workers and then looks for
`<kernel meta dir>/<op>.json`. Returning True without that file makes it split the subgraph and
run its own kernels; returning False or raising aborts the user's whole compile. So every
refusal, and every failure, is logged and answered True: akgpy never stops a training run.
"""
from __future__ import annotations

import json
import logging
import os
import time
import traceback
from pathlib import Path
from typing import Any

LOG = logging.getLogger("akgpy.mindspore")
LOG_FILE = "akgpy.log"  # in the kernel-meta directory: one line per request


def kernel_meta_dir(attrs: dict) -> Path:
    """Where MindSpore reads kernels from: `<compile_cache>/<$KERNEL_META_DIR or akg_kernel_meta>`
    (compile_cache: the build attrs', else $MS_COMPILER_CACHE_PATH, else the working directory)."""
    parent = attrs.get("compile_cache") or os.environ.get("MS_COMPILER_CACHE_PATH") or "."
    return Path(os.path.realpath(parent)) / os.environ.get("KERNEL_META_DIR", "akg_kernel_meta")


def compilewithjson(json_str: Any, attrs: Any = None) -> bool:
    """Build the kernel MindSpore asks for; True in every case (see the module docstring)."""
    start = time.perf_counter()
    op, km = "?", None
    try:
        from ..kernel_meta import parse_attrs
        attrs_d = parse_attrs(attrs)
        out = kernel_meta_dir(attrs_d)
    except Exception as e:  # noqa: BLE001 - never abort the caller's compile
        _record(None, op, "handed back", f"unreadable build attrs: {e}", start)
        return True
    try:
        desc = json.loads(json_str) if isinstance(json_str, (str, bytes)) else json_str
        op = str(desc.get("op", "?")) if isinstance(desc, dict) else "?"
        from .. import config
        from ..errors import AkgpyError
        from ..frontends.composite import load_composite
        from ..kernel_meta import build_kernel_meta, verify
        try:
            graph = load_composite(desc)
            km = build_kernel_meta(graph, out, attrs_d)
        except AkgpyError as e:
            _record(out, op, "handed back", str(e), start)
            return True
        checked = config.VERIFY_KERNELS.get() != "0"
        if checked:
            bad = verify(graph, km)
            if bad:
                _withdraw(km)
                _record(out, op, "handed back", f"the kernel does not match the numpy reference: {bad[0]}", start,
                        level=logging.ERROR)
                return True
        _record(out, op, "compiled", f"graph {km.meta['graph_hash'][:16]} tir {km.meta['tir_hash']} "
                f"{km.meta['schedule_path'].get('path', '')} {'verified' if checked else 'not verified'}", start)
        return True
    except Exception as e:  # noqa: BLE001 - a compiler bug hands the kernel back, loudly
        if km is not None:
            _withdraw(km)
        _record(out, op, "handed back", f"akgpy failed: {type(e).__name__}: {e}\n{traceback.format_exc()}", start,
                level=logging.ERROR)
        return True


def _withdraw(km) -> None:
    """Remove a kernel MindSpore must not use: the .json first, since MindSpore looks for it."""
    for path in (km.json, km.library):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def _record(out: Path | None, op: str, status: str, detail: str, start: float, level: int | None = None) -> None:
    """One line per request in <kernel meta dir>/akgpy.log (appended in one write, so pool
    workers' lines do not interleave) and to the `akgpy.mindspore` logger (a hand-back at
    WARNING, a compile at INFO)."""
    seconds = time.perf_counter() - start
    first = detail.splitlines()[0] if detail else ""
    if level is None:
        level = logging.INFO if status == "compiled" else logging.WARNING
    LOG.log(level, "akgpy: %s %s in %.2f s: %s", status, op, seconds, detail if level >= logging.ERROR else first)
    if out is None:
        return
    line = json.dumps({"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "pid": os.getpid(), "op": op, "status": status,
                       "seconds": round(seconds, 3), "detail": first}) + "\n"
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd = os.open(out / LOG_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except OSError as e:
        LOG.warning("akgpy: cannot append to %s: %s", out / LOG_FILE, e)
