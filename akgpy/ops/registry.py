"""The op table: one row per op name with its category, shape rule and semantic attrs.

Other views of an op are their own tables keyed by the same names, so that importing
one view never drags in another: the numpy reference (`akgpy.reference.REFERENCE`,
which must not import tvm) and the TE builders (`akgpy.te.builders.BUILDERS`). A test
checks that all three tables cover exactly the same names.

Semantic attrs are the ones that change what an op computes; only they enter the
structural hash. Everything else MindSpore leaves in `attr` (visited, pri_format,
is_backed_cast, x_shape, enable_atomic_add, ...) is carried for round trips only.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

from ..errors import AttrError, ShapeError, UnsupportedOpError

if TYPE_CHECKING:  # the rules read Op and Tensor records; graph/ir.py imports this table
    from ..graph.ir import Op, Tensor

NZ = "FRACTAL_NZ"  # the fractal data format, whose tensors broadcast logically (uses_logical_broadcast)


class Category(enum.IntEnum):
    # Ordered by how freely they fuse: a consumer may absorb any producer of a lower category.
    ELEMWISE = 0
    BROADCAST = 1
    LAYOUT = 2
    REDUCE = 3
    OPAQUE = 4


Rule = Callable[["Op", Sequence["Tensor"], Sequence["Tensor"]], None]


@dataclass(frozen=True)
class OpDef:
    name: str
    category: Category
    rule: Rule  # raises ShapeError/AttrError when declared outputs disagree with inputs+attrs
    n_inputs: tuple[int, int]  # inclusive bounds
    semantic_attrs: tuple[str, ...] = ()
    canonical: str | None = None  # alias target (TensorAdd -> Add)
    # No TE lowering: the op runs through the numpy fallback between kernels (model graphs only).
    fallback: bool = False

    def check(self, op: Op, ins: Sequence[Tensor], outs: Sequence[Tensor], index: int | None = None) -> None:
        lo, hi = self.n_inputs
        label = op.label(index)
        if not lo <= len(ins) <= hi:
            raise ShapeError(f"expects {lo}..{hi} inputs, got {len(ins)}", op=label,
                             tensor=outs[0].name if outs else None)
        if len(outs) != 1:
            raise ShapeError(f"expects exactly 1 output, got {len(outs)}", op=label)
        try:
            self.rule(op, ins, outs)
        except (ShapeError, AttrError) as e:
            if e.op is None:  # name the op instance so the user can find it
                raise type(e)(e.message, op=label, tensor=e.tensor or outs[0].name) from None
            raise
        except (TypeError, ValueError, KeyError, IndexError) as e:  # an attr of the wrong type or length
            raise AttrError(f"invalid attributes {dict(op.attrs)}: {type(e).__name__}: {e}", op=label,
                            tensor=outs[0].name) from None


# -- helpers -----------------------------------------------------------------------------

def broadcast_shapes(shapes: Sequence[Sequence[int]], *, tensor: str | None = None) -> tuple[int, ...]:
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for d in range(rank):
        sizes = {s[len(s) - rank + d] for s in shapes if len(s) - rank + d >= 0}
        sizes.discard(1)
        if len(sizes) > 1:
            raise ShapeError(f"shapes {[list(s) for s in shapes]} do not broadcast", tensor=tensor)
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def uses_logical_broadcast(ins: Sequence[Tensor], out: Tensor) -> bool:
    """An elementwise op that mixes FRACTAL_NZ and plain tensors broadcasts logically."""
    tensors = [t for t in [*ins, out] if not (t.is_const or t.size == 1)]
    fmts = {t.format == NZ for t in tensors}
    return len(fmts) > 1


def _expect(out: Tensor, shape, dtype, what: str = "") -> None:
    if tuple(out.shape) != tuple(shape):
        raise ShapeError(f"declared shape {list(out.shape)} but {what or 'inputs'} give {list(shape)}", tensor=out.name)
    if dtype is not None and out.dtype != dtype:
        raise ShapeError(f"declared dtype {out.dtype} but {what or 'inputs'} give {dtype}", tensor=out.name)


def _elementwise_shape(ins: Sequence[Tensor], out: Tensor) -> None:
    if uses_logical_broadcast(ins, out):
        shape = broadcast_shapes([t.logical_shape for t in ins], tensor=out.name)
        if tuple(out.logical_shape) != shape:
            raise ShapeError(f"declared logical shape {list(out.logical_shape)} but FRACTAL_NZ broadcasting "
                             f"gives {list(shape)}", tensor=out.name)
        return
    shape = broadcast_shapes([t.shape for t in ins], tensor=out.name)
    if tuple(out.shape) != shape and (out.size != math.prod(shape) or squeeze(out.shape) != squeeze(shape)):
        _expect(out, shape, None)  # a declared shape differing only in unit dims is a view: allowed




def squeeze(shape) -> tuple[int, ...]:
    """The shape without its unit dims: two shapes with equal squeezes are views of one layout."""
    return tuple(s for s in shape if s != 1)


def _same_dtype(ins: Sequence[Tensor], out: Tensor | None = None) -> str:
    real = [t for t in ins if not t.is_const]
    kinds = {t.dtype for t in real}
    if len(kinds) > 1:
        raise ShapeError(f"operand dtypes differ: {[f'{t.name}:{t.dtype}' for t in real]}",
                         tensor=real[-1].name)
    return kinds.pop() if kinds else (out.dtype if out is not None else ins[0].dtype)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def normalize_axis(a, rank: int, *, tensor: str | None = None) -> int:
    """One axis in [-rank, rank) as numpy reads it, made non-negative (a rank-0 tensor takes axis 0)."""
    if not _is_int(a) or not -rank <= a < max(rank, 1):
        raise AttrError(f"axis {a!r} out of range for rank {rank}", tensor=tensor)
    return a % rank if rank else 0


def normalize_axes(axis, rank: int, *, tensor: str | None = None) -> tuple[int, ...]:
    """An int or a list of ints -> sorted distinct non-negative axes; [] means every axis. An axis
    named twice (1 and -1) is reduced once, as AKG and onnxruntime read it."""
    if _is_int(axis):
        return (normalize_axis(axis, rank, tensor=tensor),)
    if not isinstance(axis, (list, tuple)):
        raise AttrError(f"axis must be an int or a list of ints, got {axis!r}", tensor=tensor)
    if not axis:
        return tuple(range(rank))
    return tuple(sorted({normalize_axis(a, rank, tensor=tensor) for a in axis}))


def reduce_axes(op: Op, x: Tensor) -> tuple[int, ...]:
    return normalize_axes(op.attr("axis", []), len(x.shape), tensor=x.name)


def _flag(op: Op, key: str) -> bool:
    """A bool attr (default False); a string "false" or a 2 is not read as True."""
    v = op.attr(key, False)
    if not isinstance(v, bool):
        raise AttrError(f"attribute {key!r} must be a bool, got {v!r:.40}")
    return v


def _int_list(op: Op, key: str, default=...) -> tuple[int, ...]:
    v = op.attr(key, default)
    if _is_int(v):
        v = [v]
    if not isinstance(v, (list, tuple)) or not all(_is_int(x) for x in v):
        raise AttrError(f"attribute {key!r} must be a list of ints, got {v!r}")
    return tuple(v)


# -- shape rules -------------------------------------------------------------------------

def unary(op, ins, outs):
    _expect(outs[0], ins[0].shape, ins[0].dtype)


def binary(op, ins, outs):
    _elementwise_shape(ins, outs[0])
    dt = _same_dtype(ins, outs[0])
    if outs[0].dtype != dt:
        raise ShapeError(f"declared dtype {outs[0].dtype} but operands are {dt}", tensor=outs[0].name)


def compare(op, ins, outs):
    _elementwise_shape(ins, outs[0])
    _same_dtype(ins)
    # Ascend graphs declare some comparisons as float16/float32: the result is then 1 or 0 in that dtype.


def select(op, ins, outs):
    _elementwise_shape(ins, outs[0])
    # A non-bool condition (Ascend's float masks) selects where it is nonzero.
    dt = _same_dtype(ins[1:], outs[0])
    if outs[0].dtype != dt:
        raise ShapeError(f"declared dtype {outs[0].dtype} but branches are {dt}", tensor=outs[0].name)


def cast(op, ins, outs):
    dst = op.attr("dst_type", outs[0].dtype)
    _expect(outs[0], ins[0].shape, dst, "dst_type")


def addn(op, ins, outs):
    binary(op, ins, outs)


def broadcast_to(op, ins, outs):
    shape = _int_list(op, "shape", list(outs[0].shape))
    target = broadcast_shapes([ins[0].shape, shape], tensor=outs[0].name)
    if target != tuple(shape):
        raise ShapeError(f"{list(ins[0].shape)} cannot broadcast to {list(shape)}", tensor=outs[0].name)
    _expect(outs[0], shape, ins[0].dtype)


def reshape(op, ins, outs):
    if ins[0].size != outs[0].size:
        raise ShapeError(f"reshape of {list(ins[0].shape)} ({ins[0].size} elements) to "
                         f"{list(outs[0].shape)} ({outs[0].size})", tensor=outs[0].name)
    _expect(outs[0], outs[0].shape, ins[0].dtype)


def transpose(op, ins, outs):
    perm = _int_list(op, "perm")
    if sorted(perm) != list(range(len(ins[0].shape))):
        raise AttrError(f"perm {list(perm)} is not a permutation of rank {len(ins[0].shape)}")
    _expect(outs[0], [ins[0].shape[p] for p in perm], ins[0].dtype, "perm")


def reduce(op, ins, outs):
    x = ins[0]
    axes = reduce_axes(op, x)
    keep = op.attr("keep_dims", False)
    if not isinstance(keep, bool):
        raise AttrError(f"keep_dims must be a bool, got {keep!r}")
    size = 1
    for d, s in enumerate(x.shape):
        if d not in axes:
            size *= s
    if outs[0].size != size:
        raise ShapeError(f"reducing {list(x.shape)} over {list(axes)} leaves {size} elements, declared "
                         f"{list(outs[0].shape)}", tensor=outs[0].name)
    _expect(outs[0], outs[0].shape, x.dtype)


def _check_write(a: Tensor, b: Tensor) -> None:
    """InplaceAssign/Assign: value b must fill target buffer a exactly."""
    if a.is_const:
        raise ShapeError("the in-place target must be a buffer, not a constant", tensor=a.name)
    if b.size != a.size and not b.is_const:
        raise ShapeError(f"value {list(b.shape)} does not fit target {list(a.shape)}", tensor=b.name)
    if b.dtype != a.dtype:
        raise ShapeError(f"value dtype {b.dtype} differs from target dtype {a.dtype}", tensor=b.name)


def inplace_assign(op, ins, outs):
    a, b, c = ins
    _flag(op, "fake_output")
    _check_write(a, b)
    if outs[0].size != c.size or outs[0].dtype != c.dtype:
        raise ShapeError(f"output must equal the pass-through {c.name}: {c.dtype}{list(c.shape)}",
                         tensor=outs[0].name)


def assign(op, ins, outs):
    a, b = ins
    _check_write(a, b)
    if _flag(op, "fake_output"):  # a placeholder slot (MindSpore 2.x): never written, any shape
        if outs[0].dtype != a.dtype:
            raise ShapeError(f"placeholder output dtype {outs[0].dtype} differs from {a.dtype}", tensor=outs[0].name)
        return
    _expect(outs[0], a.shape, a.dtype)


def matmul_dims(op: Op, a: Tensor, b: Tensor):
    """(batch, M, K, N) of C = op(A) @ op(B), in logical (non-fractal) coordinates."""
    ta, tb = _flag(op, "transpose_a"), _flag(op, "transpose_b")
    la, lb = a.logical_shape, b.logical_shape
    if len(la) < 2 or len(la) != len(lb):
        raise ShapeError(f"operands need equal rank >= 2, got {list(la)} and {list(lb)}", tensor=b.name)
    if la[:-2] != lb[:-2]:
        raise ShapeError(f"batch dims differ: {list(la[:-2])} vs {list(lb[:-2])}", tensor=b.name)
    m, ka = (la[-1], la[-2]) if ta else (la[-2], la[-1])
    kb, n = (lb[-1], lb[-2]) if tb else (lb[-2], lb[-1])
    if ka != kb:
        raise ShapeError(f"contraction sizes differ: {ka} vs {kb}", tensor=b.name)
    return tuple(la[:-2]), m, ka, n


def _contraction_dtypes(a: Tensor, b: Tensor, dst: str) -> None:
    """The dtypes whose contraction the kernel and numpy compute alike. numpy's bool @ bool is an
    OR of ANDs, a float contraction rounded to an integer is rounded once at the end, and a
    contraction into bool has no accumulator: the kernel does none of these."""
    if a.dtype == b.dtype == "bool":
        raise ShapeError("a contraction of two bool operands is not supported (numpy computes an OR of "
                         "ANDs, not a sum): cast an operand to a number first", tensor=b.name)
    if dst == "bool":
        raise ShapeError("a contraction into bool is not supported: contract into a number and compare",
                         tensor=b.name)
    if dst.startswith(("int", "uint")) and any(t.dtype.startswith(("float", "complex")) for t in (a, b)):
        raise ShapeError(f"a contraction of {a.dtype} and {b.dtype} operands into {dst} is not supported: "
                         f"contract into a float and Cast the result", tensor=b.name)


def matmul(op, ins, outs):
    batch, m, _, n = matmul_dims(op, ins[0], ins[1])
    dst = op.attr("dst_type", outs[0].dtype)
    out = outs[0]
    if tuple(out.logical_shape) != (*batch, m, n):
        raise ShapeError(f"declared {list(out.logical_shape)} (logical) but operands give {[*batch, m, n]}",
                         tensor=out.name)
    if out.dtype != dst:
        raise ShapeError(f"declared dtype {out.dtype} but dst_type is {dst}", tensor=out.name)
    _contraction_dtypes(ins[0], ins[1], out.dtype)
    if len(ins) == 3:
        broadcast_shapes([ins[2].shape, (*batch, m, n)], tensor=ins[2].name)


def conv2d(op, ins, outs):
    x, w = ins
    if len(x.shape) != 4 or len(w.shape) != 4:
        raise ShapeError(f"Conv2D needs NHWC data and OHWI weight, got {list(x.shape)} and {list(w.shape)}",
                         tensor=w.name)
    stride = _int_list(op, "stride", [1, 1, 1, 1])
    if len(stride) < 2:
        raise AttrError(f"stride {list(stride)} needs at least 2 entries (its last two are H and W)")
    sh, sw = stride[-2:]
    pt, pb, pl, pr = conv_pads(op)
    if any(d != 1 for d in _int_list(op, "dilation", [1, 1, 1, 1])):
        raise AttrError("Conv2D with dilation != 1 is not supported")
    groups = conv_groups(op)
    n, h, wd, c = x.shape
    h, wd = h + pt + pb, wd + pl + pr  # the padded extents the windows slide over
    o, kh, kw, c2 = w.shape
    if c % groups or o % groups:
        raise AttrError(f"groups={groups} does not divide the {c} input and {o} output channels", tensor=w.name)
    if c != c2 * groups:
        raise ShapeError(f"channels differ: data {c}, weight {c2} per group x {groups} groups", tensor=w.name)
    if sh < 1 or sw < 1 or kh > h or kw > wd:
        raise ShapeError(f"kernel {kh}x{kw} stride {sh}x{sw} does not fit {h}x{wd}", tensor=w.name)
    _expect(outs[0], (n, (h - kh) // sh + 1, (wd - kw) // sw + 1, o), op.attr("dst_type", outs[0].dtype))
    _contraction_dtypes(x, w, outs[0].dtype)


def conv_pads(op) -> tuple[int, int, int, int]:
    """Conv2D's zero padding of H and W as MindSpore's `pad_list`: (top, bottom, left, right).
    The padding is read, not stored: te/builders.py guards the input reads."""
    pads = _int_list(op, "pad_list", [0, 0, 0, 0])
    if len(pads) != 4 or any(p < 0 for p in pads):
        raise AttrError(f"pad_list {list(pads)} must be 4 non-negative ints (top, bottom, left, right)")
    return tuple(pads)


def conv_groups(op) -> int:
    """Conv2D's group count: `groups` (or MindSpore's `group`), absent or None meaning 1. Each
    group convolves C/groups input channels into O/groups outputs (groups == C: depthwise)."""
    g = op.attrs.get("groups", op.attrs.get("group", 1))
    g = 1 if g is None else g
    if not _is_int(g) or g < 1:
        raise AttrError(f"groups must be a positive int, got {g!r:.40}")
    return g


POOL_TYPES = ("max", "avg")
# "NCHW": the last two dims are pooled; "NHWC": dims 1 and 2 of rank-4 data (graph/layout.py)
POOL_FORMATS = ("NCHW", "NHWC")


def pool_extent(size: int, k: int, s: int, head: int, tail: int, ceil_mode: bool) -> int:
    """Pool2D's output extent along one dim. ceil_mode rounds the window count up, but a window
    that would start in the tail padding is dropped (ONNX's and torch's rule)."""
    if k < 1 or s < 1 or head < 0 or tail < 0:
        raise AttrError(f"kernel {k} and stride {s} must be >= 1, pads {head}/{tail} >= 0")
    if head >= k or tail >= k:
        raise AttrError(f"pads {head}/{tail} must be smaller than the kernel {k}")
    span = size + head + tail - k
    if span < 0:
        raise AttrError(f"kernel {k} does not fit the padded extent {size} + {head} + {tail}")
    d = -(-span // s) + 1 if ceil_mode else span // s + 1
    if ceil_mode and (d - 1) * s >= size + head:
        d -= 1
    return d


def pool_dims(op, h: int, w: int) -> tuple[int, int]:
    """Pool2D's output H and W (`pool_extent` per dim)."""
    kernel, stride = _int_list(op, "kernel"), _int_list(op, "stride", [1, 1])
    head, tail = _int_list(op, "pad_head", [0, 0]), _int_list(op, "pad_tail", [0, 0])
    if len(kernel) != 2 or len(stride) != 2 or len(head) != 2 or len(tail) != 2:
        raise AttrError(f"kernel {list(kernel)}, stride {list(stride)}, pad_head {list(head)} and pad_tail "
                        f"{list(tail)} must each be [h, w]")
    ceil = bool(op.attr("ceil_mode", False))
    return (pool_extent(h, kernel[0], stride[0], head[0], tail[0], ceil),
            pool_extent(w, kernel[1], stride[1], head[1], tail[1], ceil))


