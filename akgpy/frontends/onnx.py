"""ONNX -> akgpy model Graph (docs/onnx.md lists the ops).

Each node becomes akgpy primitives through a handler in HANDLERS. Composite ONNX ops
(Softmax, LayerNormalization, Gelu, Sigmoid, BatchNormalization, Gemm) expand into primitive
ops so that the partitioner sees through them. A node whose inputs are all known constants
(Shape of a static tensor, Constant, and the Gather/Slice/Concat/Unsqueeze arithmetic on
shapes) is evaluated at import with onnx's reference evaluator, so shape-computing subgraphs
fold away. Initializers become bound inputs (weights the program supplies itself).

Conv is NCHW in ONNX and NHWC/OHWI in akgpy: the input is transposed (and padded) into the
Conv2D, the weight is transposed at import, and the output is transposed back; the layout
ops fold into the neighbouring groups' index arithmetic (docs/fusion.md).
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .. import dtypes
from ..errors import AttrError, FormatError, ShapeError, UnsupportedOpError
from ..graph.builder import GraphBuilder, Value
from ..graph.ir import Graph
from ..ops.registry import broadcast_shapes, slice_shape

# ONNX ops whose outputs are computed at import when every input is a constant.
FOLDABLE = {"Shape", "Size", "Gather", "Slice", "Concat", "Unsqueeze", "Squeeze", "Reshape", "Cast", "Add", "Sub",
            "Mul", "Div", "Equal", "Where", "Range", "ConstantOfShape", "Expand", "Transpose", "Identity", "Neg",
            "Sqrt", "Pow", "ReduceProd", "Max", "Min", "Less", "Greater", "Not", "Floor", "Ceil", "Abs", "Tile",
            "And", "Or", "Xor", "Log", "GreaterOrEqual", "LessOrEqual", "IsNaN"}


def from_onnx(model: Any, shapes: Mapping[str, Sequence[int]] | None = None, *, name: str | None = None) -> Graph:
    import onnx
    proto = _load(model, onnx)
    _check_names(proto.graph)
    imp = _Importer(proto, _bindings(shapes), name)
    return imp.run()


def _bindings(shapes: Any) -> dict[str, tuple[int, ...]]:
    """`shapes=`: input name -> its dims, each a non-negative int (a bool or 2.5 is not a dim)."""
    if shapes is None:
        return {}
    if not isinstance(shapes, Mapping):
        raise ShapeError(f"shapes= must map input names to dims, got {type(shapes).__name__}")
    out = {}
    for key, dims in shapes.items():
        if not isinstance(key, str):
            raise ShapeError(f"shapes= keys must be input names, got {key!r:.40}")
        ok = isinstance(dims, (list, tuple)) and all(
            isinstance(d, (int, np.integer)) and not isinstance(d, (bool, np.bool_)) and d >= 0 for d in dims)
        if not ok:
            raise ShapeError(f"shapes= gives {dims!r:.60}; dims must be a list or tuple of non-negative ints",
                             tensor=key)
        out[key] = tuple(int(d) for d in dims)
    return out


def _load(model: Any, onnx):
    if isinstance(model, onnx.ModelProto):
        return model
    try:
        if isinstance(model, (bytes, bytearray)):
            proto = onnx.load_from_string(bytes(model))
        elif isinstance(model, (str, Path)):
            if not Path(model).is_file():
                raise FormatError(f"ONNX file not found: {model}")
            proto = onnx.load(str(model))
        else:
            raise FormatError(f"expected an onnx.ModelProto, a path or bytes, got {type(model).__name__}")
    except FormatError:
        raise
    except Exception as e:  # protobuf DecodeError and friends
        raise FormatError(f"not a valid ONNX model: {type(e).__name__}: {str(e)[:200]}") from None
    if not proto.graph.node and not proto.graph.output:
        raise FormatError("not a valid ONNX model: the graph has no nodes and no outputs")
    return proto


def _check_names(g) -> None:
    """protobuf hands a string field that is not UTF-8 over as bytes: such a name is malformed."""
    infos = [*g.input, *g.output, *g.value_info, *g.initializer]
    for n in g.node:
        for name in (n.name, n.op_type, n.domain, *n.input, *n.output):
            if not isinstance(name, str):
                raise FormatError(f"not a valid ONNX model: node name, op type or tensor name {name!r:.60} "
                                  f"is not UTF-8")
    for vi in infos:
        if not isinstance(vi.name, str):
            raise FormatError(f"not a valid ONNX model: tensor name {vi.name!r:.60} is not UTF-8")


class _Importer:
    def __init__(self, proto, shapes: dict, name: str | None):
        from onnx import numpy_helper
        self.proto, self.shapes = proto, shapes
        self.g = proto.graph
        self.b = GraphBuilder(name or self.g.name or "onnx_model", model=True)
        self.consts: dict[str, np.ndarray] = {t.name: _initializer(t, numpy_helper) for t in self.g.initializer}
        self.values: dict[str, Value] = {}
        self.node = None
        self.opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 13)

    # -- driver --------------------------------------------------------------------------
    def run(self) -> Graph:
        for shape_name in self.shapes:
            if not any(vi.name == shape_name for vi in self.g.input):
                raise ShapeError("shapes= names a tensor that is not a model input", tensor=shape_name)
        for vi in self.g.input:
            if vi.name not in self.consts:
                self._input(vi)
        produced = {vi.name for vi in self.g.input} | set(self.consts)
        for k, node in enumerate(self.g.node):
            self.node = node
            where = self._where(k)
            try:
                _single_assignment(node, produced)
                self._node(node)
            except (UnsupportedOpError, AttrError, ShapeError, FormatError) as e:
                if e.op is None or not e.op.startswith("ONNX"):
                    raise type(e)(e.message, op=where, tensor=e.tensor or (node.output[0] if node.output else None)) from None
                raise
            except (TypeError, ValueError, KeyError, IndexError) as e:
                # the schema check vouches for attribute types and input counts, not for the values
                # a malformed model holds (its constants): a handler's numpy failure on one is that
                raise FormatError(f"malformed node: {type(e).__name__}: {str(e)[:200]}", op=where,
                                  tensor=node.output[0] if node.output else None) from None
        outs = []
        for vi in self.g.output:
            if vi.name not in self.values:
                if vi.name not in self.consts:
                    raise FormatError("model output is never produced", tensor=vi.name)
                raise UnsupportedOpError("model output is a constant (it folds away at import); akgpy compiles "
                                         "outputs computed from inputs", tensor=vi.name)
            outs.append(self.values[vi.name])
        self.b.output(*outs)
        return self.b.build()

    def _where(self, k: int) -> str:
        n = self.node
        return f"ONNX {n.op_type} node {n.name or '#' + str(k)!r}"

    def _input(self, vi) -> None:
        t = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            raise UnsupportedOpError("only tensor inputs are supported", tensor=vi.name)
        dims = []
        for d in t.shape.dim:
            dims.append(d.dim_value if d.HasField("dim_value") else None)
        if vi.name in self.shapes:
            bound = self.shapes[vi.name]
            if len(bound) != len(dims) or any(d is not None and d != s for d, s in zip(dims, bound)):
                raise ShapeError(f"shapes= gives {list(bound)}, the model declares "
                                 f"{[d if d is not None else '?' for d in dims]}", tensor=vi.name)
            dims = list(bound)
        if any(d is None for d in dims):
            syms = [d.dim_param or "?" for d in t.shape.dim if not d.HasField("dim_value")]
            raise ShapeError(f"dynamic dimension(s) {syms}: bind them with from_onnx(model, shapes="
                             f"{{{vi.name!r}: (...)}})", tensor=vi.name)
        self.values[vi.name] = self.b.input(_safe(vi.name), dims, _dtype(t.elem_type, vi.name))

    def _node(self, node) -> None:
        ins = list(node.input)
        known = [n == "" or n in self.consts for n in ins]
        default_domain = node.domain in ("", "ai.onnx")
        if default_domain and (node.op_type in HANDLERS or node.op_type in FOLDABLE or node.op_type == "Constant"):
            self._check_schema(node)
        if node.op_type == "Constant":
            self._fold(node)
            return
        if node.op_type == "Shape" and ins[0] in self.values:
            shape = np.array(self.values[ins[0]].shape, dtype=np.int64)
            start, end = self._attr("start", 0), self._attr("end", None)
            self.consts[node.output[0]] = shape[start:end]
            return
        if all(known) and node.op_type in FOLDABLE:
            self._fold(node)
            return
        handler = HANDLERS.get(node.op_type)
        if handler is None or node.domain not in ("", "ai.onnx"):
            raise UnsupportedOpError(f"ONNX op {node.domain + '.' if node.domain else ''}{node.op_type} is not "
                                     f"supported; akgpy imports: {', '.join(sorted(HANDLERS))}")
        outs = handler(self, node)
        for name, v in zip(node.output, outs):
            if name and v is not None:
                self.values[name] = v

    def _check_schema(self, node) -> None:
        """The node against its ONNX schema, as onnxruntime checks it on load: attribute names and
        types, input and output counts. A handler then reads well-typed attributes."""
        from onnx import checker
        ctx = checker.C.CheckerContext()
        ctx.ir_version = max(self.proto.ir_version, 3)
        ctx.opset_imports = {"": self.opset, **{o.domain: o.version for o in self.proto.opset_import
                                                 if o.domain not in ("", "ai.onnx")}}
        try:
            checker.check_node(node, ctx, checker.C.LexicalScopeContext())
        except Exception as e:  # onnx's ValidationError, or its C++ parser's errors
            msg = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
            raise (AttrError if "attribute" in msg else FormatError)(f"invalid node: {msg}") from None

    def _fold(self, node) -> None:
        from onnx import helper
        from onnx.reference import ReferenceEvaluator
        ins = [n for n in node.input if n]
        try:
            inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(self.consts[n].dtype), None)
                      for n in ins]
            outputs = [helper.make_tensor_value_info(n, 0, None) for n in node.output]
            graph = helper.make_graph([node], "fold", inputs, outputs)
            m = helper.make_model(graph, opset_imports=list(self.proto.opset_import))
            with np.errstate(all="ignore"):  # log(0) = -inf and the like are ONNX's results, not errors
                res = ReferenceEvaluator(m).run(None, {n: self.consts[n] for n in ins})
        except Exception as e:
            raise FormatError(f"constant folding failed: {type(e).__name__}: {str(e)[:200]}") from None
        for n, v in zip(node.output, res):
            self.consts[n] = np.asarray(v)

    # -- helpers for handlers --------------------------------------------------------------
    def _attr(self, key: str, default: Any = ...):
        from onnx import helper
        for a in self.node.attribute:
            if a.name == key:
                v = helper.get_attribute_value(a)
                return v.decode() if isinstance(v, bytes) else (list(v) if isinstance(v, (list, tuple)) else v)
        if default is ...:
            raise AttrError(f"missing attribute {key!r}")
        return default

    def flag(self, key: str, default: int) -> bool:
        """A 0/1 attribute; other values are outside the spec (and onnx's own shape inference reads
        2**40 as 0, its int32 truncation)."""
        v = self._attr(key, default)
        if v not in (0, 1):
            raise AttrError(f"attribute {key!r} is a flag (0 or 1), got {v!r}")
        return bool(v)

    def rank(self, name: str) -> int:
        """A tensor's rank, without making a constant a weight as `val` does."""
        if name in self.values:
            return len(self.values[name].shape)
        return self.const(name, "operand").ndim

    def const(self, name: str, what: str) -> np.ndarray:
        if name not in self.consts and name not in self.values:
            raise FormatError("tensor is used before any node produces it", tensor=name)
        if name not in self.consts:
            raise UnsupportedOpError(f"{what} must be a constant (an initializer or computable at import)",
                                     tensor=name)
        return self.consts[name]

    def val(self, name: str, like: Value | None = None) -> Value:
        """The tensor as a graph value; a constant becomes a scalar constant or a weight."""
        if name in self.values:
            return self.values[name]
        if name not in self.consts:
            raise FormatError("tensor is used before any node produces it", tensor=name)
        arr = self.consts[name]
        if arr.size == 1 and like is not None:
            return self.b._const(arr.reshape(()).item(), dtypes.from_numpy(arr.dtype, tensor=name))
        v = self.b.weight(_safe(name) + f"_w{len(self.b._bound)}", arr)
        self.values[name] = v
        return v

    def operands(self, names: Sequence[str]) -> list:
        """Values for an elementwise op: a constant scalar operand stays a compile-time scalar."""
        like = next((self.values[n] for n in names if n in self.values), None)
        if like is None:
            return [self.val(n) for n in names]
        out = []
        for n in names:
            if n not in self.values and n in self.consts and self.consts[n].size == 1:
                out.append(self.consts[n].reshape(()).item())
            else:
                out.append(self.val(n))
        return out


