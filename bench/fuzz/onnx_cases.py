"""ONNX cases: akgpy.zoo models (small sizes) with corrupted attributes, initializers, bytes,
output names and `shapes=`, and one-node models of the ops whose attributes are easy to get
wrong. akgpy's outputs are compared with onnxruntime's; a model onnxruntime refuses must be
refused by akgpy too (accepting it is a silently wrong result)."""
from __future__ import annotations

import numpy as np

from .cases import Context, generator, sprinkle

_ZOO = {"mlp": dict(batch=4, sizes=(16, 32, 32, 10)),
        "bert_layer": dict(seq=8, hidden=32, heads=2, ffn=64),
        "resnet_bottleneck": dict(channels=16, width=8, size=8)}
_BAD_ATTRS = ["1", 1.5, 99, -99, [1, 1], [0, 0, 0, 0, 0, 0, 0], 0, b"\xff"]


def _ort(data: bytes, feeds: dict):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def check_onnx(ctx: Context, data: bytes, feeds: dict, shapes=None):
    """akgpy on the model (bytes) against onnxruntime on the same bytes and feeds."""
    import akgpy
    ctx.save_onnx(data)
    ctx.stage = "onnxruntime"
    try:
        want, refused = _ort(data, feeds), None
    except Exception as e:  # onnxruntime's verdict on the model, not a finding about akgpy
        want, refused = None, f"{type(e).__name__}: {str(e)[:200]}"
    ctx.stage = "import"
    g = akgpy.from_onnx(data, shapes=shapes)
    ctx.stage = "compile"
    prog = akgpy.fuse(g)
    ctx.stage = "call"
    got = prog(*[feeds[n] for n in g.free_inputs])
    if refused:
        return "wrong", f"accepted a model onnxruntime refuses ({refused})"
    ctx.stage = "compare"
    bad = []
    for i, (a, b) in enumerate(zip(got, want)):
        a, b = np.asarray(a), np.asarray(b)
        tol = 1e-3 if np.float16 in (a.dtype, b.dtype) else 1e-4
        if a.shape != b.shape:
            bad.append(f"output {i}: shape {a.shape} vs onnxruntime {b.shape}")
        elif a.dtype.kind in "fc" or b.dtype.kind in "fc":
            ok = np.isclose(a.astype(np.float64), b.astype(np.float64), rtol=tol, atol=tol, equal_nan=True)
            if not ok.all():
                k = np.unravel_index(np.argmin(ok), ok.shape) if ok.ndim else ()
                bad.append(f"output {i}: {int((~ok).sum())}/{ok.size} off, at {k} got {a[k]!r} want {b[k]!r}")
        elif not np.array_equal(a, b):
            bad.append(f"output {i}: {int((a != b).sum())}/{a.size} differ")
    if len(got) != len(want):
        bad.append(f"{len(got)} outputs, onnxruntime {len(want)}")
    return ("wrong", "; ".join(bad)[:600]) if bad else ("correct", "")


def _corrupt_attr(ctx: Context, node) -> str:
    from onnx import helper
    a = ctx.pick(list(node.attribute))
    v = ctx.pick(_BAD_ATTRS)
    node.attribute.remove(a)
    node.attribute.append(helper.make_attribute(a.name, v))
    return f"{node.name or node.op_type}.{a.name} = {v!r}"


@generator
def gen_onnx_zoo(ctx: Context):
    from onnx import numpy_helper

    from akgpy import zoo
    name = ctx.pick(sorted(_ZOO))
    model, inputs = zoo.MODELS[name](**_ZOO[name], seed=int(ctx.rng.integers(100)))
    feeds = {k: v.astype(v.dtype) for k, v in inputs.items()}
    nodes = list(model.graph.node)
    kind = ctx.pick(["attr", "attr", "initializer", "bytes", "dup_output", "op_type", "drop_input", "shapes",
                     "special_inputs"])
    shapes = None
    what = kind
    if kind == "attr":
        node = ctx.pick([n for n in nodes if n.attribute])
        what = _corrupt_attr(ctx, node)
    elif kind == "initializer":
        init = ctx.pick(list(model.graph.initializer))
        arr = numpy_helper.to_array(init)
        raw = arr.tobytes()
        init.ClearField("float_data")
        init.raw_data = raw[: int(ctx.rng.integers(len(raw)))]
        what = f"initializer {init.name} cut to {len(init.raw_data)} of {len(raw)} bytes"
    elif kind == "dup_output":
        a, b = ctx.pick(nodes), ctx.pick(nodes)
        a.output[0] = b.output[0]
        what = f"{a.name} writes {b.output[0]!r} too"
    elif kind == "op_type":
        node = ctx.pick(nodes)
        old, node.op_type = node.op_type, ctx.pick(["Sub", "Relu", "Softmax", "Frobnicate", "Transpose", "Cast"])
        what = f"{node.name} {old} -> {node.op_type}"
    elif kind == "drop_input":
        node = ctx.pick([n for n in nodes if len(n.input) > 1])
        del node.input[len(node.input) - 1]
        what = f"{node.name} loses its last input"
    elif kind == "shapes":
        k = next(iter(feeds))
        dims = list(feeds[k].shape)
        shapes = {k: ctx.pick([[d + 0.5 for d in dims], [-1] + dims[1:], "abc", dims + [1], None, [str(d) for d in dims]])}
        if ctx.rng.random() < 0.3:
            shapes = {"nope": dims}
        what = f"shapes={shapes!r}"
    elif kind == "special_inputs":
        sprinkle(ctx, list(feeds.values()), 0.05)
    data = model.SerializeToString()
    if kind == "bytes":
        raw = bytearray(data)
        for _ in range(int(ctx.rng.integers(1, 4))):
            raw[int(ctx.rng.integers(len(raw)))] ^= 1 << int(ctx.rng.integers(8))
        data = bytes(raw)
        what = "bytes flipped"
    ctx.note(f"zoo {name}: {what}")
    return check_onnx(ctx, data, feeds, shapes)