def pool2d(op, ins, outs):
    x = ins[0]
    if len(x.shape) < 3:
        raise ShapeError(f"Pool2D pools the last two dims of [N, C, H, W] data, got {list(x.shape)}", tensor=x.name)
    kind = op.attr("pool_type")
    if kind not in POOL_TYPES:
        raise AttrError(f"pool_type {kind!r:.40} is not one of {list(POOL_TYPES)}")
    if kind == "avg" and not x.dtype.startswith(("float", "bfloat")):
        raise ShapeError(f"an average Pool2D needs float data, got {x.dtype}", tensor=x.name)
    if x.dtype == "bool" or x.dtype.startswith("complex"):
        raise ShapeError(f"Pool2D of {x.dtype} data is not supported", tensor=x.name)
    fmt = op.attr("data_format", "NCHW")
    if fmt not in POOL_FORMATS:
        raise AttrError(f"data_format {fmt!r:.40} is not one of {list(POOL_FORMATS)}")
    if fmt == "NHWC":
        if len(x.shape) != 4:
            raise ShapeError(f"an NHWC Pool2D pools dims 1 and 2 of [N, H, W, C] data, got {list(x.shape)}",
                             tensor=x.name)
        oh, ow = pool_dims(op, *x.shape[1:3])
        _expect(outs[0], (x.shape[0], oh, ow, x.shape[3]), x.dtype)
        return
    oh, ow = pool_dims(op, *x.shape[-2:])
    _expect(outs[0], (*x.shape[:-2], oh, ow), x.dtype)


