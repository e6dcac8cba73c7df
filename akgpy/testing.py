"""Helpers shared by the tests and the bench: valid random inputs, AKG's tolerance rule,
and a checker that runs a compiled program against the numpy reference."""
from __future__ import annotations

import ctypes
import mmap
import re
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from . import dtypes, reference
from .graph.ir import Graph
from .ops.registry import canonical

# Ops whose fp16 result involves no rounding (AKG's precision_analyze exemption list).
ROUNDING_FREE = frozenset({"Minimum", "Maximum", "Reshape", "ZerosLike", "Tile", "Select", "InplaceAssign",
                           "Greater", "SelectGT", "SelectLT", "LessEqual", "Less", "EquivFormat", "ExpandDims",
                           "Transpose", "TransData", "BroadcastTo", "Assign"})


def atomic_targets(g: Graph) -> set[str]:
    """Inputs that receive an atomic-add ReduceSum: MindSpore zeroes them before the kernel."""
    producers = {o: op for op in g.ops for o in op.outputs}
    out = set()
    for op in g.ops:
        if op.name == "InplaceAssign":
            p = producers.get(op.inputs[1])
            if p is not None and p.name == "ReduceSum" and p.attrs.get("enable_atomic_add", False):
                out.add(op.inputs[0])
    return out


# Ops through which a required sign passes to every operand unchanged (sum/product of
# same-signed values keeps the sign; layout ops only move values).
_SIGN_KEEPING = frozenset({"Cast", "Reshape", "Transpose", "BroadcastTo", "PadAkg", "UnPadAkg", "Add",
                           "AddN", "Maximum", "Minimum", "ReduceSum", "ReduceMax"})


def required_signs(g: Graph) -> dict[str, int]:
    """+1/-1 for tensors whose sign a later op needs (Log/Sqrt/Rsqrt/Reciprocal arguments,
    RealDiv divisors, Pow bases), propagated back to the graph inputs; first need wins."""
    need: dict[str, int] = {}

    def want(name: str, sign: int) -> None:
        if not g.tensors[name].is_const:
            need.setdefault(name, sign)

    for op in reversed(g.ops):
        name = canonical(op.name)  # Div is RealDiv, TensorAdd is Add
        if name in ("Log", "Sqrt", "Rsqrt", "Reciprocal", "Pow"):
            want(op.inputs[0], 1)
        elif name == "RealDiv":
            want(op.inputs[1], 1)
        sign = need.get(op.outputs[0])
        if sign is None:
            continue
        if name in ("Mul", "MatMul", "Conv2D"):  # a product: the first factor carries the sign
            want(op.inputs[0], sign)
            for x in op.inputs[1:]:
                want(x, 1)
        elif name in _SIGN_KEEPING:
            for x in op.inputs:
                want(x, sign)
        elif name == "Sub":
            want(op.inputs[0], sign)
            want(op.inputs[1], -sign)
        elif name == "Neg":
            want(op.inputs[0], -sign)
        elif name == "RealDiv":
            want(op.inputs[0], sign)
        elif name == "Select":
            want(op.inputs[1], sign)
            want(op.inputs[2], sign)
        elif name in ("InplaceAssign", "Assign"):
            want(op.inputs[1], sign)
    return need


def random_inputs(g: Graph, seed: int = 0) -> list[np.ndarray]:
    """Inputs in each op's valid domain: floats of magnitude in [0.5, 1.5), positive unless
    `required_signs` says a later Log/Sqrt/Rsqrt/Reciprocal argument, divisor or Pow base
    needs this input negative (x - y under a Sqrt); ints 0/1 (masks and labels; 1/2 when the
    graph divides ints); random bools (both Select branches run); zeros for atomic-add
    targets; complex with both parts in [0.5, 1.5).

    Like AKG's generator (Gaussian around a positive mean), values are same-signed: AKG's
    tolerances (atol = rtol) bound relative error, and zero-mean data would instead measure
    the absolute cancellation error of float32 contractions, which grows with sqrt(K)."""
    rng = np.random.default_rng(seed)
    zero = atomic_targets(g)
    signs = required_signs(g)
    int_lo = 1 if any(canonical(op.name) in ("RealDiv", "Reciprocal") and g.tensors[op.outputs[0]].dtype in dtypes.INTS
                      for op in g.ops) else 0
    out = []
    for name in g.inputs:
        t = g.tensors[name]
        dt = dtypes.to_numpy(t.dtype)
        if name in zero:
            a = np.zeros(t.shape, dt)
        elif t.dtype == "bool":
            a = rng.random(t.shape) < 0.5
        elif t.dtype in dtypes.INTS:
            a = rng.integers(int_lo, int_lo + 2, size=t.shape).astype(dt)
        elif t.dtype in dtypes.COMPLEX:
            a = (rng.uniform(0.5, 1.5, t.shape) + 1j * rng.uniform(0.5, 1.5, t.shape)).astype(dt)
        else:
            a = signs.get(name, 1) * rng.uniform(0.5, 1.5, size=t.shape).astype(dt)
        out.append(np.asarray(a, dtype=dt))
    return out


