"""ATen FX graph (one fused partition) -> akgpy model Graph, for concrete input shapes.

One converter per ATen overload in CONVERTERS, each writing GraphBuilder calls the way
frontends/onnx.py writes them for ONNX (softmax, layer norm and gelu expanded into primitives, so
the partitioner sees through them). A converter's result is checked against the node's FakeTensor
(`meta["val"]`): dtype cast where torch's type promotion says so, shape compared where static, so
a converter that disagrees with torch fails the conversion (and the partition runs in torch)
instead of computing something else.
"""
from __future__ import annotations

import math
import operator
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from .. import dtypes
from ..errors import AttrError, ShapeError, UnsupportedOpError
from ..graph.builder import GraphBuilder, Value
from ..graph.ir import Graph
from ..ops.registry import broadcast_shapes

aten = torch.ops.aten
prims = torch.ops.prims

# torch dtypes a fused partition takes and returns (DLPack and torch.from_numpy carry them as they are)
DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.int8: "int8", torch.uint8: "uint8",
          torch.int16: "int16", torch.int32: "int32", torch.int64: "int64", torch.bool: "bool"}


def akg_dtype(dt: torch.dtype) -> str:
    if dt not in DTYPES:
        raise ShapeError(f"torch dtype {dt} is not converted; akgpy takes {', '.join(map(str, DTYPES))}")
    return DTYPES[dt]


def _meta_like(v: Any) -> Any:
    """A stand-in for torch.result_type: a meta tensor of v's dtype and rank (rank 0 stays a
    scalar tensor, which promotes differently from a dimensioned one); a number as itself."""
    if isinstance(v, Value):
        dt = next(t for t, n in DTYPES.items() if n == v.dtype)
        return torch.empty((1,) * len(v.shape), dtype=dt, device="meta")
    return v


def _as(b: GraphBuilder, v: Any, dtype: str) -> Any:
    return b.cast(v, dtype) if isinstance(v, Value) and v.dtype != dtype else v


def _compute_dtype(x: Any, y: Any) -> str:
    return akg_dtype(torch.result_type(_meta_like(x), _meta_like(y)))


# -- converters: (builder, node's out dtype, *args, **kwargs) -> Value or tuple of Values --------

def _binary(akg: str) -> Callable:
    def conv(b, out, x, y, alpha=1):
        if alpha != 1:
            y = b.mul(y, alpha) if isinstance(y, Value) else y * alpha
        return b._binary(akg, _as(b, x, out), _as(b, y, out))
    return conv


def _compare(akg: str) -> Callable:
    def conv(b, out, x, y):
        dt = _compute_dtype(x, y)
        return b._binary(akg, _as(b, x, dt), _as(b, y, dt), "bool")
    return conv


def _unary(fn: Callable[[GraphBuilder, Value], Value]) -> Callable:
    def conv(b, out, x):
        return fn(b, _as(b, x, out))
    return conv


def _sigmoid(b: GraphBuilder, x: Value) -> Value:
    return b.div(1.0, b.add(b.exp(b.neg(x)), 1.0))


def _gelu(b, out, x, approximate="none"):
    if approximate == "tanh":
        inner = b.mul(b.add(x, b.mul(b.mul(b.mul(x, x), x), 0.044715)), math.sqrt(2.0 / math.pi))
        return b.mul(b.mul(x, 0.5), b.add(b.tanh(inner), 1.0))
    return b.mul(b.mul(x, 0.5), b.add(b.erf(b.mul(x, 1.0 / math.sqrt(2.0))), 1.0))


def _where(b, out, c, x, y):
    x, y = _as(b, x, out), _as(b, y, out)
    shape = broadcast_shapes([c.shape, x.shape, y.shape], tensor=c.name)
    c, x, y = (v if tuple(v.shape) == shape else b.broadcast_to(v, shape, v.dtype) for v in (c, x, y))
    return b.op("Select", [c, x, y], shape, out)


