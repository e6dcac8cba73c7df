"""A compiled Program: the callable akgpy.fuse returns.

Calling convention (MindSpore's): `prog(*inputs)` takes the graph's inputs in input_desc
order, returns the real outputs in output_desc order, and writes InplaceAssign/Assign
results into the input arrays they target.

A kernel reads the caller's arrays where they are: it assumes of an input or in-place target
only the alignment its dtype has (te/abi.py), which every numpy array that numpy calls aligned
has. An argument is copied only where its layout truly requires it: not C-contiguous, or
read-only (DLPack exports no read-only array). An in-place target that overlaps another
argument is written apart and copied in after the kernel, so a kernel never reads what it has
already overwritten; two in-place targets that overlap are refused. Outputs are allocated here,
64-byte aligned (streaming stores write whole lines). `Program.report()` says which path the
calls took and what they copied.
"""
from __future__ import annotations

import itertools
import sys
import threading
from collections import Counter
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from .. import dtypes
from ..errors import ArgumentError
from ..graph.ir import Graph

if TYPE_CHECKING:  # te/ imports tvm; a Program from a cached artifact runs without it
    from ..te.abi import Param

ALIGN = 64
# A buffer of a page or more that akgpy allocates (outputs, input copies, a model's
# intermediates) starts at the next of 16 offsets within a page, 256 bytes apart. Two streams
# whose addresses agree in bits 0-11 with the store 32-128 bytes ahead stall the loads behind
# the store (the CPU takes them for dependent on it), and streams at one offset share their L1
# sets. Bert's optimizer ~2769 (11 inputs, 3 outputs; Zen 3, 2 threads, kernel alone, each
# buffer set timed interleaved): outputs 32-128 bytes past the inputs' page offset 9.7-22 ms,
# at the same offset or 192+ bytes from it 1.5-2.5 ms; four buffer sets each at malloc's
# offsets 2.21-2.45 ms, every buffer at page offset 0 2.63-3.12, staggered 1.37-1.55. The
# dropout ~6619: malloc's 6.9-12.2 ms (the bimodal timing of earlier runs), offset 0 9.9-10.2,
# staggered 6.57-6.69; bert's layernorm ~4253 the same either way
PAGE, STAGGER = 4096, 256
_slots = itertools.count()