def _initializer(t, numpy_helper) -> np.ndarray:
    if any(d < 0 for d in t.dims):  # numpy's reshape would read -1 as "the rest"
        raise FormatError(f"initializer dims {list(t.dims)} are negative", tensor=t.name)
    try:
        return numpy_helper.to_array(t)
    except Exception as e:  # raw_data shorter than its dims, an unknown data_type, missing external data
        raise FormatError(f"malformed initializer: {type(e).__name__}: {str(e)[:200]}", tensor=t.name) from None


def _single_assignment(node, produced: set[str]) -> None:
    """ONNX graphs assign each tensor once; a second producer is an invalid model, not a rebinding."""
    for name in node.output:
        if not name:
            continue
        if name in produced:
            raise FormatError("tensor is produced twice (an ONNX graph assigns each tensor once)", tensor=name)
        produced.add(name)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "t"


def _dtype(elem_type: int, name: str) -> str:
    from onnx import helper
    try:
        np_dt = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type))
    except Exception:
        raise ShapeError(f"ONNX element type {elem_type} has no numpy equivalent", tensor=name) from None
    return dtypes.from_numpy(np_dt, tensor=name)


# -- handlers: (importer, node) -> output values -------------------------------------------

def _binary(akg: str, dtype: str | None = None):
    def h(im: _Importer, node):
        a, b = im.operands(node.input[:2])
        return [im.b._binary(akg, a, b, dtype)]
    return h