def pad(op, ins, outs):
    head, tail = _int_list(op, "head"), _int_list(op, "tail")
    x = ins[0]
    pad_val = op.attr("pad_val", 0)
    if isinstance(pad_val, bool) or not isinstance(pad_val, (int, float)):
        raise AttrError(f"pad_val must be a number, got {pad_val!r:.40}")
    if len(head) != len(x.shape) or len(tail) != len(x.shape) or min(head + tail, default=0) < 0:
        raise AttrError(f"head {list(head)} / tail {list(tail)} must be non-negative and of rank {len(x.shape)}")
    _expect(outs[0], [s + h + t for s, h, t in zip(x.shape, head, tail)], x.dtype)


def unpad(op, ins, outs):
    tail = _int_list(op, "tail")
    x = ins[0]
    if len(x.shape) < 2 or len(tail) != len(x.shape) or any(tail[:-2]) or min(tail, default=0) < 0:
        raise AttrError(f"tail {list(tail)} must be rank {len(x.shape)}, >= 0, and zero on batch dims")
    _expect(outs[0], [*x.shape[:-2], x.shape[-2] - tail[-2], x.shape[-1] - tail[-1]], x.dtype)


def one_hot(op, ins, outs):
    depth = op.attr("depth")
    axis = op.attr("axis", -1)
    idx = ins[0]
    if not _is_int(depth) or depth < 0:
        raise AttrError(f"depth must be a non-negative int, got {depth!r}")
    if idx.dtype not in ("int32", "int64", "int8", "int16", "uint8"):
        raise ShapeError(f"indices must be integers, got {idx.dtype}", tensor=idx.name)
    axis = normalize_axis(axis, len(idx.shape) + 1, tensor=outs[0].name)
    shape = list(idx.shape)
    shape.insert(axis, depth)
    _expect(outs[0], shape, None)