def _staggered(n: int) -> tuple[np.ndarray, int]:
    """A raw byte buffer PAGE bytes longer than `n` and where in it the next buffer starts."""
    raw = np.empty(n + PAGE, dtype=np.uint8)
    return raw, ((next(_slots) % (PAGE // STAGGER)) * STAGGER - raw.ctypes.data) % PAGE


def aligned_empty(shape, dtype) -> np.ndarray:
    dt = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    if n < PAGE:
        raw = np.empty(n + ALIGN, dtype=np.uint8)
        off = (-raw.ctypes.data) % ALIGN
    else:
        raw, off = _staggered(n)
    return raw[off:off + n].view(dt).reshape(shape)


class OutputPool:
    """Output buffers recycled across calls once the caller has dropped them.

    A fresh large numpy array is a fresh mmap: the kernel's first write to each page faults
    and the kernel zero-fills it, which costs as much as the kernel itself for a
    memory-bound graph (dfm addn: 9 ms kernel, 20-40 ms through prog()). A buffer handed out
    is kept here. When a later call finds that no array views it any more (CPython's
    reference count), its memory, already mapped, is reused. Buffers under `MIN_BYTES` are
    left to the allocator. Of each size, as many free buffers are kept as were ever lent at
    once (at least `KEEP`): with two kept, a graph with four 40 MB outputs mapped two fresh
    buffers every call (19.3 ms a call, 12.7 with all four kept)."""
    MIN_BYTES = 1 << 20
    KEEP = 2

    def __init__(self):
        # (raw byte buffer, offset of its aligned start): those whose views went to callers,
        # and free ones by size; the offset is kept because reading a pointer costs a microsecond
        self._lent: list[tuple[np.ndarray, int]] = []
        self._free: dict[int, list[tuple[np.ndarray, int]]] = {}
        self._bytes: dict[tuple, int] = {}  # (shape, dtype) -> bytes: np.prod costs 5 us a call
        self._out: dict[int, int] = {}  # size -> buffers of it lent now
        self._peak: dict[int, int] = {}  # size -> most buffers of it lent at once

    def take(self, shape, dtype) -> np.ndarray:
        n = self._bytes.get((shape, dtype))
        if n is None:
            n = self._bytes[(shape, dtype)] = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        return self.take_all([(shape, dtype, n)])[0]

    def take_all(self, specs: Sequence[tuple[tuple, Any, int]]) -> list[np.ndarray]:
        """One buffer per (shape, dtype, bytes), after one reclaim pass: a call's outputs."""
        self._reclaim()
        out = []
        for shape, dtype, n in specs:
            if n < self.MIN_BYTES:
                out.append(aligned_empty(shape, dtype))
                continue
            size = n + PAGE
            bucket = self._free.get(size)
            entry = bucket.pop() if bucket else self._new(n)
            self._lent.append(entry)
            self._out[size] = lent = self._out.get(size, 0) + 1
            if lent > self._peak.get(size, 0):
                self._peak[size] = lent
            out.append(np.ndarray(shape, dtype, entry[0], entry[1]))  # a view: its base is the raw buffer
        return out

    @staticmethod
    def _new(n: int) -> tuple[np.ndarray, int]:
        return _staggered(n)  # its raw size, n + PAGE, is the bucket key (take_all)

    def _reclaim(self) -> None:
        still = []
        for entry in self._lent:
            # referenced by the tuple and getrefcount's argument only: no views left
            if sys.getrefcount(entry[0]) <= 2:
                size = entry[0].size
                self._out[size] -= 1
                bucket = self._free.setdefault(size, [])
                if len(bucket) < max(self.KEEP, self._peak.get(size, 0)):
                    bucket.append(entry)
            else:
                still.append(entry)
        self._lent = still


def as_aligned(a: np.ndarray) -> np.ndarray:
    """`a` itself when it is C-contiguous, writable and 64-byte aligned, else one aligned copy
    (from any layout): what a buffer akgpy keeps for many calls (a model's weights) is made."""
    return a if is_direct(a) and a.__array_interface__["data"][0] % ALIGN == 0 else as_aligned_copy(a)


def as_direct(a: np.ndarray) -> np.ndarray:
    """`a` itself when a kernel can take it as an input, else one copy (from any layout)."""
    return a if is_direct(a) else as_aligned_copy(a)


def is_direct(a: np.ndarray) -> bool:
    """A kernel can take `a` itself as an input or in-place target: C-contiguous, writable
    (DLPack cannot export read-only arrays) and aligned for its dtype (numpy's ALIGNED flag;
    te/abi.py: what the kernel assumes of the caller's arrays)."""
    return a.flags.carray


def why_copied(a: np.ndarray) -> str:
    if not a.flags.c_contiguous:
        return "not C-contiguous"
    if not a.flags.writeable:
        return "read-only (DLPack exports no read-only array)"
    return f"not aligned for {a.dtype}"


def as_aligned_copy(a: np.ndarray) -> np.ndarray:
    out = aligned_empty(a.shape, a.dtype)
    np.copyto(out, a)
    return out


def as_storage(a: np.ndarray, p: Param) -> np.ndarray:
    """A compact array seen as the kernel's parameter (complex -> float pairs, other shape)."""
    if a.dtype.kind == "c":
        return a.view(p.dtype).reshape(p.shape)
    return a.reshape(p.shape)


def as_numpy(x: Any, name: str) -> np.ndarray:
    if isinstance(x, np.ndarray):
        return x
    if hasattr(x, "__dlpack__"):
        try:
            return np.from_dlpack(x)
        except (TypeError, RuntimeError, BufferError) as e:
            raise ArgumentError(f"cannot view {type(x).__name__} as a host array via DLPack: {e}", tensor=name) from None
    if np.isscalar(x) or isinstance(x, (list, tuple)):
        return np.asarray(x)
    raise ArgumentError(f"expected a numpy array or a DLPack tensor, got {type(x).__name__}", tensor=name)


class Kernel:
    """One compiled kernel: its name, parameters, scheduled TIR and generated code."""

    def __init__(self, name: str, params: list[Param], executable, scheduled_mod, lowered=None,
                 schedule_report: str | None = None, graph_note: str | None = None):
        self.name, self.params = name, params
        self._graph_note = graph_note  # what the graph stage changed before lowering (collapsed dims)
        self._executable, self._mod, self._lowered = executable, scheduled_mod, lowered
        self._report = schedule_report  # the poly scheduler's own account, when it ran
        self._source: str | None = None
        # the generated code checks none of its arguments (targets/cpu/llvm.py): `func` does
        self.unchecked = executable[self.entry]  # first lookup JIT-compiles the machine code
        self.reads = frozenset(n for p in params if p.kind == "input" for n in p.tensors)

    @property
    def entry(self) -> str:
        return [gv.name_hint for gv, _ in self._mod.functions_items()][0]

    def func(self, *arrays: Any) -> None:
        """The kernel on `arrays`, one per parameter in `params` order (outputs and in-place
        targets written in place), each checked first: a numpy array (or DLPack tensor) of the
        parameter's storage dtype and shape, C-contiguous, writable and aligned as `Param.align`
        says (the dtype's alignment for inputs and in-place targets, 64 bytes for outputs:
        `aligned_empty` makes one). A wrong one raises ArgumentError; the machine code itself
        would read out of bounds or crash on it. A stacked parameter (`Param.members`, te/abi.py)
        is one array of shape (len(members), *member's shape), member j at [j]."""
        if len(arrays) != len(self.params):
            raise ArgumentError(f"kernel {self.name} takes {len(self.params)} arrays "
                                f"({', '.join(p.tensor for p in self.params)}), got {len(arrays)}")
        args = []
        for p, x in zip(self.params, arrays):
            a = x if type(x) is np.ndarray else as_numpy(x, p.tensor)
            if a.dtype != dtypes.to_numpy(p.dtype) or a.shape != p.shape:
                raise ArgumentError(f"kernel {self.name} expects {p.dtype}{list(p.shape)} for this {p.kind}, "
                                    f"got {a.dtype}{list(a.shape)}", tensor=p.tensor)
            if not a.flags.carray or a.__array_interface__["data"][0] % p.align:
                raise ArgumentError(f"kernel {self.name} takes only C-contiguous, writable, {p.align}-byte aligned "
                                    f"arrays for this {p.kind} (akgpy.runtime.program.aligned_empty makes one; a "
                                    "Program call copies where needed)", tensor=p.tensor)
            args.append(a)
        self.unchecked(*args)

    @property
    def schedule_path(self):
        """Which schedule built this kernel, as data (schedule/poly.SchedulePath)."""
        from ..schedule.poly import schedule_path
        return schedule_path([f for _, f in self._mod.functions_items()][0])

    @property
    def tir(self) -> str:
        """The scheduled loop nest as TVMScript."""
        return self._mod.script()

    @property
    def source(self) -> str:
        """Generated code (LLVM IR for the CPU); rendering it costs a compile, so it is lazy."""
        if self._source is None:
            self._source = self._executable.mod.inspect_source("ll")
        return self._source

    def explain(self, *, timeout_s: float = 10.0) -> str:
        """Which schedule path ran, the polyhedral view of the kernel (statements, accesses,
        dependences, isl's schedule tree, computed on demand under a wall-clock bound) and the
        scheduled loop nest."""
        from ..poly import compute_schedule_bounded, dependences, describe, extract
        note = [self._graph_note] if self._graph_note else []
        if self._report is not None:
            path, _, rest = self._report.partition("\n")
            return "\n".join([f"== kernel {self.name}", path, *note, rest, "== scheduled TIR", self.tir])
        out = [f"== kernel {self.name}",
               "schedule path: plain (schedule='plain': akgpy/schedule/plain.py inlines injective blocks, "
               "runs outer loops in parallel, vectorises inner slices, register-tiles contractions); the "
               "isl schedule below is analysis only: what schedule='poly' would start from", *note]
        if self._lowered is not None:
            try:
                model = extract(self._lowered.func, self._lowered.roles)
                deps = dependences(model)
                try:
                    sched = compute_schedule_bounded(model, deps, timeout_s=timeout_s)
                    out.append(describe(model, deps, sched))
                except TimeoutError:
                    out.append(describe(model, deps))
                    out.append(f"isl scheduler: no schedule within {timeout_s} s")
            except Exception as e:  # explain() reports, it never fails the caller
                out.append(f"polyhedral analysis unavailable: {type(e).__name__}: {e}")
        out += ["== scheduled TIR", self.tir]
        return "\n".join(out)

    def __repr__(self) -> str:
        return f"Kernel({self.name!r}, {len(self.params)} params)"


class RestoredKernel(Kernel):
    """A kernel whose machine code came from an artifact (runtime/artifact.py, the compile
    cache): no TIR or module was kept, so `tir`, `source` and the analysis part of `explain()`
    compile the graph again on demand through `recompile` (a callable returning the compiled
    Kernel), and say so where there is none."""

    def __init__(self, name: str, entry: str, params: list, func, *, schedule_path: dict,
                 schedule_report: str | None, graph_note: str | None, code: bytes, recompile=None):
        self.name, self.params = name, params
        self._entry, self._path = entry, dict(schedule_path)
        self._report, self._graph_note = schedule_report, graph_note
        self.code = code  # the shared object's bytes: artifact.pack stores them again as they are
        self._recompile = recompile
        self._compiled: Kernel | None = None
        self.unchecked = func
        self.reads = frozenset(n for p in params if p.kind == "input" for n in p.tensors)

    @property
    def entry(self) -> str:
        return self._entry

    @property
    def schedule_path(self):
        from ..schedule.poly import SchedulePath
        return SchedulePath(**self._path)

    def compiled(self) -> Kernel:
        """The kernel compiled again from its graph (what tir/source show); ArtifactError when the
        artifact was restored without a way to do that."""
        if self._compiled is None:
            if self._recompile is None:
                from ..errors import ArtifactError
                raise ArtifactError(f"kernel {self.name} was loaded from a cached artifact without its graph's "
                                    "compile settings: its TIR and source are not available")
            self._compiled = self._recompile()
        return self._compiled

    @property
    def tir(self) -> str:
        return self.compiled().tir

    @property
    def source(self) -> str:
        return self.compiled().source

    def explain(self, *, timeout_s: float = 10.0) -> str:
        head = (f"== kernel {self.name} (machine code from a cached artifact; the analysis and TIR below are "
                "from compiling the graph again)")
        if self._recompile is None:
            note = [self._graph_note] if self._graph_note else []
            return "\n".join([head.split(" (")[0] + " (machine code from a cached artifact; no TIR kept)",
                              *note, self._report or f"schedule path: {self._path.get('path')}"])
        text = self.compiled().explain(timeout_s=timeout_s)
        return "\n".join([head, *text.split("\n")[1:]])

    def __repr__(self) -> str:
        return f"RestoredKernel({self.name!r}, {len(self.params)} params)"


def target_label(target) -> str:
    """A Target's short form for reprs: kind, CPU and fingerprint (Target.describe() has every fact)."""
    if all(hasattr(target, a) for a in ("kind", "cpu", "fingerprint")):
        return f"{target.kind} {target.cpu} {target.fingerprint}"
    return repr(target)


_IN, _OUT, _INPLACE, _INPLACE_READ, _STACK_IN, _STACK_OUT = range(6)  # how a kernel parameter is passed


class Program:
    def __init__(self, graph: Graph, kernels: list[Kernel], target: str):
        self.graph, self.kernels, self.target = graph, kernels, target
        self._in_index = {n: i for i, n in enumerate(graph.inputs)}
        self._written = set(graph.inplace_targets())
        # what a call checks, passes and returns, worked out once: right after the caches were
        # swept, each Python step of a call is a miss (bert ~4253: ~60 us checking 11 inputs,
        # ~105 us taking 7 outputs, against 3 us warm)
        self._expect = [(n, dtypes.to_numpy(graph.tensors[n].dtype), graph.tensors[n].shape, n in self._written)
                        for n in graph.inputs]
        self._outputs: list[tuple[tuple, np.dtype, int]] = []  # every kernel output of a call, in order
        self._stacks: list[tuple[tuple, np.dtype, int]] = []  # every stacked input a call fills, in order
        self._plans = [(k.unchecked, [self._plan(k, p) for p in k.params]) for k in kernels]
        self._results = [(n, graph.tensors[n].dtype, graph.tensors[n].shape) for n in graph.real_outputs]
        self._pool = OutputPool()
        self._pool_lock = threading.Lock()
        self._last: list[np.ndarray] = []  # the previous call's output arrays (see _outputs_for_call)
        self._owners: list[list] = []  # each one's [memory owner, its references when it was new]
        # in-place targets' input indices, and the inputs each could overlap (every other one)
        self._targets = [i for i, n in enumerate(graph.inputs) if n in self._written]
        self._calls = 0
        self._copies: Counter = Counter()  # (tensor, what was done, why) -> calls
        self._last_copies: list[tuple[str, str, str]] = []

    def _plan(self, k: Kernel, p: Param) -> tuple:
        """How `p` is passed: (kind, index (an input's in graph.inputs, an output's in
        `_outputs`), p, whether the array needs a storage view of another shape)."""
        if p.kind == "output":
            dt = np.dtype(p.dtype)
            self._outputs.append((p.shape, dt, int(np.prod(p.shape, dtype=np.int64)) * dt.itemsize))
            return (_STACK_OUT if p.members else _OUT), len(self._outputs) - 1, p, False
        if p.members:
            return self._plan_stack(p)
        i = self._in_index[p.tensor]
        t = self.graph.tensors[p.tensor]
        reshaped = t.dtype in dtypes.COMPLEX_PART or tuple(t.shape) != tuple(p.shape)
        if p.kind == "input":
            return _IN, i, p, reshaped
        return (_INPLACE if p.tensor not in k.reads else _INPLACE_READ), i, p, reshaped

    def _plan_stack(self, p: Param) -> tuple:
        """A stacked input (te/abi.py): (_STACK_IN, (its buffer's index in `_stacks`, the members'
        input indices, the stack as an array of the members' dtype and graph shape), p, whether a
        member needs reshaping to that shape)."""
        dt = np.dtype(p.dtype)
        self._stacks.append((p.shape, dt, int(np.prod(p.shape, dtype=np.int64)) * dt.itemsize))
        t = self.graph.tensors[p.members[0]]
        shape = p.shape[1:-1] if t.dtype in dtypes.COMPLEX_PART else p.shape[1:]
        reshaped = any(self.graph.tensors[n].shape != shape for n in p.members)
        view = (dtypes.to_numpy(t.dtype), (len(p.members), *shape))
        return _STACK_IN, (len(self._stacks) - 1, [self._in_index[n] for n in p.members], view), p, reshaped

    def source(self) -> str:
        return "\n\n".join(f"// kernel {k.name}\n{k.source}" for k in self.kernels)

    def explain(self, *, timeout_s: float = 10.0) -> str:
        """Per kernel: schedule path, statements, dependences, isl schedule tree, loop nest."""
        return "\n\n".join(k.explain(timeout_s=timeout_s) for k in self.kernels)

    def __repr__(self) -> str:
        return f"Program({self.graph.name!r}, {len(self.kernels)} kernel(s), target={target_label(self.target)})"

    def _check(self, arrays: Sequence[Any]) -> list[np.ndarray]:
        g = self.graph
        if len(arrays) != len(g.inputs):
            raise ArgumentError(f"{g.name} takes {len(g.inputs)} inputs ({', '.join(g.inputs)}), got {len(arrays)}")
        out = []
        for (name, want, shape, written), x in zip(self._expect, arrays):
            a = x if type(x) is np.ndarray else as_numpy(x, name)
            if a.dtype != want:
                raise ArgumentError(f"dtype {a.dtype} does not match the graph's {g.tensors[name].dtype}", tensor=name)
            if a.shape != shape:
                raise ArgumentError(f"shape {list(a.shape)} does not match the graph's {list(shape)}", tensor=name)
            if written and not a.flags.writeable:
                raise ArgumentError("array is read-only but receives an in-place (InplaceAssign/Assign) result",
                                    tensor=name)
            out.append(a)
        return out

    def _outputs_for_call(self) -> list[np.ndarray]:
        """This call's output arrays: each of the previous call's that no one else references
        any more, itself, else one from the pool. After the caches went cold between calls,
        taking 7 outputs from the pool (its reclaim pass, then a view built on each buffer) cost
        ~80-100 us a call (bert ~4253, ~3896); handing back the same arrays costs two reference
        counts and a look at the array each. Both the array and the memory it views are counted:
        a caller's slice of it references the memory's owner (numpy collapses a view's base),
        not the array. A dropped array the caller changed in place (made read-only, reshaped,
        given another dtype or other memory) is not handed out again."""
        last = self._last
        if len(last) != len(self._outputs):
            self._last = last = self._pool.take_all(self._outputs)
            self._owners = [[None, 0] for _ in last]
            for i in range(len(last)):
                self._track(i)
            return last
        for i, (shape, dtype, _) in enumerate(self._outputs):
            entry = self._owners[i]
            owner = entry[0]
            if sys.getrefcount(last[i]) > 2 or sys.getrefcount(owner) > entry[1] or last[i].base is not owner \
                    or last[i].shape != shape or last[i].dtype != dtype or not last[i].flags.carray:
                last[i], = self._pool.take_all([self._outputs[i]])
                self._track(i)
        return last

    def _track(self, i: int) -> None:
        """Remember output i's memory owner and its reference count now, counted the way
        _outputs_for_call counts it (this entry and a local name hold it too)."""
        entry = self._owners[i]
        entry[0] = owner = self._last[i].base
        entry[1] = sys.getrefcount(owner)

    def _overlapping(self, args: list[np.ndarray]) -> set[int]:
        """Input indices of the in-place targets that share memory with another argument (those
        are written apart); two targets that overlap are refused: which write would win?"""
        hit = set()
        for t in self._targets:
            for j, other in enumerate(args):
                if j != t and np.may_share_memory(args[t], other):
                    if j in self._targets:
                        names = self.graph.inputs
                        raise ArgumentError(f"in-place targets {names[t]!r} and {names[j]!r} share memory: "
                                            "each receives its own result, pass separate arrays", tensor=names[t])
                    hit.add(t)
        return hit

    def __call__(self, *arrays: Any) -> tuple[np.ndarray, ...]:
        args = self._check(arrays)
        overlap = self._overlapping(args) if self._targets else ()
        with self._pool_lock:
            # a copy taken under the lock: its references mark the arrays in use, so a call
            # running alongside takes other ones
            outs = list(self._outputs_for_call())
            # stacks from the pool: a call running alongside fills other ones
            stacks = self._pool.take_all(self._stacks) if self._stacks else ()
            self._calls += 1
        copies = []
        results: dict[str, np.ndarray] = {}
        for func, plan in self._plans:
            call_args, writebacks, n_params = [], [], len(plan)
            for kind, i, p, reshaped in plan:
                if kind == _STACK_OUT:  # the caller gets views of the stack: no copy
                    buf = outs[i]
                    results.update((n, buf[j]) for j, n in enumerate(p.members))
                    call_args.append(buf)
                    continue
                if kind == _STACK_IN:
                    slot, members, (dtype, shape) = i
                    buf = stacks[slot]
                    np.stack([args[m].reshape(shape[1:]) for m in members] if reshaped else [args[m] for m in members],
                             out=buf.view(dtype).reshape(shape))
                    copies.append((p.tensor, f"{len(members)} inputs copied into one stacked array",
                                   f"the kernel takes them as one parameter (it would have {len(p.members) + n_params - 1})"))
                    call_args.append(buf)
                    continue
                if kind == _OUT:
                    results[p.tensor] = buf = outs[i]
                    call_args.append(buf)
                    continue
                a = args[i]
                if kind == _IN:
                    if not a.flags.carray:
                        copies.append((p.tensor, "input copied", why_copied(a)))
                        a = as_aligned_copy(a)
                elif kind == _INPLACE_READ or i in overlap or not a.flags.carray:
                    # written apart, then copied into the caller's array: the kernel also reads the
                    # target elsewhere, another argument shares its memory, or its layout is not one
                    # a kernel can write
                    if kind != _INPLACE_READ:
                        copies.append((p.tensor, "in-place result written apart and copied back",
                                       "overlaps another argument" if i in overlap else why_copied(a)))
                    buf = aligned_empty(p.shape, p.dtype)
                    writebacks.append((a, buf))
                    call_args.append(buf)
                    continue
                call_args.append(as_storage(a, p) if reshaped else a)
            func(*call_args)
            for dst, buf in writebacks:
                np.copyto(dst, buf.view(dst.dtype).reshape(dst.shape) if dst.dtype.kind == "c" else buf.reshape(dst.shape))
        if copies or self._last_copies:
            with self._pool_lock:
                self._copies.update(copies)
                self._last_copies = copies
        return tuple(_from_storage(results[n], dtype, shape) for n, dtype, shape in self._results)

    def report(self) -> str:
        """The kernel(s) and what each argument requires, then what the calls so far did: which
        arguments went to the kernel as they were and which were copied, and why."""
        lines = [repr(self)]
        for k in self.kernels:
            sp = k.schedule_path
            why = [f"fell back: {sp.fallback}"] if sp.fallback else []
            why += [f"isl's tree as is: {sp.isl_tree_as_is}"] if sp.isl_tree_as_is else []
            why += [f"{sp.dropped_marks} parallel/vector mark(s) dropped"] if sp.dropped_marks else []
            lines.append(f"kernel {k.name}: schedule {sp.path}" + (f" ({'; '.join(why)})" if why else ""))
            for p in k.params:
                need = ("allocated by akgpy, 64-byte aligned" if p.kind == "output"
                        else f"passed in place when C-contiguous and writable ({p.align}-byte aligned, as numpy aligns {p.dtype})")
                if p.members:
                    need = (f"{len(p.members)} outputs stacked in one array allocated by akgpy, 64-byte aligned, "
                            "each returned as a view of it (no copy)" if p.kind == "output"
                            else f"{len(p.members)} inputs stacked: copied on every call into one array allocated "
                                 f"by akgpy (a kernel has at most {_max_params()} parameters)")
                lines.append(f"  {p.kind:7} {p.tensor}: {p.dtype}{list(p.shape)}, {need}")
        lines.append(f"calls: {self._calls}")
        if not self._copies:
            lines.append("copies: none (every argument went to the kernel in place)" if self._calls else "copies: none yet")
        else:
            lines.append("copies, over all calls (tensor: what, why: calls):")
            lines += [f"  {t}: {what}, {why}: {n}" for (t, what, why), n in sorted(self._copies.items())]
            last = self._last_copies
            lines.append("last call: " + ("; ".join(f"{t} {what} ({why})" for t, what, why in last) if last
                                          else "every argument in place"))
        return "\n".join(lines)


def _max_params() -> int:
    from ..te.abi import MAX_KERNEL_PARAMS
    return MAX_KERNEL_PARAMS


def _from_storage(buf: np.ndarray, dtype: str, shape: tuple) -> np.ndarray:
    """The graph's view of an output buffer: complex from float pairs, the graph's shape where
    the kernel ran on collapsed dims (graph/collapse.py)."""
    if dtype in dtypes.COMPLEX_PART:
        return buf.view(dtypes.to_numpy(dtype)).reshape(buf.shape[:-1])
    return buf if buf.shape == shape else buf.reshape(shape)