def _has_fp16_ancestor(g: Graph, name: str) -> bool:
    inputs = set(g.inputs)
    for n, op in g.ancestors(name, _value_inputs):
        if g.tensors[n].dtype == "float16" and n not in inputs and op is not None and op.name not in ROUNDING_FREE:
            return True
    return False


def _value_inputs(op) -> Sequence[str]:
    """The inputs an op's value comes from: an InplaceAssign's is its value (and the fake
    output's source unless marked fake), not the tensor it overwrites."""
    if op.name == "InplaceAssign":
        return [op.inputs[1]] + ([] if op.attrs.get("fake_output", False) else [op.inputs[2]])
    return op.inputs


def tolerance(g: Graph, name: str, *, value_of: str | None = None) -> float:
    """rtol = atol for one checked tensor (AKG's rule); 0 means exact."""
    t = g.tensors[name]
    if t.dtype == "float16":
        return 1e-3
    if t.dtype in ("float32", "float64", "complex64", "complex128"):
        return 1e-3 if _has_fp16_ancestor(g, value_of or name) else 1e-4
    return 0.0


@dataclass
class Mismatch:
    tensor: str
    tol: float
    max_abs: float
    bad: int
    total: int
    example: str


def compare(g: Graph, got: Sequence[np.ndarray], inputs_after: Sequence[np.ndarray],
            want: Sequence[np.ndarray], ref_inputs_after: Sequence[np.ndarray], *,
            equal_nan: bool = False) -> list[Mismatch]:
    """Compare outputs and in-place targets; returns the mismatches (empty = pass). `equal_nan`:
    a NaN the reference has too matches (inputs holding NaN); off, any NaN is a mismatch, so a
    NaN-poisoned element a kernel left unwritten shows."""
    checks = list(zip(g.real_outputs, got, want, [None] * len(want)))
    targets = g.inplace_targets()
    for tname, value in targets.items():
        k = g.inputs.index(tname)
        checks.append((tname, inputs_after[k], ref_inputs_after[k], value))
    bad = []
    for name, a, b, value_of in checks:
        tol = tolerance(g, name, value_of=value_of)
        a, b = np.asarray(a), np.asarray(b)
        if a.shape != b.shape:
            bad.append(Mismatch(name, tol, float("inf"), a.size, b.size, f"shape {a.shape} vs {b.shape}"))
            continue
        if tol == 0.0:
            ok = a == b
        else:
            ok = np.isclose(a, b, rtol=tol, atol=tol, equal_nan=equal_nan)
        if not ok.all():
            idx = np.unravel_index(np.argmin(ok), ok.shape) if ok.ndim else ()
            with np.errstate(all="ignore"):
                diff = np.abs(a.astype(np.complex128) - b.astype(np.complex128)) if a.dtype.kind == "c" else \
                    np.abs(a.astype(np.float64) - b.astype(np.float64))
            diff = diff[diff == diff]  # an all-NaN output (unwritten, poisoned) has no max
            bad.append(Mismatch(name, tol, float(diff.max()) if diff.size else float("nan"), int((~ok).sum()), ok.size,
                                f"at {tuple(int(i) for i in idx)}: got {a[idx]!r}, want {b[idx]!r}"))
    return bad