def _clamp(b, out, x, min=None, max=None):
    x = _as(b, x, out)
    if min is not None:
        x = b.maximum(x, min)
    if max is not None:
        x = b.minimum(x, max)
    return x


def _threshold_backward(b, out, grad, x, threshold):
    return b.select(b._binary("LessEqual", x, threshold, "bool"), 0.0, grad)


def _logical_not(b, out, x):
    # one Select: not x
    x = _as(b, x, "bool")
    return b.op("Select", [x, b._const(False, "bool"), b._const(True, "bool")], x.shape, "bool")


def _not_equal(b, out, x, y):
    return _logical_not(b, out, _compare("Equal")(b, out, x, y))


def _any(b, out, x, dim=None, keepdim=False):
    hits = b.reduce_max(b.cast(x, "float32"), _axes(dim, len(x.shape)), keepdim)
    return b._binary("Greater", hits, 0.0, "bool")


def _full_like(b, out, x, value, **kwargs):
    return b.broadcast_to(value, x.shape, out)


def _slice(b, out, x, dim=0, start=None, end=None, step=1):
    rank = len(x.shape)
    dim %= rank
    lo, hi, st = slice(start, end, step).indices(x.shape[dim])
    if (lo, hi, st) == (0, x.shape[dim], 1):
        return x
    begin, stop, strides = [0] * rank, list(x.shape), [1] * rank
    begin[dim], stop[dim], strides[dim] = lo, hi, st
    shape = list(x.shape)
    shape[dim] = len(range(lo, hi, st))
    return b.op("StridedSlice", [x], shape, x.dtype, begin=begin, end=stop, strides=strides)


def _select(b, out, x, dim, index):
    rank = len(x.shape)
    dim %= rank
    index %= x.shape[dim]
    y = _slice(b, out, x, dim, index, index + 1)
    return b.reshape(y, [s for d, s in enumerate(x.shape) if d != dim])


def _axes(dim: Any, rank: int) -> list[int] | None:
    """ATen's reduction dims: None or [] reduce every axis."""
    if dim is None or (isinstance(dim, (list, tuple)) and not dim):
        return None
    dims = dim if isinstance(dim, (list, tuple)) else [dim]
    return [d % max(rank, 1) for d in dims]


def _sum(b, out, x, dim=None, keepdim=False, *, dtype=None):
    return b.reduce_sum(_as(b, x, out), _axes(dim, len(x.shape)), keepdim)


def _mean(b, out, x, dim=None, keepdim=False, *, dtype=None):
    x = _as(b, x, out)
    axes = _axes(dim, len(x.shape))
    n = math.prod(x.shape if axes is None else [x.shape[a] for a in axes])
    return b.mul(b.reduce_sum(x, axes, keepdim), 1.0 / n)


def _amax(b, out, x, dim=(), keepdim=False):
    return b.reduce_max(x, _axes(dim, len(x.shape)), keepdim)


def _softmax(b, out, x, dim, half_to_float=False):
    x = _as(b, x, out)
    e = b.exp(b.sub(x, b.reduce_max(x, dim, keepdims=True)))
    return b.div(e, b.reduce_sum(e, dim, keepdims=True))


def _log_softmax(b, out, x, dim, half_to_float=False):
    x = _as(b, x, out)
    s = b.sub(x, b.reduce_max(x, dim, keepdims=True))
    return b.sub(s, b.log(b.reduce_sum(b.exp(s), dim, keepdims=True)))


def _softmax_backward(b, out, grad, y, dim, input_dtype):
    return b.mul(y, b.sub(grad, b.reduce_sum(b.mul(grad, y), dim, keepdims=True)))


def _log_softmax_backward(b, out, grad, y, dim, input_dtype):
    return b.sub(grad, b.mul(b.exp(y), b.reduce_sum(grad, dim, keepdims=True)))


