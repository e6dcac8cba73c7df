"""ModelProgram: a whole model graph run as a sequence of fused groups.

Each group is one step: an akgpy kernel (a compiled Program of the group's subgraph), a
library contraction, a numpy fallback op, or a reshape view. The program binds the model's
weights itself (aligned once) and passes each step its inputs from one environment of named
arrays.

Memory plan: every intermediate a kernel writes gets one aligned buffer, allocated when the
program is built and reused by every call, and the kernel is called on the arrays directly.
Going through each group's Program instead (argument checks, fresh outputs) cost 0.4 ms of
2.8 on the ResNet bottleneck, and 0.6 of 12 on the BERT layer. Graph outputs are fresh arrays
on every call, because the caller keeps them. Because of the shared buffers, one program runs
one call at a time (a lock). Kernels assume of an input only its dtype's alignment (te/abi.py):
the caller's arrays go to them as they are unless not C-contiguous or read-only (then copied).
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .. import dtypes
from ..errors import ArgumentError
from ..fusion.partition import Group, Partition
from .program import Kernel, OutputPool, Program, aligned_empty, as_aligned, as_direct, as_numpy


def _direct_params(st: "Step", g) -> list[tuple] | None:
    """(tensor, kind, graph shape, dtype, kernel shape where it differs else None) per kernel
    parameter, when the kernel can be called on the environment's arrays or views of them
    (plain dtypes; a kernel on collapsed dims, graph/collapse.py, takes reshaped views). A
    kernel with stacked parameters (te/abi.py: a group above MAX_KERNEL_PARAMS, such as one
    AddN of that many inputs) goes through its Program, which stacks."""
    if st.program is None:
        return None
    out = []
    for p in st.kernel.params:
        if p.members:
            return None
        t = g.tensors[p.tensor]
        if p.kind == "inplace" or t.dtype in dtypes.COMPLEX:
            return None
        view = tuple(p.shape) if tuple(p.shape) != tuple(t.shape) else None
        out.append((p.tensor, p.kind, tuple(t.shape), str(dtypes.to_numpy(t.dtype)), view))
    return out


@dataclass
class Step:
    group: Group
    run: Callable[[Sequence[np.ndarray]], tuple]
    program: Program | None = None  # set for akgpy kernels
    note: str = ""  # why a library kernel was chosen, or what fell back

    @property
    def kernel(self) -> Kernel | None:
        return self.program.kernels[0] if self.program is not None else None

    @property
    def label(self) -> str:
        if self.program is not None:
            return self.kernel.name
        return f"{self.group.kind}:{self.group.name}"


class ModelProgram:
    def __init__(self, partition: Partition, steps: list[Step], target: str):
        self.graph, self.partition, self.steps, self.target = partition.graph, partition, steps, target
        g = self.graph
        last: dict[str, int] = {}
        for k, st in enumerate(steps):
            for t in st.group.inputs:
                last[t] = k
        keep = set(g.outputs) | set(g.inputs)
        self._free_after = [[t for t, k2 in last.items() if k2 == k and t not in keep] for k in range(len(steps))]
        self._times: list[float] | None = None
        # The weights live as long as the program: each where its own buffer starts a cache line.
        self._bound = {n: as_aligned(a) for n, a in g.bound.items()}
        self._direct = [_direct_params(st, g) for st in steps]
        self._buffers = {name: aligned_empty(shape, dt) for params in self._direct if params
                         for name, kind, shape, dt, _ in params if kind == "output" and name not in g.outputs}
        self._lock = threading.Lock()
        self._pool = OutputPool()  # graph outputs: fresh for the caller, recycled once dropped

    # -- what it is ----------------------------------------------------------------------
    @property
    def kernels(self) -> list[Kernel]:
        return [st.kernel for st in self.steps if st.program is not None]

    @property
    def launches(self) -> int:
        """Generated kernels plus library and fallback calls: what one inference launches
        (reshape views move no data and launch nothing)."""
        return sum(st.group.kind != "view" for st in self.steps)

    def fallbacks(self) -> list[str]:
        return [f"{self.graph.ops[st.group.ops[0]].label(st.group.ops[0])}: {st.note}"
                for st in self.steps if st.group.kind == "fallback"]

    def __repr__(self) -> str:
        kinds = [st.group.kind for st in self.steps]
        return (f"ModelProgram({self.graph.name!r}, {len(self.graph.ops)} ops in {len(self.steps)} groups: "
                f"{kinds.count('kernel')} kernels, {kinds.count('library')} library, "
                f"{kinds.count('fallback')} fallback, {kinds.count('view')} views)")

    def with_launcher(self, launcher: str) -> "ModelProgram":
        """This model with every kernel's parallel loops on `launcher`: "openmp" (the process's
        OpenMP threads, torch's intra-op pool under torch: runtime/launcher.py) or "tvm"."""
        from .artifact import with_launcher
        steps = []
        for st in self.steps:
            if st.program is not None:
                prog = with_launcher(st.program, launcher)
                st = Step(st.group, lambda args, prog=prog: prog(*args), prog, st.note)
            steps.append(st)
        return ModelProgram(self.partition, steps, self.target)

    # -- running -------------------------------------------------------------------------
    def _bind(self, arrays: Sequence[Any]) -> dict[str, np.ndarray]:
        g = self.graph
        free = g.free_inputs
        if len(arrays) != len(free):
            raise ArgumentError(f"{g.name} takes {len(free)} inputs ({', '.join(free)}), got {len(arrays)}")
        env = dict(self._bound)
        for name, x in zip(free, arrays):
            t, a = g.tensors[name], as_numpy(x, name)
            if a.dtype != dtypes.to_numpy(t.dtype) or a.shape != t.shape:
                raise ArgumentError(f"expected {t.dtype}{list(t.shape)}, got {a.dtype}{list(a.shape)}", tensor=name)
            env[name] = as_direct(a)
        return env

    def __call__(self, *arrays: Any) -> tuple[np.ndarray, ...]:
        env = self._bind(arrays)
        with self._lock:
            return self._run(env, None)

    def _run(self, env: dict[str, np.ndarray], times: list[float] | None) -> tuple[np.ndarray, ...]:
        fresh = set()  # arrays made by this call: everything else must not escape to the caller
        for k, st in enumerate(self.steps):
            t0 = time.perf_counter()
            params = self._direct[k]
            if params is not None:
                args = []
                for name, kind, shape, dt, view in params:
                    if kind == "input":
                        buf = env[name]
                    else:
                        buf = self._buffers.get(name)
                        if buf is None:
                            buf = self._pool.take(shape, dt)
                            fresh.add(name)
                        env[name] = buf
                    args.append(buf if view is None else buf.reshape(view))
                st.kernel.unchecked(*args)
            else:
                outs = st.run([env[n] for n in st.group.inputs])
                if st.group.kind != "view":
                    outs = [as_direct(o) for o in outs]
                    fresh.update(st.group.outputs)
                env.update(zip(st.group.outputs, outs))
            if times is not None:
                times[k] += time.perf_counter() - t0
            for t in self._free_after[k]:
                env.pop(t, None)
        return tuple(env[n] if n in fresh else env[n].copy() for n in self.graph.outputs)

    def profile(self, *arrays: Any, repeat: int = 10) -> str:
        """Run `repeat` times, timing each step; returns report() with the measured shares."""
        env0 = self._bind(arrays)
        runs = []
        with self._lock:
            self._run(dict(env0), None)  # warm: first calls JIT and fault in pages
            for _ in range(repeat):
                t = [0.0] * len(self.steps)
                self._run(dict(env0), t)
                runs.append(t)
        self._times = [float(np.median([r[k] for r in runs])) for k in range(len(self.steps))]
        return self.report()

    def report(self) -> str:
        """Per group: its ops, the kernel (or library/fallback call) and, after profile(), its
        median time and share of the total."""
        total = sum(self._times) if self._times else 0.0
        lines = [repr(self), f"{'group':6} {'kind':8} {'kernel':34} {'ms':>8} {'share':>6}  ops"]
        for k, st in enumerate(self.steps):
            ops = ", ".join(self.graph.ops[i].name for i in st.group.ops)
            ms = f"{self._times[k] * 1e3:8.3f}" if self._times else f"{'-':>8}"
            share = f"{self._times[k] / total:6.1%}" if total else f"{'-':>6}"
            lines.append(f"{st.group.name:6} {st.group.kind:8} {st.label[:34]:34} {ms} {share}  {ops}")
        if self._times:
            lines.append(f"total {total * 1e3:.3f} ms (sum of per-step medians)")
        fallbacks = self.fallbacks()
        if fallbacks:
            lines += ["fallbacks:"] + [f"  {f}" for f in fallbacks]
        return "\n".join(lines)

    def explain(self, *, timeout_s: float = 10.0) -> str:
        parts = [self.partition.describe(), self.report()]
        parts += [st.program.explain(timeout_s=timeout_s) for st in self.steps if st.program is not None]
        return "\n\n".join(parts)

    def source(self) -> str:
        return "\n\n".join(st.program.source() for st in self.steps if st.program is not None)

    # -- picture -------------------------------------------------------------------------
    def to_dot(self) -> str:
        from .picture import to_dot
        return to_dot(self.partition)

    def render(self, path: str) -> str:
        """Draw the graph with each fused group boxed and coloured (.svg, .png, .pdf or .dot).
        Uses Graphviz's `dot` when it is installed, else akgpy's own SVG layout (.svg only)."""
        from .picture import render
        return render(self.partition, path)
