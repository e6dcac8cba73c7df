"""Index maps between a consumer's output coordinates and a producer's tensor coordinates.

All maps are quasi-affine (add, mul by constant, floordiv/floormod by constant), which keeps
them exact for the polyhedral model later.
"""
from __future__ import annotations

from math import prod
from typing import Sequence

from tvm import tirx

from ..errors import ShapeError
from ..graph.ir import NZ, Tensor
from ..ops.registry import broadcast_shapes, squeeze

# a tensor with this many elements has flat offsets (and coalesced loop extents) past int32
INT64_ELEMENTS = 2 ** 31


def index_dtype(shapes) -> str:
    """The dtype of every index, loop variable and extent of a kernel whose tensors have
    `shapes`: int64 when one has 2**31 elements or more, else int32 (narrower vector indices,
    and the dtype TVM's passes expect)."""
    return "int64" if any(prod(s) >= INT64_ELEMENTS for s in shapes) else "int32"


def extents(shape: Sequence[int], dtype: str) -> tuple:
    """`shape` as TE extents of `dtype`: TE's compute then gives its iterators that dtype, and
    every index built from them (a reshape's flat offset) is computed in it."""
    return tuple(tirx.IntImm(dtype, int(s)) for s in shape) if dtype == "int64" else tuple(shape)


def reshape_index(src: Sequence[int], dst: Sequence[int], idx: Sequence) -> list:
    """Index into a row-major `src` of the element at `idx` of its reshape `dst`."""
    if squeeze(src) == squeeze(dst):  # only unit dims differ: map the non-unit dims in order
        it = iter(i for i, s in zip(idx, dst) if s != 1)
        return [0 if s == 1 else next(it) for s in src]
    flat = 0
    for i, s in zip(idx, dst):
        flat = flat * s + i
    out, stride = [], 1
    strides = []
    for s in reversed(src):
        strides.append(stride)
        stride *= s
    for d, (s, st) in enumerate(zip(src, reversed(strides))):
        digit = tirx.floordiv(flat, st) if st > 1 else flat
        # the leading digit needs no mod (flat < prod(src)); TVM folds that mod into one by
        # prod(src), a literal past int32 for 2**31 elements
        out.append(0 if s == 1 else digit if d == 0 else tirx.floormod(digit, s))
    return out


def broadcast_index(src: Sequence[int], dst: Sequence[int], idx: Sequence) -> list:
    """numpy broadcasting, right aligned: unit dims of src read index 0."""
    off = len(dst) - len(src)
    out = []
    for d, s in enumerate(src):
        if d + off < 0:
            out.append(0)  # extra leading unit dims of src
        else:
            out.append(0 if s == 1 else idx[d + off])
    return out


def nz_to_logical(t: Tensor, idx: Sequence) -> list:
    *b, n1, m1, m0, n0 = idx
    _, _, sm0, sn0 = t.shape[-4:]
    return [*b, m1 * sm0 + m0, n1 * sn0 + n0]


def logical_to_nz(t: Tensor, lidx: Sequence) -> list:
    *b, m, n = lidx
    _, _, sm0, sn0 = t.shape[-4:]
    return [*b, tirx.floordiv(n, sn0), tirx.floordiv(m, sm0), tirx.floormod(m, sm0), tirx.floormod(n, sn0)]


def operand_index(src: Tensor, dst: Tensor, idx: Sequence, *, logical: bool) -> list:
    """Where element `idx` of the op's output `dst` reads operand `src`."""
    if logical:
        lidx = nz_to_logical(dst, idx) if dst.format == NZ else list(idx)
        sl = broadcast_index(src.logical_shape, dst.logical_shape, lidx)
        return logical_to_nz(src, sl) if src.format == NZ else sl
    try:
        if broadcast_shapes([src.shape, dst.shape]) == tuple(dst.shape):
            return broadcast_index(src.shape, dst.shape, idx)
    except ShapeError:
        pass
    if src.size == dst.size:
        return reshape_index(src.shape, dst.shape, idx)
    raise ShapeError(f"cannot read {list(src.shape)} at the points of {list(dst.shape)}", tensor=src.name)


def digit_groups(terms: list[tuple[int, int]], extents: list[int] | tuple[int, ...]) -> list[tuple[int, int, int]]:
    """An access's offset inside a coalesced tail as digits of the linear iterator L (mixed
    radix `extents`). `terms`: (tail dim, the operand's stride for it) of each tail dim the
    access uses. Returns (S, E, w) per digit: offset = sum of w * ((L // S) mod E), the mod
    dropped when S * E is the whole tail. Dims the operand stores contiguously in tail order
    (w_k = w_k+1 * E_k+1) merge into one digit: a [1, 52, 52, 1, 2] grid under a
    [.., 52, 52, 3, 2] tail is 104 * (L // 312) + 2 * ((L // 6) mod 52) + L mod 2, that is
    2 * (L // 6) + L mod 2."""
    groups: list[list[int]] = []  # [first dim, last dim, stride of the last]
    for k, w in terms:
        if groups and groups[-1][1] == k - 1 and groups[-1][2] == w * extents[k]:
            groups[-1][1:] = [k, w]
        else:
            groups.append([k, k, w])
    return [(prod(extents[k1 + 1:]), prod(extents[k0:k1 + 1]), w) for k0, k1, w in groups]


def repeats_every(groups: list[tuple[int, int, int]], total: int, width: int) -> bool:
    """Do the lanes of every `width`-wide vector (starting at multiples of `width`) read at the
    same offsets from their first lane? Then a vector is one contiguous load and a shuffle
    (targets/vector_loads.py), not a gather."""
    return all(width % (s * e) == 0 or (s * e == total and width % s == 0) for s, e, _ in groups)