def _layer_norm(b, out, x, normalized_shape, weight, bias, eps):
    rank = len(x.shape)
    axes = list(range(rank - len(normalized_shape), rank))
    inv_n = 1.0 / math.prod(x.shape[a] for a in axes)
    mean = b.mul(b.reduce_sum(x, axes, keepdims=True), inv_n)
    d = b.sub(x, mean)
    rstd = b.rsqrt(b.add(b.mul(b.reduce_sum(b.mul(d, d), axes, keepdims=True), inv_n), float(eps)))
    y = b.mul(d, rstd)
    if weight is not None:
        y = b.mul(y, weight)
    if bias is not None:
        y = b.add(y, bias)
    return y, mean, rstd


def _mm(b, out, x, w):
    return b.matmul(x, w)


def _addmm(b, out, bias, x, w, *, beta=1, alpha=1):
    y = b.matmul(x, w)
    if alpha != 1:
        y = b.mul(y, alpha)
    return b.add(y, bias if beta == 1 else b.mul(bias, beta))


def _view(b, out, x, shape):
    return x if list(shape) == list(x.shape) else b.reshape(x, list(shape))


def _permute(b, out, x, dims):
    perm = [d % len(x.shape) for d in dims]
    return x if perm == list(range(len(x.shape))) else b.transpose(x, perm)


def _transpose(b, out, x, d0, d1):
    rank = len(x.shape)
    perm = list(range(rank))
    if rank:
        perm[d0 % rank], perm[d1 % rank] = perm[d1 % rank], perm[d0 % rank]
    return _permute(b, out, x, perm)


def _t(b, out, x):
    return _permute(b, out, x, [1, 0]) if len(x.shape) == 2 else x


def _expand(b, out, x, size, *, implicit=False):
    lead = len(size) - len(x.shape)
    shape = [x.shape[d - lead] if s == -1 else s for d, s in enumerate(size)]
    return x if tuple(shape) == tuple(x.shape) else b.broadcast_to(x, shape, x.dtype)


def _unsqueeze(b, out, x, dim):
    rank = len(x.shape) + 1
    shape = list(x.shape)
    shape.insert(dim % rank, 1)
    return b.reshape(x, shape)


def _squeeze(b, out, x, dims=None):
    rank = len(x.shape)
    dims = range(rank) if dims is None else [d % max(rank, 1) for d in (dims if isinstance(dims, (list, tuple)) else [dims])]
    drop = {d for d in dims if rank and x.shape[d] == 1}
    return _view(b, out, x, [s for d, s in enumerate(x.shape) if d not in drop])


def _identity(b, out, x, *args, **kwargs):
    return x


def _to_copy(b, out, x, *, dtype=None, **kwargs):
    return _as(b, x, out)


def _convert_element_type(b, out, x, dtype):
    return _as(b, x, out)


def _cat(b, out, xs, dim=0):
    xs = [_as(b, v, out) for v in xs if not isinstance(v, Empty)]  # empty pieces add nothing
    axis = dim % len(xs[0].shape)
    shape = list(xs[0].shape)
    shape[axis] = sum(v.shape[axis] for v in xs)
    return b.op("Concat", xs, shape, out, axis=axis) if len(xs) > 1 else xs[0]


class Empty:
    """A tensor with no elements (an empty KV cache, batch norm's unused saved statistics): akgpy
    compiles none, so it is no graph input or output; ops that skip it (cat) drop it."""

    def __init__(self, shape: Sequence[int], dtype: str):
        self.shape, self.dtype = tuple(shape), dtype


class Unread(Empty):
    """An output akgpy does not compute because nothing reads it (max pooling's indices: support.py)."""


def _lift(b, out, x):
    return x


def _constant(b: GraphBuilder, value: np.ndarray, prefix: str) -> Value:
    """A tensor computed now (arange, a scalar tensor) as a bound input of the model graph."""
    if not value.size:
        return Empty(value.shape, dtypes.from_numpy(value.dtype))
    v = b.weight(b._fresh(prefix), value.reshape(value.shape or (1,)))  # a bound input has a dim
    return v if value.ndim else b.reshape(v, [])


def _arange(b, out, start, end=None, step=1, **kwargs):
    if end is None:
        start, end = 0, start
    return _constant(b, np.arange(start, end, step).astype(dtypes.to_numpy(out)), "arange")