def complex_(op, ins, outs):
    re, im = ins
    if re.dtype != im.dtype or re.dtype not in ("float32", "float64"):
        raise ShapeError(f"Complex needs two float parts of one dtype, got {re.dtype}/{im.dtype}", tensor=im.name)
    _elementwise_shape(ins, outs[0])
    want = "complex64" if re.dtype == "float32" else "complex128"
    if outs[0].dtype != want:
        raise ShapeError(f"declared {outs[0].dtype}, Complex of {re.dtype} gives {want}", tensor=outs[0].name)


def complex_part(op, ins, outs):
    z = ins[0]
    if z.dtype not in ("complex64", "complex128"):
        raise ShapeError(f"{op.name} needs a complex input, got {z.dtype}", tensor=z.name)
    _expect(outs[0], z.shape, "float32" if z.dtype == "complex64" else "float64")


def concat(op, ins, outs):
    rank = len(ins[0].shape)
    axis = normalize_axis(op.attr("axis"), rank, tensor=outs[0].name)
    for t in ins[1:]:
        if len(t.shape) != rank or any(a != b for d, (a, b) in enumerate(zip(t.shape, ins[0].shape)) if d != axis):
            raise ShapeError(f"{list(t.shape)} does not concatenate with {list(ins[0].shape)} on axis {axis}",
                             tensor=t.name)
    shape = list(ins[0].shape)
    shape[axis] = sum(t.shape[axis] for t in ins)
    _expect(outs[0], shape, _same_dtype(ins))