def _variadic(akg: str):
    def h(im: _Importer, node):
        vals = im.operands(node.input)
        acc = vals[0]
        for v in vals[1:]:
            acc = im.b._binary(akg, acc, v)
        return [acc]
    return h


def _unary(fn: Callable[[GraphBuilder, Value], Value]):
    def h(im: _Importer, node):
        return [fn(im.b, im.val(node.input[0]))]
    return h


def _sigmoid(b: GraphBuilder, x: Value) -> Value:
    return b.div(1.0, b.add(b.exp(b.neg(x)), 1.0))


def _gelu(im: _Importer, node):
    b, x = im.b, im.val(node.input[0])
    approximate = im._attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise AttrError(f"Gelu approximate={approximate!r}; ONNX knows 'none' and 'tanh'")
    if approximate == "tanh":
        inner = b.mul(b.add(x, b.mul(b.mul(b.mul(x, x), x), 0.044715)), math.sqrt(2.0 / math.pi))
        return [b.mul(b.mul(x, 0.5), b.add(b.tanh(inner), 1.0))]
    return [b.mul(b.mul(x, 0.5), b.add(b.erf(b.mul(x, 1.0 / math.sqrt(2.0))), 1.0))]


def _axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise AttrError(f"axis {axis} out of range for rank {rank}")
    return axis % rank


def _softmax(im: _Importer, node):
    b, x = im.b, im.val(node.input[0])
    axis = _axis(im._attr("axis", -1 if im.opset >= 13 else 1), len(x.shape))
    if im.opset < 13 and axis != len(x.shape) - 1:
        raise UnsupportedOpError("Softmax before opset 13 flattens from `axis`; only the last axis is supported")
    e = b.exp(b.sub(x, b.reduce_max(x, axis, keepdims=True)))
    return [b.div(e, b.reduce_sum(e, axis, keepdims=True))]


def _mean(b: GraphBuilder, x: Value, axes: list[int]) -> Value:
    n = math.prod(x.shape[a] for a in axes)
    return b.mul(b.reduce_sum(x, axes, keepdims=True), 1.0 / n)


def _layernorm(im: _Importer, node):
    b, x = im.b, im.val(node.input[0])
    rank = len(x.shape)
    axes = list(range(_axis(im._attr("axis", -1), rank), rank))
    eps = float(im._attr("epsilon", 1e-5))
    mean = _mean(b, x, axes)
    d = b.sub(x, mean)
    inv = b.rsqrt(b.add(_mean(b, b.mul(d, d), axes), eps))
    y = b.mul(d, inv)
    if len(node.input) > 1 and node.input[1]:
        y = b.mul(y, im.val(node.input[1], y))
    if len(node.input) > 2 and node.input[2]:
        y = b.add(y, im.val(node.input[2], y))
    return [y, mean, inv]