def _full(b, out, size, value, **kwargs):
    return _constant(b, np.full(list(size), value, dtype=dtypes.to_numpy(out)), "full")


def _scalar_tensor(b, out, value, **kwargs):
    return _constant(b, np.array(value, dtype=dtypes.to_numpy(out)), "scalar")


def _bool_binary(combine: Callable) -> Callable:
    # of bool only (support.py): and/or as min/max of 0/1 bytes
    def conv(b, out, x, y):
        return b.cast(combine(b, _as(b, x, "int8"), _as(b, y, "int8") if isinstance(y, Value) else int(y)), "bool")
    return conv


def _gather_axis(b, x, idx, axis):
    axis %= len(x.shape)
    return b.op("Gather", [x, idx], [*x.shape[:axis], *idx.shape, *x.shape[axis + 1:]], x.dtype, axis=axis)


def _embedding(b, out, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    return _gather_axis(b, weight, indices, 0)


def _index_select(b, out, x, dim, index):
    return _gather_axis(b, x, index, dim)


def _gather(b, out, x, dim, index, *, sparse_grad=False):
    return b.op("GatherElements", [x, index], index.shape, x.dtype, axis=dim % len(x.shape))


def _index(b, out, x, indices):
    # integer index tensors on consecutive dims (support.py): one Gather on those dims merged,
    # at a linear index (torch's negative indices count from the end)
    pos = [d for d, i in enumerate(indices) if i is not None]
    if len(pos) == 1:
        return _gather_axis(b, x, indices[pos[0]], pos[0])
    p, q = pos[0], pos[-1] + 1
    shape = broadcast_shapes([indices[d].shape for d in range(p, q)], tensor=x.name)
    lin = None
    for d in range(p, q):
        i = _as(b, indices[d], "int64")
        i = b.select(b.less(i, 0), b.add(i, x.shape[d]), i)
        lin = i if lin is None else b.add(b.mul(lin, x.shape[d]), i)
    if tuple(lin.shape) != tuple(shape):
        lin = b.broadcast_to(lin, shape, lin.dtype)
    flat = b.reshape(x, [*x.shape[:p], math.prod(x.shape[p:q]), *x.shape[q:]])
    return _gather_axis(b, flat, lin, p)


def _split_with_sizes(b, out, x, sizes, dim=0):
    bounds = np.cumsum([0, *sizes])
    return tuple(_slice(b, out, x, dim, int(lo), int(hi)) for lo, hi in zip(bounds[:-1], bounds[1:]))


def _split(b, out, x, size, dim=0):
    n = x.shape[dim % len(x.shape)]
    return _split_with_sizes(b, out, x, [min(size, n - lo) for lo in range(0, n, size)], dim)


def _channel(b, v, rank):
    """A per-channel [C] vector as [1, C, 1, ...] against NC... data."""
    return b.reshape(v, [1, v.shape[0]] + [1] * (rank - 2))


def _batch_norm_eval(b, out, x, weight, bias, mean, var, momentum, eps):
    rank = len(x.shape)
    if all(isinstance(p, np.ndarray) for p in (weight, bias, mean, var) if p is not None):
        # statistics known now (ARRAY_ARGS): the normalisation folds to one scale and shift per channel
        scale = 1.0 / np.sqrt(var.astype(np.float64) + float(eps))
        if weight is not None:
            scale = scale * weight
        shift = -mean * scale + (bias if bias is not None else 0.0)
        dt = np.dtype(x.dtype)
        y = b.add(b.mul(x, _channel(b, _constant(b, scale.astype(dt), "bn_scale"), rank)),
                  _channel(b, _constant(b, shift.astype(dt), "bn_shift"), rank))
        empty = Empty([0], x.dtype)
        return y, empty, empty
    weight, bias, mean, var = (_constant(b, p, "bn") if isinstance(p, np.ndarray) else p
                               for p in (weight, bias, mean, var))
    y = b.mul(b.sub(x, _channel(b, mean, rank)), b.rsqrt(b.add(_channel(b, var, rank), float(eps))))
    if weight is not None:
        y = b.mul(y, _channel(b, weight, rank))
    if bias is not None:
        y = b.add(y, _channel(b, bias, rank))
    empty = Empty([0], x.dtype)
    return y, empty, empty


def _batch_norm_train(b, out, x, weight, bias, running_mean, running_var, training, momentum, eps):
    # batch statistics (training=True only: support.py); outputs as torch's: y, mean, rstd, and
    # the running statistics updated with the unbiased variance
    rank = len(x.shape)
    axes = [0, *range(2, rank)]
    n = math.prod(x.shape[a] for a in axes)
    mean = b.mul(b.reduce_sum(x, axes, keepdims=True), 1.0 / n)
    d = b.sub(x, mean)
    var = b.mul(b.reduce_sum(b.mul(d, d), axes, keepdims=False), 1.0 / n)
    rstd = b.rsqrt(b.add(var, float(eps)))
    y = b.mul(d, _channel(b, rstd, rank))
    if weight is not None:
        y = b.mul(y, _channel(b, weight, rank))
    if bias is not None:
        y = b.add(y, _channel(b, bias, rank))
    mean = b.reshape(mean, [x.shape[1]])
    new_mean = b.add(b.mul(running_mean, 1.0 - momentum), b.mul(mean, float(momentum)))
    new_var = b.add(b.mul(running_var, 1.0 - momentum), b.mul(var, momentum * n / max(n - 1, 1)))
    return y, mean, rstd, new_mean, new_var


def _convolution(b, out, x, w, bias, stride, padding, dilation, transposed, output_padding, groups):
    # 2-D, not transposed, dilation 1 (support.py)
    ph, pw = padding
    y = b.conv2d_nchw(x, w, stride=stride, pads=[ph, pw, ph, pw], groups=groups, weight_name=b._fresh("w"))
    if isinstance(bias, np.ndarray):
        bias = _constant(b, bias, "bias")
    return y if bias is None else b.add(y, _channel(b, bias, 4))


def _pair(v: Any, default: Any) -> list[int]:
    v = list(v) if isinstance(v, (list, tuple)) and len(v) else list(default) if isinstance(v, (list, tuple)) else [v]
    return v * 2 if len(v) == 1 else v


def _pool(b, x, kind, kernel, stride, padding, ceil_mode, count_include_pad=True):
    kernel = _pair(kernel, ())
    stride, padding = _pair(stride, kernel), _pair(padding, ())
    return b.pool2d(x, kind, kernel, stride, padding, padding, ceil_mode, count_include_pad)


def _max_pool2d(b, out, x, kernel, stride=(), padding=(0,), dilation=(1,), ceil_mode=False):
    # the indices output is not computed (support.py: only where nothing reads it)
    return _pool(b, x, "max", kernel, stride, padding, ceil_mode), Unread([0], "int64")


def _avg_pool2d(b, out, x, kernel, stride=(), padding=(0,), ceil_mode=False, count_include_pad=True,
                divisor_override=None):
    return _pool(b, x, "avg", kernel, stride, padding, ceil_mode, count_include_pad)


def _adaptive_avg_pool2d(b, out, x, output_size):
    (h, w), (oh, ow) = x.shape[-2:], output_size
    if (oh, ow) == (1, 1):
        return _mean(b, out, x, [-2, -1], True)
    if h % oh or w % ow:
        raise UnsupportedOpError(f"adaptive pooling of {h}x{w} to {oh}x{ow} has windows of unequal size")
    return _pool(b, x, "avg", [h // oh, w // ow], [h // oh, w // ow], [0, 0], False)



CONVERTERS: dict[Any, Callable] = {
    aten.add.Tensor: _binary("Add"), aten.add.Scalar: _binary("Add"),
    aten.sub.Tensor: _binary("Sub"), aten.sub.Scalar: _binary("Sub"),
    aten.rsub.Scalar: lambda b, out, x, y, alpha=1: _binary("Sub")(b, out, y, x if alpha == 1 else b.mul(x, alpha)),
    aten.mul.Tensor: _binary("Mul"), aten.mul.Scalar: _binary("Mul"),
    aten.div.Tensor: _binary("RealDiv"), aten.div.Scalar: _binary("RealDiv"),
    aten.pow.Tensor_Scalar: _binary("Pow"), aten.pow.Tensor_Tensor: _binary("Pow"), aten.pow.Scalar: _binary("Pow"),
    aten.maximum.default: _binary("Maximum"), aten.minimum.default: _binary("Minimum"),
    aten.eq.Tensor: _compare("Equal"), aten.eq.Scalar: _compare("Equal"),
    aten.gt.Tensor: _compare("Greater"), aten.gt.Scalar: _compare("Greater"),
    aten.ge.Tensor: _compare("GreaterEqual"), aten.ge.Scalar: _compare("GreaterEqual"),
    aten.lt.Tensor: _compare("Less"), aten.lt.Scalar: _compare("Less"),
    aten.le.Tensor: _compare("LessEqual"), aten.le.Scalar: _compare("LessEqual"),
    aten.ne.Tensor: _not_equal, aten.ne.Scalar: _not_equal, aten.logical_not.default: _logical_not,
    aten.bitwise_not.default: _logical_not,  # of bool only (support.py)
    aten.any.dim: _any, aten.any.dims: _any, aten.any.default: _any, aten.full_like.default: _full_like,
    aten.slice.Tensor: _slice, aten.select.int: _select,
    aten.neg.default: _unary(GraphBuilder.neg), aten.abs.default: _unary(GraphBuilder.abs),
    aten.exp.default: _unary(GraphBuilder.exp), aten.log.default: _unary(GraphBuilder.log),
    aten.sqrt.default: _unary(GraphBuilder.sqrt), aten.rsqrt.default: _unary(GraphBuilder.rsqrt),
    aten.reciprocal.default: _unary(GraphBuilder.reciprocal), aten.tanh.default: _unary(GraphBuilder.tanh),
    aten.erf.default: _unary(GraphBuilder.erf), aten.relu.default: _unary(GraphBuilder.relu),
    aten.sigmoid.default: _unary(_sigmoid), aten.gelu.default: _gelu,
    aten.where.self: _where, aten.clamp.default: _clamp, aten.threshold_backward.default: _threshold_backward,
    aten.sum.dim_IntList: _sum, aten.sum.default: _sum, aten.mean.dim: _mean, aten.mean.default: _mean,
    aten.amax.default: _amax,
    aten._softmax.default: _softmax, aten._log_softmax.default: _log_softmax,
    aten._softmax_backward_data.default: _softmax_backward,
    aten._log_softmax_backward_data.default: _log_softmax_backward,
    aten.native_layer_norm.default: _layer_norm,
    aten.mm.default: _mm, aten.bmm.default: _mm, aten.addmm.default: _addmm,
    aten.view.default: _view, aten._unsafe_view.default: _view, aten.reshape.default: _view,
    aten.permute.default: _permute, aten.transpose.int: _transpose, aten.t.default: _t,
    aten.expand.default: _expand, aten.unsqueeze.default: _unsqueeze,
    aten.squeeze.default: _squeeze, aten.squeeze.dim: _squeeze, aten.squeeze.dims: _squeeze,
    aten.clone.default: _identity, aten.alias.default: _identity, aten._to_copy.default: _to_copy,
    prims.convert_element_type.default: _convert_element_type, aten.cat.default: _cat,
    aten.lift_fresh_copy.default: _lift, aten.arange.default: _arange, aten.arange.start: _arange,
    aten.arange.start_step: _arange, aten.full.default: _full, aten.scalar_tensor.default: _scalar_tensor,
    aten.bitwise_and.Tensor: _bool_binary(GraphBuilder.minimum), aten.logical_and.default: _bool_binary(GraphBuilder.minimum),
    aten.bitwise_or.Tensor: _bool_binary(GraphBuilder.maximum), aten.logical_or.default: _bool_binary(GraphBuilder.maximum),
    aten.embedding.default: _embedding, aten.index_select.default: _index_select, aten.gather.default: _gather,
    aten.index.Tensor: _index, aten.split_with_sizes.default: _split_with_sizes, aten.split.Tensor: _split,
    aten._native_batch_norm_legit_no_training.default: _batch_norm_eval,
    aten._native_batch_norm_legit_functional.default: _batch_norm_train, aten.convolution.default: _convolution,
    aten.max_pool2d_with_indices.default: _max_pool2d, aten.avg_pool2d.default: _avg_pool2d,
    aten._adaptive_avg_pool2d.default: _adaptive_avg_pool2d, aten.hardtanh.default: _clamp,
}

# ops whose converter takes an Empty operand
# per op, the positional arguments its converter also takes as numpy arrays: a folded tensor
# (to_graph's consts) reaches it as one, so the converter binds it in the form its kernel reads
# (a conv filter already OHWI) or folds arithmetic on it (batch norm's scale and shift)
ARRAY_ARGS = {aten.convolution.default: (1, 2), aten._native_batch_norm_legit_no_training.default: (1, 2, 3, 4)}

TAKES_EMPTY = (aten.cat.default, aten.lift_fresh_copy.default, aten.clone.default, aten.alias.default)

# ops that move no data in torch (views); a partition of these alone is left to torch
VIEW_OPS = (aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.permute.default,
            aten.transpose.int, aten.t.default, aten.expand.default, aten.unsqueeze.default,
            aten.squeeze.default, aten.squeeze.dim, aten.squeeze.dims, aten.alias.default, aten.clone.default)


def _settle(b: GraphBuilder, v: Any, val: Any, node: torch.fx.Node) -> Any:
    """v as torch computes it: torch's result dtype, and the shape torch infers (its static dims;
    a symbolic one is whatever this call's inputs make it)."""
    if not isinstance(val, torch.Tensor):
        return v
    if isinstance(v, Empty):
        if val.numel() != 0 and not isinstance(v, Unread):
            raise ShapeError(f"converted to nothing, torch infers {list(val.shape)}", op=str(node.target),
                             tensor=node.name)
        return v
    v = _as(b, v, akg_dtype(val.dtype))
    want = list(val.shape)
    if len(v.shape) != len(want) or any(isinstance(w, int) and w != s for w, s in zip(want, v.shape)):
        raise ShapeError(f"converted to {list(v.shape)}, torch infers {want}", op=str(node.target), tensor=node.name)
    return v


def input_key(args: Sequence[Any]) -> tuple:
    """What a partition's program is specialised on: each tensor's shape and dtype, each size
    (an int where dynamo traced a symbolic size) its value."""
    return tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else int(a) for a in args)


class Folded:
    """A tensor known at compile time: a partition input held constant (an inference graph's
    parameter or buffer) or an op computed from such tensors only, evaluated once in torch. It
    enters the graph as a bound weight where an op akgpy computes reads it."""

    def __init__(self, value: torch.Tensor):
        self.value = value
        self.bound: Any = None  # its Value in the graph, once bound


def _array(f: Folded) -> np.ndarray:
    # a copy: the program must not see later in-place updates of the parameter it came from
    return f.value.detach().resolve_conj().resolve_neg().contiguous().numpy().copy()


def _bind(b: GraphBuilder, f: Folded) -> Any:
    if f.bound is None:
        f.bound = _constant(b, _array(f), "w")
    return f.bound


def to_graph(gm: torch.fx.GraphModule, key: Sequence[Any], name: str,
             consts: Mapping[int, torch.Tensor] | None = None) -> tuple[Graph, list, list[int]]:
    """The partition `gm` as a model Graph for one `input_key`; also, per partition output, the
    graph output it is (outputs computed twice, or passed through, share a graph output) or,
    for an output computed from `consts` only, the tensor itself; and the partition inputs the
    graph takes (sizes, empty tensors and `consts` are none of them). `consts` (partition input
    index -> tensor) are constants of the program: every op reading only them runs here, once,
    in torch, and its result is bound as a weight."""
    b = GraphBuilder(name, model=True)
    env: dict[torch.fx.Node, Any] = {}
    consts = consts or {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(key):
        raise ShapeError(f"partition {name} takes {len(placeholders)} inputs, got {len(key)}")
    used = []
    for k, (node, spec) in enumerate(zip(placeholders, key)):
        if isinstance(spec, int):
            env[node] = spec
            continue
        shape, dt = spec[0], akg_dtype(spec[1])
        if math.prod(shape) == 0:
            env[node] = Empty(shape, dt)
            continue
        if k in consts:
            env[node] = Folded(consts[k])
            continue
        env[node] = b.input(f"in{k}", shape, dt)
        used.append(k)
    outs: Any = None
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            continue
        if node.op == "output":
            outs = node.args[0]
            break
        if node.op != "call_function":
            raise UnsupportedOpError(f"FX node {node.op} is not converted", tensor=node.name)
        tensors = [env[n] for n in node.all_input_nodes if not isinstance(env[n], int)]
        if tensors and all(_folded(t) for t in tensors):
            args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: _unfold(env[n]))
            with torch.no_grad():
                res = node.target(*args, **kwargs)
            env[node] = tuple(map(Folded, res)) if isinstance(res, (tuple, list)) else Folded(res)
            continue
        arrays = ARRAY_ARGS.get(node.target, ())
        args = tuple(_array(env[a]) if k in arrays and isinstance(a, torch.fx.Node) and isinstance(env[a], Folded)
                     else a for k, a in enumerate(node.args))
        args, kwargs = torch.fx.node.map_arg((args, node.kwargs), lambda n: _value(b, env[n]))
        if node.target is operator.getitem:
            env[node] = args[0][args[1]]
            continue
        conv = CONVERTERS.get(node.target)
        if conv is None:
            raise UnsupportedOpError(f"no akgpy converter for {node.target}", tensor=node.name)
        val = node.meta.get("val")
        out_dt = akg_dtype(val.dtype) if isinstance(val, torch.Tensor) else None
        if node.target not in TAKES_EMPTY and any(isinstance(env[n], Empty) for n in node.all_input_nodes):
            raise UnsupportedOpError("an input has no elements", op=str(node.target), tensor=node.name)
        try:
            res = conv(b, out_dt, *args, **kwargs)
        except (TypeError, ValueError, IndexError, KeyError, AttributeError) as e:
            raise AttrError(f"cannot convert: {type(e).__name__}: {e}", op=str(node.target), tensor=node.name) from None
        if isinstance(res, tuple):
            env[node] = tuple(_settle(b, r, m, node) for r, m in zip(res, val))
        else:
            env[node] = _settle(b, res, val, node)
    flat = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    values = [env[n] for n in flat]
    for n, v in zip(flat, values):
        if not isinstance(v, (Value, Folded)):
            raise UnsupportedOpError(f"partition output {n.name} is {type(v).__name__}, not a tensor akgpy computes",
                                     tensor=n.name)
    computed = [v for v in values if isinstance(v, Value)]
    first: dict[str, int] = {}
    for v in computed:
        first.setdefault(v.name, len(first))
    b.output(*(v for v in {v.name: v for v in computed}.values()))
    return b.build(), [first[v.name] if isinstance(v, Value) else v.value for v in values], used


def _folded(v: Any) -> bool:
    return isinstance(v, Folded) or (isinstance(v, tuple) and bool(v) and all(map(_folded, v)))


def _unfold(v: Any) -> Any:
    if isinstance(v, tuple):
        return tuple(map(_unfold, v))
    return v.value if isinstance(v, Folded) else v


def _value(b: GraphBuilder, v: Any) -> Any:
    if isinstance(v, tuple):
        return tuple(_value(b, x) for x in v)
    return _bind(b, v) if isinstance(v, Folded) else v