def slice_shape(shape, begin, end, strides) -> tuple[int, ...]:
    """Python slice semantics per dim (negative indices count from the end, bounds clamp)."""
    if not len(begin) == len(end) == len(strides) == len(shape):
        raise AttrError(f"begin/end/strides {list(begin)}/{list(end)}/{list(strides)} need rank {len(shape)}")
    if any(s == 0 for s in strides):
        raise AttrError(f"strides {list(strides)} contain 0")
    return tuple(len(range(*slice(b, e, s).indices(n))) for n, b, e, s in zip(shape, begin, end, strides))


def slice_(op, ins, outs):
    x = ins[0]
    shape = slice_shape(x.shape, _int_list(op, "begin"), _int_list(op, "end"),
                        _int_list(op, "strides", [1] * len(x.shape)))
    _expect(outs[0], shape, x.dtype)


def gather(op, ins, outs):
    params, idx = ins
    if idx.dtype not in ("int32", "int64"):
        raise ShapeError(f"indices must be int32 or int64, got {idx.dtype}", tensor=idx.name)
    axis = normalize_axis(op.attr("axis", 0), len(params.shape), tensor=outs[0].name)
    _expect(outs[0], (*params.shape[:axis], *idx.shape, *params.shape[axis + 1:]), params.dtype)