def _reduce(kind: str):
    def h(im: _Importer, node):
        b, x = im.b, im.val(node.input[0])
        rank = len(x.shape)
        if len(node.input) > 1 and node.input[1]:
            axes = _int_vector(im, node.input[1], "reduction axes")
        else:
            axes = im._attr("axes", None)
        keep = im.flag("keepdims", 1)
        if not axes:
            if im.flag("noop_with_empty_axes", 0):
                return [x]
            axes = list(range(rank))
        axes = sorted({_axis(a, rank) for a in axes})  # an axis named twice is reduced once, as onnxruntime does
        if kind == "mean":
            y = _mean(b, x, axes)
            return [y if keep else b.reshape(y, [s for d, s in enumerate(x.shape) if d not in axes] or [1])]
        fn = b.reduce_sum if kind == "sum" else b.reduce_max
        return [fn(x, axes, keepdims=keep)]
    return h


def _matmul(im: _Importer, node):
    b = im.b
    x, w = im.val(node.input[0]), im.val(node.input[1])
    return [_matmul_values(b, x, w)]


def _matmul_values(b: GraphBuilder, x: Value, w: Value, ta: bool = False, tb: bool = False) -> Value:
    if len(x.shape) < 2 or len(w.shape) < 2:
        raise UnsupportedOpError(f"MatMul of rank-1 operands ({list(x.shape)} @ {list(w.shape)}) is not supported")
    if len(w.shape) == 2 and len(x.shape) > 2 and not ta:  # [..., M, K] @ [K, N]: one GEMM over all rows
        rows = math.prod(x.shape[:-1])
        y = b.matmul(b.reshape(x, [rows, x.shape[-1]]), w, transpose_b=tb)
        return b.reshape(y, [*x.shape[:-1], y.shape[-1]])
    batch = broadcast_shapes([x.shape[:-2], w.shape[:-2]], tensor=w.name)
    if tuple(x.shape[:-2]) != batch:
        x = b.broadcast_to(x, [*batch, *x.shape[-2:]])
    if tuple(w.shape[:-2]) != batch:
        w = b.broadcast_to(w, [*batch, *w.shape[-2:]])
    return b.matmul(x, w, transpose_a=ta, transpose_b=tb)


def _gemm(im: _Importer, node):
    b = im.b
    ta, tb = im.flag("transA", 0), im.flag("transB", 0)
    alpha, beta = float(im._attr("alpha", 1.0)), float(im._attr("beta", 1.0))
    wname = node.input[1]
    for name in node.input[:2]:
        if im.rank(name) != 2:
            raise ShapeError(f"Gemm operands are matrices; this one has rank {im.rank(name)}", tensor=name)
    if tb and wname in im.consts and wname not in im.values:
        # nn.Linear's [out, in] weight: transposed once here, so the kernel streams B's rows
        w = im.b.weight(_safe(wname) + "_t", np.ascontiguousarray(im.consts[wname].T))
        tb = False
    else:
        w = im.val(wname)
    y = b.matmul(im.val(node.input[0]), w, transpose_a=ta, transpose_b=tb)
    if alpha != 1.0:
        y = b.mul(y, alpha)
    if len(node.input) > 2 and node.input[2] and beta != 0.0:
        c = im.operands([node.input[2]])[0] if node.input[2] in im.values else im.val(node.input[2], y)
        y = b.add(y, b.mul(c, beta) if beta != 1.0 else c)
    return [y]