def poison(arrays: Sequence[np.ndarray]) -> None:
    """Fill arrays with values no correct kernel leaves behind: NaN for floats, 0x5A bytes for
    ints, True for bools; read-only arrays are left as they are."""
    for a in arrays:
        if not a.flags.writeable:
            continue
        if a.dtype.kind in "fc":
            a.fill(np.nan)
        elif a.dtype.kind == "b":
            a.fill(True)
        elif a.size:
            a.view(np.uint8).fill(0x5A)


def workspace_allocations(prog) -> list[str]:
    """The buffers a program's kernels get from TVM's workspace allocator (a call and a free
    each time their declaration runs), by their LLVM IR names."""
    return [name for k in prog.kernels
            for name in re.findall(r"%(\w+) = tail call ptr %\d+\(i32 1, ", k._executable.mod.inspect_source("ll"))]


def check_program(g: Graph, prog, seed: int = 0, *, fenced: bool = False) -> list[Mismatch]:
    """Run `prog` and the reference on the same random inputs; return the mismatches. `fenced`:
    through `run_fenced` (a kernel touching memory outside an argument kills the process).

    `prog` runs twice: the first call's outputs are poisoned (`poison`) and dropped, so the
    second call, which a Program hands the same output buffers, shows any element its kernels
    leave unwritten. Fresh pages are zero, and zero is what a PadAkg's padding, a ReLU or a
    mask is due, so a single call on new memory hides such a kernel."""
    inputs = random_inputs(g, seed)
    ref_inputs = [a.copy() for a in inputs]
    kin = [a.copy() for a in inputs]
    run = (lambda arrays: run_fenced(prog, arrays)) if fenced else (lambda arrays: prog(*arrays))
    first = run([a.copy() for a in inputs])
    poison(first)
    del first
    got = run(kin)
    want = reference.run(g, ref_inputs)
    return compare(g, got, kin, want, ref_inputs)


class Fence:
    """Copies of arrays that each end where a page with no access begins, after another such
    page, so that a kernel reading or writing past either end of an argument faults instead of
    touching a neighbour (the start is 64-byte aligned, so up to 63 bytes before the fence at
    the end stay reachable). Linux/POSIX only (mmap, mprotect); keep the Fence alive while its
    arrays are in use."""

    def __init__(self):
        self._maps: list[mmap.mmap] = []
        self._mprotect = ctypes.CDLL(None, use_errno=True).mprotect
        self._mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

    def __call__(self, a: np.ndarray) -> np.ndarray:
        page = mmap.PAGESIZE
        n = -(-max(a.nbytes, 1) // page) * page
        m = mmap.mmap(-1, n + 2 * page)
        self._maps.append(m)
        base = ctypes.addressof(ctypes.c_char.from_buffer(m))
        for at in (base, base + page + n):
            if self._mprotect(at, page, 0) != 0:
                raise OSError(ctypes.get_errno(), "mprotect failed")
        out = np.frombuffer(m, a.dtype, a.size, (page + n - a.nbytes) // 64 * 64).reshape(a.shape)
        out[...] = a
        return out


def run_fenced(prog, inputs: Sequence[np.ndarray]) -> tuple[np.ndarray, ...]:
    """`prog(*inputs)` with each kernel called on fenced copies (`Fence`) of its arguments,
    copied back after the call (outputs and in-place results). `prog` is a Program or a
    ModelProgram (whose steps call their kernels directly or through their own Program). A read
    or write outside an argument kills the process (SIGSEGV), so call this in a child process."""
    fence = Fence()

    def fenced(func):
        def call(*args):
            copies = [fence(a) for a in args]
            func(*copies)
            for a, c in zip(args, copies):
                if a.flags.writeable:
                    np.copyto(a, c)
        return call

    programs = [prog] if hasattr(prog, "_plans") else [st.program for st in prog.steps if st.program is not None]
    kernels = list({id(k): k for p in programs for k in p.kernels}.values())
    # Program.__call__ walks its (kernel entry, argument plan) pairs; ModelProgram calls
    # Kernel.unchecked itself
    plans, entries = [p._plans for p in programs], [k.unchecked for k in kernels]
    for p, saved in zip(programs, plans):
        p._plans = [(fenced(func), plan) for func, plan in saved]
    for k, func in zip(kernels, entries):
        k.unchecked = fenced(func)
    try:
        return prog(*inputs)
    finally:
        for p, saved in zip(programs, plans):
            p._plans = saved
        for k, func in zip(kernels, entries):
            k.unchecked = func