def gather_elements(op, ins, outs):
    """ONNX GatherElements: out[i] = x[i with i[axis] replaced by indices[i]]; indices has x's
    rank and fits inside x on every other axis (so those reads stay in bounds)."""
    x, idx = ins
    if idx.dtype not in ("int32", "int64"):
        raise ShapeError(f"indices must be int32 or int64, got {idx.dtype}", tensor=idx.name)
    axis = normalize_axis(op.attr("axis", 0), len(x.shape), tensor=outs[0].name)
    if len(idx.shape) != len(x.shape) or any(i > s for d, (i, s) in enumerate(zip(idx.shape, x.shape))
                                             if d != axis):
        raise ShapeError(f"indices {list(idx.shape)} must have the rank of data {list(x.shape)} and fit "
                         f"inside it on every axis but {axis}", tensor=idx.name)
    _expect(outs[0], idx.shape, x.dtype)


def custom(op, ins, outs):
    if op.attr("func_type", None) is None:
        raise AttrError("Custom op without func_type")


E, B, L, R, O = Category.ELEMWISE, Category.BROADCAST, Category.LAYOUT, Category.REDUCE, Category.OPAQUE

_ROWS = [
    *(OpDef(n, E, unary, (1, 1)) for n in ("Neg", "Abs", "Exp", "Log", "Sqrt", "Rsqrt", "Reciprocal", "Tanh",
                                            "Erf")),
    *(OpDef(n, E, binary, (2, 2)) for n in ("Add", "Sub", "Mul", "RealDiv", "Maximum", "Minimum", "Pow")),
    OpDef("TensorAdd", E, binary, (2, 2), canonical="Add"),
    OpDef("Div", E, binary, (2, 2), canonical="RealDiv"),  # MindSpore 2.x sends it (Adam); AKG builds it as RealDiv
    *(OpDef(n, E, compare, (2, 2)) for n in ("Greater", "GreaterEqual", "Less", "LessEqual", "Equal")),
    OpDef("Select", E, select, (3, 3)),
    OpDef("Cast", E, cast, (1, 1), ("dst_type",)),
    OpDef("AddN", E, addn, (1, 1 << 16)),
    OpDef("InplaceAssign", E, inplace_assign, (3, 3), ("fake_output",)),
    OpDef("Assign", E, assign, (2, 2), ("fake_output",)),
    OpDef("Complex", E, complex_, (2, 2)),
    OpDef("CReal", E, complex_part, (1, 1)),
    OpDef("CImag", E, complex_part, (1, 1)),
    OpDef("BroadcastTo", B, broadcast_to, (1, 1), ("shape",)),
    OpDef("OneHot", B, one_hot, (3, 3), ("depth", "axis")),
    OpDef("Reshape", L, reshape, (1, 1)),
    OpDef("Transpose", L, transpose, (1, 1), ("perm",)),
    OpDef("PadAkg", L, pad, (1, 1), ("head", "tail", "pad_val")),
    OpDef("UnPadAkg", L, unpad, (1, 1), ("tail",)),
    OpDef("ReduceSum", R, reduce, (1, 1), ("axis", "keep_dims")),
    OpDef("ReduceMax", R, reduce, (1, 1), ("axis", "keep_dims")),
    OpDef("MatMul", O, matmul, (2, 3), ("transpose_a", "transpose_b", "dst_type")),
    OpDef("Conv2D", O, conv2d, (2, 2), ("stride", "pad_list", "dilation", "groups", "dst_type")),
    OpDef("Custom", O, custom, (0, 1 << 16), ("func_type", "func_name", "func_source_str")),
    OpDef("Concat", L, concat, (1, 1 << 16), ("axis",)),
    OpDef("StridedSlice", L, slice_, (1, 1), ("begin", "end", "strides")),
    OpDef("Gather", L, gather, (2, 2), ("axis",)),
    OpDef("GatherElements", L, gather_elements, (2, 2), ("axis",)),
    OpDef("Pool2D", L, pool2d, (1, 1), ("pool_type", "kernel", "stride", "pad_head", "pad_tail", "ceil_mode",
                                        "count_include_pad", "data_format")),
]
OPS: dict[str, OpDef] = {row.name: row for row in _ROWS}


def lookup(name: str, *, tensor: str | None = None) -> OpDef:
    try:
        return OPS[name]
    except KeyError:
        raise UnsupportedOpError(f"unknown op {name!r}; akgpy knows {len(OPS)} ops: {', '.join(sorted(OPS))}",
                                 op=name, tensor=tensor) from None


# alias -> the op it names (TensorAdd -> Add, Div -> RealDiv): the per-op tables (reference,
# TE builders, value ranges) hold each op once and are read through `canonical`
ALIASES: dict[str, str] = {row.name: row.canonical for row in _ROWS if row.canonical}


def canonical(name: str) -> str:
    """The op an op name stands for; an unknown name stays as it is (the caller reports it)."""
    return ALIASES.get(name, name)