def _conv(im: _Importer, node):
    b = im.b
    x = im.val(node.input[0])
    if len(x.shape) != 4:
        raise UnsupportedOpError(f"only 2-D convolution (NCHW input) is supported, got rank {len(x.shape)}")
    if any(d != 1 for d in im._attr("dilations", [1, 1])):
        raise UnsupportedOpError(f"dilated Conv (dilations={im._attr('dilations')}) is not supported")
    wc = im.const(node.input[1], "Conv weight")
    group = im._attr("group", 1)
    if group < 1 or x.shape[1] % group or wc.ndim != 4 or wc.shape[0] % group:
        raise AttrError(f"Conv group={group} does not divide the {x.shape[1]} input channels and the "
                        f"{wc.shape[0] if wc.ndim else '?'} output channels")
    if wc.shape[1] * group != x.shape[1]:
        raise ShapeError(f"Conv weight {list(wc.shape)} is not [out, {x.shape[1] // group}, kh, kw] for input "
                         f"{list(x.shape)} in {group} group(s)", tensor=node.input[1])
    o, c, kh, kw = wc.shape
    strides, pads = list(im._attr("strides", [1, 1])), list(im._attr("pads", [0, 0, 0, 0]))
    auto = im._attr("auto_pad", "NOTSET")
    if len(strides) != 2 or min(strides) < 1 or len(pads) != 4 or min(pads) < 0:
        raise AttrError(f"Conv strides {strides} / pads {pads}: 2-D needs 2 positive strides and 4 pads >= 0")
    if auto not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
        raise AttrError(f"Conv auto_pad={auto!r} is not an ONNX auto_pad")
    if list(im._attr("kernel_shape", [kh, kw])) != [kh, kw]:
        raise AttrError(f"Conv kernel_shape {im._attr('kernel_shape')} disagrees with the weight's {[kh, kw]}")
    sh, sw = strides
    n, _, h, wd = x.shape
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        ph, pw = [max((math.ceil(s / st) - 1) * st + k - s, 0) for s, st, k in ((h, sh, kh), (wd, sw, kw))]
        lo = [p // 2 if auto == "SAME_UPPER" else p - p // 2 for p in (ph, pw)]
        pads = [lo[0], lo[1], ph - lo[0], pw - lo[1]]
    elif auto == "VALID":
        pads = [0, 0, 0, 0]
    y = b.conv2d_nchw(x, wc, stride=[sh, sw], pads=pads, groups=group, weight_name=_safe(node.input[1]))
    if len(node.input) > 2 and node.input[2]:
        bias = im.const(node.input[2], "Conv bias")
        if bias.shape != (o,):
            raise ShapeError(f"Conv bias {list(bias.shape)} is not [{o}]", tensor=node.input[2])
        y = b.add(y, b.weight(_safe(node.input[2]) + "_nchw", bias.reshape(1, o, 1, 1)))
    return [y]


def _pool(kind: str):
    """MaxPool / AveragePool over the two spatial dims of NCHW data: one Pool2D."""
    def h(im: _Importer, node):
        x = im.val(node.input[0])
        kernel = list(im._attr("kernel_shape"))
        if len(x.shape) != 4 or len(kernel) != 2:
            raise UnsupportedOpError(f"only 2-D pooling (NCHW input, 2 kernel dims) is supported, got input "
                                     f"{list(x.shape)} and kernel_shape {kernel}")
        if any(d != 1 for d in im._attr("dilations", [1, 1])):
            raise UnsupportedOpError(f"dilated pooling (dilations={im._attr('dilations')}) is not supported")
        if kind == "max" and len(node.output) > 1 and node.output[1]:
            raise UnsupportedOpError("MaxPool's Indices output is not supported")
        if x.dtype == "bool" or (kind == "avg" and not x.dtype.startswith("float")):
            raise ShapeError(f"{node.op_type} of {x.dtype} data is not supported", tensor=node.input[0])
        strides, pads = list(im._attr("strides", [1, 1])), list(im._attr("pads", [0, 0, 0, 0]))
        auto, ceil = im._attr("auto_pad", "NOTSET"), im.flag("ceil_mode", 0)
        if len(strides) != 2 or len(pads) != 4:
            raise AttrError(f"{node.op_type} strides {strides} / pads {pads}: 2-D needs 2 strides and 4 pads")
        if auto not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
            raise AttrError(f"{node.op_type} auto_pad={auto!r} is not an ONNX auto_pad")
        size = x.shape[2:]
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            if min(strides) < 1:
                raise AttrError(f"{node.op_type} strides {strides} must be >= 1")
            total = [max((math.ceil(n / s) - 1) * s + k - n, 0) for n, s, k in zip(size, strides, kernel)]
            lo = [p // 2 if auto == "SAME_UPPER" else p - p // 2 for p in total]
            pads = [lo[0], lo[1], total[0] - lo[0], total[1] - lo[1]]
        elif auto == "VALID":
            pads = [0, 0, 0, 0]
        include = im.flag("count_include_pad", 0) if kind == "avg" else False
        return [im.b.pool2d(x, kind, kernel, strides, pads[:2], pads[2:], ceil, include)]
    return h


def _global_pool(kind: str):
    def h(im: _Importer, node):
        x = im.val(node.input[0])
        if len(x.shape) < 3:
            raise ShapeError(f"{node.op_type} needs [N, C, spatial...] data, got {list(x.shape)}",
                             tensor=node.input[0])
        axes = list(range(2, len(x.shape)))
        return [_mean(im.b, x, axes) if kind == "avg" else im.b.reduce_max(x, axes, keepdims=True)]
    return h


def _clip(im: _Importer, node):
    """min(max(x, lo), hi), either bound optional: inputs from opset 11 (ReLU6 is Clip(0, 6)),
    attributes before."""
    if im.opset < 11:
        lo, hi = im._attr("min", None), im._attr("max", None)
        y = im.val(node.input[0])
    else:
        bounds = [n or None for n in [*node.input[1:3], "", ""][:2]]  # "" or absent: no bound
        for n in bounds:
            if n is not None and (n in im.consts and im.consts[n].size != 1 or
                                  n in im.values and math.prod(im.values[n].shape) != 1):
                raise ShapeError("Clip's min and max must be scalars", tensor=n)
        vals = im.operands([node.input[0], *(n for n in bounds if n is not None)])
        y, rest = vals[0], iter(vals[1:])
        lo, hi = (next(rest) if n is not None else None for n in bounds)
    if lo is not None:
        y = im.b.maximum(y, lo)
    if hi is not None:
        y = im.b.minimum(y, hi)
    return [y]


def _batchnorm(im: _Importer, node):
    b, x = im.b, im.val(node.input[0])
    if im.flag("training_mode", 0):
        raise UnsupportedOpError("BatchNormalization in training mode is not supported (inference only)")
    if len(x.shape) < 2:
        raise ShapeError(f"BatchNormalization needs [N, C, ...] data, got {list(x.shape)}", tensor=node.input[0])
    scale, bias, mean, var = (im.const(n, "BatchNormalization parameter").astype(np.float64) for n in node.input[1:5])
    for name, p in zip(node.input[1:5], (scale, bias, mean, var)):
        if p.shape != (x.shape[1],):
            raise ShapeError(f"BatchNormalization parameter {list(p.shape)} is not [{x.shape[1]}]", tensor=name)
    eps = float(im._attr("epsilon", 1e-5))
    with np.errstate(invalid="ignore", divide="ignore"):  # a negative var gives NaN, as in ONNX
        s = scale / np.sqrt(var + eps)
    t = bias - mean * s
    shape = [1, len(s)] + [1] * (len(x.shape) - 2)
    np_dt = dtypes.to_numpy(x.dtype)
    y = b.mul(x, b.weight(_safe(node.output[0]) + "_scale", s.astype(np_dt).reshape(shape)))
    return [b.add(y, b.weight(_safe(node.output[0]) + "_shift", t.astype(np_dt).reshape(shape)))]


def _reshape_to(im: _Importer, x: Value, shape: Sequence[int]) -> Value:
    return x if tuple(shape) == tuple(x.shape) else im.b.reshape(x, list(shape))


def _reshape(im: _Importer, node):
    x = im.val(node.input[0])
    spec = _int_vector(im, node.input[1], "Reshape's shape")
    allowzero = im.flag("allowzero", 0)
    if not allowzero and any(s == 0 and i >= len(x.shape) for i, s in enumerate(spec)):
        raise ShapeError(f"Reshape's shape {spec} copies a dim (0) beyond the input's rank {len(x.shape)}",
                         tensor=node.input[1])
    shape = [x.shape[i] if s == 0 and not allowzero else s for i, s in enumerate(spec)]
    if shape.count(-1) == 1:
        known = math.prod(s for s in shape if s != -1)
        shape[shape.index(-1)] = x.tensor.size // max(known, 1)
    if math.prod(shape) != x.tensor.size or any(s < 0 for s in shape):
        raise ShapeError(f"cannot reshape {list(x.shape)} to {spec}", tensor=node.input[0])
    return [_reshape_to(im, x, shape)]


def _axes_of(im: _Importer, node) -> list[int] | None:
    if len(node.input) > 1 and node.input[1]:
        return _int_vector(im, node.input[1], "axes")
    return im._attr("axes", None)


def _unsqueeze(im: _Importer, node):
    x = im.val(node.input[0])
    axes = _axes_of(im, node) or []
    rank = len(x.shape) + len(axes)
    axes = sorted(_axis(a, rank) for a in axes)
    if len(set(axes)) != len(axes):
        raise AttrError(f"Unsqueeze axes {axes} name an axis twice")
    shape, it = [], iter(x.shape)
    for d in range(rank):
        shape.append(1 if d in axes else next(it))
    return [_reshape_to(im, x, shape)]


def _squeeze(im: _Importer, node):
    x = im.val(node.input[0])
    axes = _axes_of(im, node)
    rank = len(x.shape)
    axes = [d for d, s in enumerate(x.shape) if s == 1] if not axes else [_axis(a, rank) for a in axes]
    if any(x.shape[a] != 1 for a in axes):
        raise ShapeError(f"Squeeze axes {axes} of {list(x.shape)}: only dims of size 1 can be squeezed",
                         tensor=node.input[0])
    return [_reshape_to(im, x, [s for d, s in enumerate(x.shape) if d not in axes] or [1])]


def _flatten(im: _Importer, node):
    x = im.val(node.input[0])
    rank, a = len(x.shape), im._attr("axis", 1)
    if not -rank <= a <= rank:  # the rank itself is allowed: [prod(all), 1]
        raise AttrError(f"axis {a} out of range [-{rank}, {rank}] for Flatten of rank {rank}")
    a = a + rank if a < 0 else a
    return [_reshape_to(im, x, [math.prod(x.shape[:a]), math.prod(x.shape[a:])])]


def _transpose(im: _Importer, node):
    x = im.val(node.input[0])
    perm = im._attr("perm", list(range(len(x.shape)))[::-1])
    return [x if list(perm) == list(range(len(x.shape))) else im.b.transpose(x, perm)]


def _cast(im: _Importer, node):
    x = im.val(node.input[0])
    to = _dtype(im._attr("to"), node.output[0])
    return [x if to == x.dtype else im.b.cast(x, to)]


def _where(im: _Importer, node):
    b = im.b
    c = im.val(node.input[0])
    x, y = im.operands(node.input[1:3])
    like = x if isinstance(x, Value) else y
    shape = broadcast_shapes([c.shape, *(v.shape for v in (x, y) if isinstance(v, Value))], tensor=node.output[0])
    if tuple(c.shape) != shape:
        c = b.broadcast_to(c, shape, c.dtype)
    x, y = (b._as_value(v, like) for v in (x, y))
    return [b.op("Select", [c, x, y], shape, like.dtype)]


def _expand(im: _Importer, node):
    x = im.val(node.input[0])
    spec = im.const(node.input[1], "Expand's shape")
    if spec.ndim != 1 or spec.dtype.kind not in "iu":
        raise ShapeError(f"Expand's shape must be a 1-D integer tensor, got {spec.dtype}{list(spec.shape)}",
                         tensor=node.input[1])
    shape = broadcast_shapes([x.shape, tuple(int(s) for s in spec)], tensor=node.input[1])
    return [x if tuple(shape) == tuple(x.shape) else im.b.broadcast_to(x, shape, x.dtype)]


def _identity(im: _Importer, node):
    return [im.val(node.input[0])]


def _concat(im: _Importer, node):
    vals = [im.val(n) for n in node.input]
    axis = _axis(im._attr("axis"), len(vals[0].shape))
    shape = list(vals[0].shape)
    shape[axis] = sum(v.shape[axis] for v in vals)
    return [im.b.op("Concat", vals, shape, vals[0].dtype, axis=axis)]


def _slice(im: _Importer, node):
    x = im.val(node.input[0])
    rank = len(x.shape)
    starts = _int_vector(im, node.input[1], "Slice starts")
    ends = _int_vector(im, node.input[2], "Slice ends")
    axes = _int_vector(im, node.input[3], "Slice axes") if len(node.input) > 3 and node.input[3] \
        else list(range(len(starts)))
    steps = _int_vector(im, node.input[4], "Slice steps") if len(node.input) > 4 and node.input[4] \
        else [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise AttrError(f"Slice starts/ends/axes/steps have lengths {len(starts)}/{len(ends)}/{len(axes)}/"
                        f"{len(steps)}; ONNX needs them equal")
    axes = [_axis(a, rank) for a in axes]
    if len(set(axes)) != len(axes):
        raise AttrError(f"Slice axes {axes} name an axis twice")
    if 0 in steps:
        raise AttrError(f"Slice steps {steps} contain 0")
    begin, end, stride = [0] * rank, list(x.shape), [1] * rank
    for a, s, e, st in zip(axes, starts, ends, steps):
        n = x.shape[a]
        s, e, st = slice(s, e, st).indices(n)  # clamps ONNX's INT_MAX ends
        begin[a], end[a], stride[a] = s, (e if e >= 0 else -n - 1), st
    shape = slice_shape(x.shape, begin, end, stride)
    return [im.b.op("StridedSlice", [x], shape, x.dtype, begin=begin, end=end, strides=stride)]


def _int_vector(im: _Importer, name: str, what: str) -> list[int]:
    v = im.const(name, what)
    if v.ndim != 1 or v.dtype.kind not in "iu":
        raise ShapeError(f"{what} must be a 1-D integer tensor, got {v.dtype}{list(v.shape)}", tensor=name)
    return [int(a) for a in v]


def _gather(im: _Importer, node):
    x = im.val(node.input[0])
    idx = im.const(node.input[1], "Gather indices") if node.input[1] in im.consts else None
    if idx is not None and idx.dtype.kind not in "iu":
        raise ShapeError(f"Gather indices must be integers, got {idx.dtype}", tensor=node.input[1])
    iv = im.val(node.input[1]) if idx is None else im.b.weight(_safe(node.input[1]) + "_idx",
                                                               idx.astype(np.int64).reshape(idx.shape or (1,)))
    axis = _axis(im._attr("axis", 0), len(x.shape))
    ishape = list(iv.shape)
    y = im.b.op("Gather", [x, iv], [*x.shape[:axis], *ishape, *x.shape[axis + 1:]], x.dtype, axis=axis)
    if idx is not None and idx.ndim == 0:  # a scalar index drops the axis
        y = _reshape_to(im, y, [*x.shape[:axis], *x.shape[axis + 1:]] or [1])
    return [y]


def _logical(kind: str):
    """And/Or/Xor/Not on bool tensors as Selects: elementwise, so they fuse with the mask
    arithmetic around them (the attention masks of HF exports)."""
    def h(im: _Importer, node):
        b = im.b
        for n in node.input:
            dt = im.values[n].dtype if n in im.values else dtypes.from_numpy(im.const(n, "operand").dtype, tensor=n)
            if dt != "bool":
                raise ShapeError(f"{node.op_type} takes bool tensors, got {dt}", tensor=n)
        vals = im.operands(node.input)
        if not isinstance(vals[0], Value):  # the condition must be a tensor: the ops are symmetric
            vals = vals[::-1]
        false, true = b._const(False, "bool"), b._const(True, "bool")
        if kind == "not":
            return [_select(b, vals[0], false, true, node.output[0])]
        a, o = vals[0], vals[1]
        if kind == "and":
            return [_select(b, a, o, false, node.output[0])]
        if kind == "or":
            return [_select(b, a, true, o, node.output[0])]
        if not isinstance(o, Value):
            o = b._const(bool(o), "bool")
        return [_select(b, a, _select(b, o, false, true, node.output[0]), o, node.output[0])]
    return h


def _isnan(im: _Importer, node):
    """IsNaN as not(x == x): the only value unequal to itself is NaN (the TE builders fence an
    Equal whose operands repeat, so TVM's x == x -> true fold cannot remove it). The sdpa
    attention exports guard their softmax with it."""
    x = im.val(node.input[0])
    if not x.dtype.startswith(("float", "bfloat")):
        raise ShapeError(f"IsNaN takes a floating-point tensor, got {x.dtype}", tensor=node.input[0])
    b = im.b
    return [_select(b, b._binary("Equal", x, x, "bool"), False, True, node.output[0])]

def _select(b: GraphBuilder, c: Value, x: Any, y: Any, name: str) -> Value:
    """Select(c, x, y) with numpy broadcasting; x and y are values or bool scalars."""
    x, y = (v if isinstance(v, Value) else b._const(bool(v), "bool") for v in (x, y))
    shape = broadcast_shapes([c.shape, *(v.shape for v in (x, y) if not v.tensor.is_const)], tensor=name)
    if tuple(c.shape) != shape:
        c = b.broadcast_to(c, shape, c.dtype)
    return b.op("Select", [c, x, y], shape, "bool")


def _gather_nd(im: _Importer, node):
    """GatherND with constant indices: the index tuples become row numbers of the data viewed as
    [prod(indexed dims), rest...], and the op a Gather of those rows (the mask lookups of the
    dynamo exporter). Computed indices are not supported."""
    x = im.val(node.input[0])
    idx = im.const(node.input[1], "GatherND indices")
    bd = int(im._attr("batch_dims", 0))
    rank = len(x.shape)
    if idx.dtype.kind not in "iu" or idx.ndim < 1:
        raise ShapeError(f"GatherND indices must be an integer tensor of rank >= 1, got {idx.dtype}{list(idx.shape)}",
                         tensor=node.input[1])
    k = idx.shape[-1]
    if not 0 <= bd < min(rank, idx.ndim) or bd + k > rank or tuple(idx.shape[:bd]) != tuple(x.shape[:bd]):
        raise ShapeError(f"GatherND indices {list(idx.shape)} with batch_dims={bd} do not index data "
                         f"{list(x.shape)}", tensor=node.input[1])
    dims = x.shape[bd:bd + k]
    idx = idx.astype(np.int64)
    if np.any(idx < -np.array(dims)) or np.any(idx >= np.array(dims)):
        raise ShapeError(f"GatherND indices out of range for dims {list(dims)}", tensor=node.input[1])
    idx = np.where(idx < 0, idx + np.array(dims), idx)
    rows = np.ravel_multi_index(tuple(np.moveaxis(idx, -1, 0)), dims) if k else np.zeros(idx.shape[:-1], np.int64)
    nb = math.prod(x.shape[:bd])
    batch = np.arange(nb, dtype=np.int64).reshape(x.shape[:bd] + (1,) * (idx.ndim - 1 - bd))
    rows = rows + batch * math.prod(dims)  # batch b reads rows of its own block
    rest = list(x.shape[bd + k:])
    flat = _reshape_to(im, x, [nb * math.prod(dims), *rest])
    iv = im.b.weight(_safe(node.input[1]) + "_rows", np.ascontiguousarray(rows.reshape(-1)))
    y = im.b.op("Gather", [flat, iv], [rows.size, *rest], x.dtype, axis=0)
    return [_reshape_to(im, y, [*idx.shape[:-1], *rest] or [1])]


def _split(im: _Importer, node):
    """Split as StridedSlices along `axis`: sizes from the `split` input (opset 13+) or
    attribute (before 13), else `num_outputs` (opset 18: chunks of ceil(n / k), the last
    smaller), else equal parts, one per output."""
    x = im.val(node.input[0])
    rank = len(x.shape)
    axis = _axis(im._attr("axis", 0), rank)
    n, k = x.shape[axis], len(node.output)
    if len(node.input) > 1 and node.input[1]:
        sizes = _int_vector(im, node.input[1], "Split split")
    else:
        sizes = im._attr("split", None)
        num = im._attr("num_outputs", None)
        if sizes is None and num is not None:
            if num != k or num < 1:
                raise AttrError(f"num_outputs {num} but the node has {k} outputs")
            chunk = -(-n // num)
            sizes = [min(chunk, max(n - chunk * q, 0)) for q in range(num)]
        elif sizes is None:
            if n % k:
                raise AttrError(f"axis {axis} of size {n} does not split into {k} equal parts")
            sizes = [n // k] * k
    if len(sizes) != k or any(s < 0 for s in sizes) or sum(sizes) != n:
        raise AttrError(f"split sizes {list(sizes)} must be {k} non-negative sizes summing to axis {axis}'s {n}")
    outs, start = [], 0
    for size in sizes:
        begin, end = [0] * rank, list(x.shape)
        begin[axis], end[axis] = start, start + size
        shape = list(x.shape)
        shape[axis] = size
        outs.append(im.b.op("StridedSlice", [x], shape, x.dtype, begin=begin, end=end, strides=[1] * rank))
        start += size
    return outs


def _gather_elements(im: _Importer, node):
    x, idx = im.val(node.input[0]), im.val(node.input[1])
    if idx.dtype not in ("int32", "int64"):
        raise ShapeError(f"GatherElements indices must be int32 or int64, got {idx.dtype}", tensor=node.input[1])
    axis = _axis(im._attr("axis", 0), len(x.shape))
    return [im.b.op("GatherElements", [x, idx], list(idx.shape), x.dtype, axis=axis)]


def _dropout(im: _Importer, node):
    return [im.val(node.input[0]), None]


HANDLERS: dict[str, Callable] = {
    "Add": _binary("Add"), "Sub": _binary("Sub"), "Mul": _binary("Mul"), "Div": _binary("RealDiv"),
    "Pow": _binary("Pow"), "Max": _variadic("Maximum"), "Min": _variadic("Minimum"), "Sum": _variadic("Add"),
    "Equal": _binary("Equal", "bool"), "Greater": _binary("Greater", "bool"), "Less": _binary("Less", "bool"),
    "GreaterOrEqual": _binary("GreaterEqual", "bool"), "LessOrEqual": _binary("LessEqual", "bool"),
    "Sqrt": _unary(GraphBuilder.sqrt), "Exp": _unary(GraphBuilder.exp), "Log": _unary(GraphBuilder.log),
    "Tanh": _unary(GraphBuilder.tanh), "Erf": _unary(GraphBuilder.erf), "Neg": _unary(GraphBuilder.neg),
    "Abs": _unary(GraphBuilder.abs), "Reciprocal": _unary(GraphBuilder.reciprocal),
    "Relu": _unary(GraphBuilder.relu), "Sigmoid": _unary(_sigmoid), "Gelu": _gelu,
    "Softmax": _softmax, "LayerNormalization": _layernorm,
    "ReduceMean": _reduce("mean"), "ReduceSum": _reduce("sum"), "ReduceMax": _reduce("max"),
    "MatMul": _matmul, "Gemm": _gemm, "Conv": _conv, "BatchNormalization": _batchnorm,
    "Reshape": _reshape, "Transpose": _transpose, "Unsqueeze": _unsqueeze, "Squeeze": _squeeze,
    "Flatten": _flatten, "Concat": _concat, "Slice": _slice, "Gather": _gather, "Cast": _cast,
    "Split": _split, "GatherElements": _gather_elements,
    "Where": _where, "Expand": _expand, "Identity": _identity, "Dropout": _dropout,
    "MaxPool": _pool("max"), "AveragePool": _pool("avg"), "GlobalAveragePool": _global_pool("avg"),
    "GlobalMaxPool": _global_pool("max"), "Clip": _clip,
    "And": _logical("and"), "Or": _logical("or"), "Xor": _logical("xor"), "Not": _logical("not"),
    "GatherND": _gather_nd, "IsNaN": _isnan,
}
