"""FusedPartition: one fused ATen partition run as an akgpy program, compiled per concrete
input shape, with tensors crossing by DLPack / torch.from_numpy (no copies where the layout
allows). A partition akgpy cannot convert, compile or run for a shape runs in torch instead,
with the reason in its PartitionReport."""
from __future__ import annotations

import threading
import weakref
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..errors import AkgpyError
from ..pipeline import compile_model
from .convert import input_key, to_graph
from .report import PartitionReport


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A CPU tensor as a numpy array over the same memory (a contiguous copy first if it is not)."""
    t = t.detach()
    if t.is_conj() or t.is_neg():
        t = t.resolve_conj().resolve_neg()
    if not t.is_contiguous():
        t = t.contiguous()
    return np.from_dlpack(t)


def to_torch(a: np.ndarray) -> torch.Tensor:
    """An array akgpy produced as a tensor over the same memory."""
    return torch.from_numpy(a)


@dataclass
class _Entry:
    program: Any  # the akgpy ModelProgram, or None: this shape runs in torch
    outputs: list  # per partition output, the program output it is (or the tensor folded at compile time)
    inputs: list[int] = field(default_factory=list)  # the partition inputs the program takes (not sizes)
    held: tuple = ()  # per input folded into the program: (its index, weakref to it, its _version then)


class FusedPartition(torch.nn.Module):
    """`held`: the partition inputs constant across calls (an inference graph's parameters and
    buffers). What the partition computes from them alone is computed once per compile and bound
    to the program; a held input replaced by another tensor, or updated in place (its `_version`
    moves), compiles the program again with the new values."""

    def __init__(self, gm: torch.fx.GraphModule, record: PartitionReport, held: tuple[int, ...] = ()):
        super().__init__()
        self.gm, self.record, self.held = gm, record, tuple(held)
        self.compiled: dict[tuple, _Entry] = {}
        self._lock = threading.Lock()

    def forward(self, *args: torch.Tensor) -> tuple:
        key = input_key(args)
        entry = self.compiled.get(key)
        if entry is None or not _current(entry, args):
            entry = self._compile(key, args)
        if entry.program is not None:
            try:
                outs = entry.program(*(to_numpy(args[i]) for i in entry.inputs))
            except Exception as e:  # never the user's error: this shape runs in torch from now on
                self._fall_back(key, f"akgpy run failed: {type(e).__name__}: {e}")
            else:
                res = [to_torch(o) for o in outs]
                return tuple(res[i] if isinstance(i, int) else i for i in entry.outputs)
        res = self.gm(*args)
        return tuple(res) if isinstance(res, (tuple, list)) else (res,)

    def _compile(self, key: tuple, args: tuple) -> _Entry:
        with self._lock:
            old = self.compiled.get(key)
            if old is not None and (old.program is None or _current(old, args)):
                return old
            consts = {i: args[i] for i in self.held if _holdable(args[i])}
            try:
                graph, outputs, inputs = to_graph(self.gm, key, self.record.name, consts)
                held = tuple((i, weakref.ref(args[i]), args[i]._version) for i in sorted(consts))
                entry = _Entry(on_torch_threads(compile_model(graph)), outputs, inputs, held)
                if old is not None:
                    self.record.programs -= 1  # this shape's program replaced, not one more
                self.record.programs += 1
            except Exception as e:  # a conversion or compile failure leaves this shape to torch
                entry = _Entry(None, [])
                if old is not None:
                    self.record.programs -= 1
                self.record.fallbacks[_label(key)] = f"{type(e).__name__}: {e}"
            self.compiled[key] = entry
            return entry

    def _fall_back(self, key: tuple, why: str) -> None:
        with self._lock:
            self.compiled[key] = _Entry(None, [])
            self.record.programs -= 1
            self.record.fallbacks[_label(key)] = why


def _holdable(t: Any) -> bool:
    # a tensor read with grad on is autograd's, and an inference tensor has no version counter
    return (isinstance(t, torch.Tensor) and not t.is_inference()
            and not (t.requires_grad and torch.is_grad_enabled()))


def _current(entry: _Entry, args: tuple) -> bool:
    """Whether the held inputs entry was compiled with are still these args, unchanged."""
    return all(ref() is args[i] and args[i]._version == v for i, ref, v in entry.held)


def on_torch_threads(program):
    """`program` with its kernels' parallel loops on torch's intra-op OpenMP threads
    (runtime/launcher.py): one pool for both, so neither spins against the other. Where that
    launcher cannot be built (no C compiler with OpenMP) the program keeps TVM's pool, with a
    warning once per process."""
    global _launcher_warned
    try:
        return program.with_launcher("openmp")
    except AkgpyError as e:
        if not _launcher_warned:
            _launcher_warned = True
            warnings.warn(f"akgpy kernels run on TVM's thread pool beside torch's: {e}", RuntimeWarning, 2)
        return program


_launcher_warned = False


def _label(key: tuple) -> str:
    return ", ".join(str(k) if isinstance(k, int) else f"{str(k[1]).removeprefix('torch.')}{list(k[0])}" for k in key)
