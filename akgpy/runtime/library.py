"""Steps of a model program that are not akgpy-generated kernels.

- library contractions: MatMul/Conv2D through numpy's BLAS (float32 accumulation, like the
  generated kernels), used where the pipeline measured them faster than akgpy's own kernel;
- fallback ops: an op table row marked `fallback` (no TE lowering; none today) runs through the
  numpy reference implementation, in float64 rounded to the declared dtype.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from .. import dtypes
from ..errors import UnsupportedOpError
from ..graph.ir import NZ, Graph, Op, Tensor
from ..reference import apply_op, const_array

Run = Callable[[Sequence[np.ndarray]], tuple]


def supports_library(op: Op, ins: Sequence[Tensor], out: Tensor) -> bool:
    """BLAS takes plain-layout float operands; anything else stays an akgpy kernel."""
    return (op.name in ("MatMul", "Conv2D") and all(t.format != NZ and t.dtype in ("float16", "float32")
                                                    for t in (*ins, out)))


def operands(g: Graph, op: Op, names: Sequence[str]) -> Callable[[Sequence[np.ndarray]], list]:
    """Maps a step's arguments (in `names` order) to the op's operand list, constants included."""
    pos = {n: k for k, n in enumerate(names)}
    consts = {t: const_array(g.tensors[t]) for t in op.inputs if t not in pos}
    return lambda args: [args[pos[t]] if t in pos else consts[t] for t in op.inputs]


def library_contraction(g: Graph, op: Op, names: Sequence[str]) -> Run:
    take = operands(g, op, names)
    ins, out = [g.tensors[t] for t in op.inputs], g.tensors[op.outputs[0]]
    if not supports_library(op, ins, out):
        raise UnsupportedOpError("no library kernel for these operands (needs plain-layout float16/float32)",
                                 op=op.name, tensor=out.name)
    dt = dtypes.to_numpy(out.dtype)
    f32 = np.float32
    if op.name == "MatMul":
        ta, tb = bool(op.attrs.get("transpose_a", False)), bool(op.attrs.get("transpose_b", False))

        def run(args):
            args = take(args)
            a, b = (x.astype(f32, copy=False) for x in args[:2])
            c = np.matmul(np.swapaxes(a, -1, -2) if ta else a, np.swapaxes(b, -1, -2) if tb else b)
            if len(args) == 3:
                c += args[2].astype(f32, copy=False)
            return (c.astype(dt, copy=False),)
        return run
    sh, sw = tuple(op.attrs.get("stride", (1, 1, 1, 1)))[-2:]
    o, kh, kw, c = g.tensors[op.inputs[1]].shape
    n, oh, ow, _ = out.shape

    pt, pb, pl, pr = op.attrs.get("pad_list", (0, 0, 0, 0))

    def conv(args):
        x, w = (a.astype(f32, copy=False) for a in take(args))
        if pt or pb or pl or pr:
            x = np.pad(x, [(0, 0), (pt, pb), (pl, pr), (0, 0)])
        wm = w.reshape(o, kh * kw * c).T
        if kh == kw == 1:
            cols = x[:, ::sh, ::sw, :][:, :oh, :ow, :]
        else:  # im2col: one (N*OH*OW, KH*KW*C) copy, then one GEMM
            win = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(1, 2))[:, ::sh, ::sw][:, :oh, :ow]
            cols = win.transpose(0, 1, 2, 4, 5, 3)  # N, OH, OW, KH, KW, C (OHWI weight order)
        y = np.ascontiguousarray(cols).reshape(n * oh * ow, kh * kw * c) @ wm
        return (y.reshape(n, oh, ow, o).astype(dt, copy=False),)
    return conv


def fallback(g: Graph, op: Op, names: Sequence[str]) -> Run:
    take = operands(g, op, names)
    ins, out = [g.tensors[t] for t in op.inputs], g.tensors[op.outputs[0]]

    def run(args):
        return (apply_op(op, take(args), ins, out),)
    return run