def _one_node(ctx: Context):
    """A one-node model of an op whose attributes or constant inputs are easy to get wrong."""
    from onnx import TensorProto, helper, numpy_helper
    x = ctx.rng.standard_normal((4, 6, 5)).astype(np.float32)
    inits, attrs, extra = [], {}, []

    def const(name, values, dtype=np.int64):
        inits.append(numpy_helper.from_array(np.array(values, dtype), name))
        extra.append(name)

    op = ctx.pick(["ReduceMean", "ReduceSum", "ReduceMax", "Slice", "Expand", "Cast", "Transpose", "Softmax",
                   "Concat", "Gather", "Reshape", "Unsqueeze", "Squeeze", "Flatten"])
    if op in ("ReduceMean", "ReduceSum", "ReduceMax"):
        const("axes", ctx.pick([[1, 1], [-1], [0, -3], [5], [1, -2], [2, 2, 2], [-4]]))
        attrs["keepdims"] = int(ctx.rng.integers(2))
    elif op == "Slice":
        const("starts", [int(ctx.pick([0, 1, -2, 10]))])
        const("ends", [int(ctx.pick([5, -1, 1 << 40, -10]))])
        const("axes", [int(ctx.pick([0, 1, 2, -1, 3]))])
        const("steps", [int(ctx.pick([1, 2, -1, 0, -3]))])
    elif op == "Expand":
        x = x[:, :1, :1]
        const("shape", ctx.pick([[4, 3, 5], [4, 1, 2], [2, 4, 3, 5], [3, 3, 1], [4, 0, 5], [-1, 3, 5]]))
    elif op == "Cast":
        sprinkle(ctx, [x], 0.4)
        attrs["to"] = int(ctx.pick([TensorProto.BOOL, TensorProto.FLOAT16, TensorProto.INT32, TensorProto.BOOL]))
    elif op == "Transpose":
        attrs["perm"] = ctx.pick([[2, 0, 1], [0, 0, 1], [0, 1], [0, 1, 3], [1, 0, 2]])
    elif op in ("Softmax", "Concat", "Flatten"):
        attrs["axis"] = int(ctx.pick([-1, 0, 1, 2, 3, -4]))
        if op == "Concat":
            extra.append("x")
    elif op == "Gather":
        const("indices", ctx.pick([[0, 3], [-1, 2], [4], [-5], [1 << 33]]))
        attrs["axis"] = int(ctx.pick([0, 1, -1, 3]))
    elif op == "Reshape":
        const("shape", ctx.pick([[4, 30], [0, -1], [-1, -1], [24, 6], [4, 0, 5], [-2, 30], [120]]))
    elif op == "Unsqueeze":
        const("axes", ctx.pick([[0], [1, 1], [3], [5], [-1, 0]]))
    else:
        x = x[:, :1, :]
        const("axes", ctx.pick([[1], [0], [1, 1], [-2], [5]]))
    if attrs and ctx.rng.random() < 0.3:
        k = ctx.pick(sorted(attrs))
        attrs[k] = ctx.pick(_BAD_ATTRS)
    node = helper.make_node(op, ["x"] + extra[:3 if op != "Slice" else 4], ["y"], name=f"{op}_0", **attrs)
    g = helper.make_graph([node], "one", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                          [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
                          [i for i in inits if i.name in node.input])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    _declare_output_type(model)
    return model, {"x": np.ascontiguousarray(x)}, f"{op}({', '.join(node.input[1:])}) {attrs} " + \
        "; ".join(f"{i.name}={numpy_helper.to_array(i).tolist()}" for i in inits if i.name in node.input)


def _declare_output_type(model) -> None:
    """The output's element type as ONNX's shape inference gives it (Cast, Gather of bools ...);
    where inference fails the model is invalid anyway and keeps float."""
    import onnx
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
        elem = inferred.graph.output[0].type.tensor_type.elem_type
    except Exception:  # an invalid model: onnxruntime's verdict decides, not inference's
        elem = 0
    model.graph.output[0].type.tensor_type.elem_type = elem or onnx.TensorProto.FLOAT


@generator
def gen_onnx_ops(ctx: Context):
    model, feeds, what = _one_node(ctx)
    ctx.note(f"one-node {what}")
    return check_onnx(ctx, model.SerializeToString(), feeds)
