"""Hypothesis: random graphs at the sizes where the CPU schedule's rules switch on.

test_property.py draws dims of 1-9, where no vector, tile or lane rule applies. Here shapes
mix the dims real networks have (3, 13, 26, 52, 80, 128, ...), large enough that the
poly schedule vectorises, coalesces broadcast tails, transposes in registers and splits
reductions into interleaved partials, and the graphs add the layout ops (Transpose,
Reshape, BroadcastTo), Select, MatMul with whatever follows it as its
epilogue, and in-place writes. Every graph runs the isl path (a fallback
would hide a bug of the poly schedule) and must match the numpy reference.

`AKGPY_FUZZ_EXAMPLES=500 pytest tests/test_property_layout.py` fuzzes longer, and
`AKGPY_FUZZ_MAX_ELEMENTS` raises the size cap (streaming stores start at 1 MiB outputs).
"""
from __future__ import annotations

import dataclasses
import math
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import akgpy
from akgpy import GraphBuilder
from akgpy.graph.ir import Graph
from akgpy.testing import check_program

DIMS = [1, 2, 3, 4, 6, 7, 13, 16, 26, 32, 52, 80, 128]
MAX_ELEMENTS = int(os.environ.get("AKGPY_FUZZ_MAX_ELEMENTS", 1 << 17))
EXAMPLES = int(os.environ.get("AKGPY_FUZZ_EXAMPLES", "12"))


@st.composite
def shapes(draw):
    rank = draw(st.integers(2, 5))
    shape = []
    for _ in range(rank):
        left = MAX_ELEMENTS // max(math.prod(shape), 1)
        shape.append(draw(st.sampled_from([d for d in DIMS if d <= left] or [1])))
    return tuple(shape)


def _operand(draw, b, x, n_inputs):
    """A fresh input broadcast to x along random dims (maybe with fewer leading dims), or a constant."""
    if draw(st.integers(0, 3)) == 0:
        return draw(st.sampled_from([0.5, 2.0, -1.25])), n_inputs
    oshape = tuple(s if draw(st.booleans()) else 1 for s in x.shape)
    oshape = oshape[draw(st.integers(0, len(oshape) - 1)):]
    return b.input(f"x{n_inputs}", oshape, x.dtype), n_inputs + 1


def _split_or_merge(draw, shape):
    """A reshape target: two adjacent dims merged, or one dim split into two factors."""
    if len(shape) >= 2 and draw(st.booleans()):
        i = draw(st.integers(0, len(shape) - 2))
        return shape[:i] + (shape[i] * shape[i + 1],) + shape[i + 2:]
    splittable = [i for i, s in enumerate(shape) if any(s % f == 0 for f in range(2, s))]
    if not splittable or len(shape) >= 6:
        return shape
    i = draw(st.sampled_from(splittable))
    f = draw(st.sampled_from([f for f in range(2, shape[i]) if shape[i] % f == 0]))
    return shape[:i] + (f, shape[i] // f) + shape[i + 1:]


@st.composite
def layout_graphs(draw, model: bool = False) -> Graph:
    """A fused subgraph; with `model`, a whole model that may also hold the ops akgpy runs
    between kernels (Concat, StridedSlice)."""
    dtype = draw(st.sampled_from(["float32", "float32", "float16"]))
    b = GraphBuilder("fuzz")
    values = [b.input("x0", draw(shapes()), dtype)]
    n_inputs = 1
    targets = []
    for _ in range(draw(st.integers(2, 8))):
        x = draw(st.sampled_from(values))
        # a model graph takes no in-place writes (akgpy says so); it may hold Concat, StridedSlice
        kind = draw(st.sampled_from(["unary", "binary", "binary", "select", "mask", "reduce", "transpose",
                                     "reshape", "broadcast", "cast", "matmul", "pad", "unpad", "addn"]
                                    + (["concat", "slice"] if model else ["inplace"])))
        if kind == "unary":
            u = draw(st.sampled_from(["neg", "abs", "tanh", "exp_neg", "log_pos", "sqrt_pos", "relu", "erf",
                                      "rsqrt_pos", "reciprocal_pos"]))
            y = {"neg": lambda: -x, "abs": lambda: b.abs(x), "tanh": lambda: b.tanh(x),
                 "exp_neg": lambda: b.exp(-b.abs(x)), "log_pos": lambda: b.log(b.abs(x) + 1.0),
                 "sqrt_pos": lambda: b.sqrt(b.abs(x) + 0.5), "relu": lambda: b.relu(x), "erf": lambda: b.erf(x),
                 "rsqrt_pos": lambda: b.rsqrt(b.abs(x) + 0.5),
                 "reciprocal_pos": lambda: b.reciprocal(b.abs(x) + 0.5)}[u]()
        elif kind == "binary":
            other, n_inputs = _operand(draw, b, x, n_inputs)
            op = draw(st.sampled_from(["add", "sub", "mul", "maximum", "minimum"]))
            y = getattr(b, op)(x, other) if not isinstance(other, float) or op != "sub" else b.sub(other, x)
        elif kind == "select":
            other, n_inputs = _operand(draw, b, x, n_inputs)
            y = b.select(b.greater(x, other), x, other) if not isinstance(other, float) else \
                b.select(b.greater(x, b.broadcast_to(other, x.shape, x.dtype)), x, other)
        elif kind == "mask":  # a ReLU/dropout gradient: x times its own 0/1 mask (targets/half_round_trips.py)
            other, n_inputs = _operand(draw, b, x, n_inputs)
            if isinstance(other, float):
                other = b.broadcast_to(other, x.shape, x.dtype)
            y = b.mul(b.cast(b.greater(x, other), x.dtype), x)
        elif kind == "reduce":
            axes = draw(st.lists(st.integers(0, len(x.shape) - 1), min_size=1, max_size=len(x.shape), unique=True))
            keep = draw(st.booleans())
            y = b.reduce_sum(x, axes, keep) if draw(st.booleans()) else b.reduce_max(x, axes, keep)
            if not y.shape:
                y = y.reshape((1,))
        elif kind == "transpose":
            perm = draw(st.permutations(range(len(x.shape))))
            y = b.transpose(x, perm)
        elif kind == "reshape":
            y = b.reshape(x, _split_or_merge(draw, tuple(x.shape)))
        elif kind == "broadcast":
            if all(s > 1 for s in x.shape) or math.prod(x.shape) * 16 > MAX_ELEMENTS:
                continue
            grown = tuple(s if s > 1 else draw(st.sampled_from([2, 3, 13, 16])) for s in x.shape)
            if math.prod(grown) > MAX_ELEMENTS:
                continue
            y = b.broadcast_to(x, grown, x.dtype)
        elif kind == "concat":
            if 2 * math.prod(x.shape) > MAX_ELEMENTS:
                continue
            axis = draw(st.integers(0, len(x.shape) - 1))
            other = x if draw(st.booleans()) else b.input(f"x{n_inputs}", x.shape, x.dtype)
            n_inputs += other is not x
            shape = list(x.shape)
            shape[axis] *= 2
            y = b.op("Concat", [x, other], shape, x.dtype, axis=axis)
        elif kind == "slice":
            begin, end, strides = [], [], []
            for n in x.shape:
                s = draw(st.sampled_from([1, 1, 2, 3, -1]))
                lo = draw(st.integers(0, n - 1))
                hi = draw(st.integers(lo + 1, n))
                begin.append(lo if s > 0 else hi - 1)
                end.append(hi if s > 0 else (lo - 1 if lo > 0 else -n - 1))
                strides.append(s)
            shape = [len(range(*slice(bg, e, s).indices(n))) for n, bg, e, s in zip(x.shape, begin, end, strides)]
            y = b.op("StridedSlice", [x], shape, x.dtype, begin=begin, end=end, strides=strides)
        elif kind == "matmul":
            k = x.shape[-1]
            n = draw(st.sampled_from([d for d in DIMS if d > 1]))
            if math.prod(x.shape[:-1]) * n > MAX_ELEMENTS or k > 512:
                continue
            w = b.input(f"x{n_inputs}", (k, n), x.dtype)
            n_inputs += 1
            y = b.matmul(x.reshape(math.prod(x.shape[:-1]), k), w)
        elif kind == "pad":  # rows before the input's start and after its end (PadAkg's clamp)
            head = [draw(st.integers(0, 2)) for _ in x.shape]
            tail = [draw(st.integers(0, 2)) for _ in x.shape]
            shape = tuple(s + h + t for s, h, t in zip(x.shape, head, tail))
            if math.prod(shape) > MAX_ELEMENTS:
                continue
            y = b.op("PadAkg", [x], shape, x.dtype, head=head, tail=tail, pad_val=0)
        elif kind == "unpad":  # trims only the last two dims
            if len(x.shape) < 2:
                continue
            tail = [0] * (len(x.shape) - 2) + [draw(st.integers(0, s - 1)) for s in x.shape[-2:]]
            y = b.op("UnPadAkg", [x], tuple(s - t for s, t in zip(x.shape, tail)), x.dtype, tail=tail)
        elif kind == "addn":
            others = []
            for _ in range(draw(st.integers(1, 3))):
                other, n_inputs = _operand(draw, b, x, n_inputs)
                others.append(x if isinstance(other, float) else other)  # AddN takes no constants
            y = b.addn(x, *others)
        elif kind == "cast":
            y = x.astype("float16" if x.dtype == "float32" else "float32")
        else:  # in-place: a fresh parameter receives x, as optimizers and BatchNorm statistics do
            t = b.input(f"x{n_inputs}", x.shape, x.dtype)
            n_inputs += 1
            targets.append(b.inplace_assign(t, x))
            continue
        values.append(y)
    outs = [values[-1]] + ([values[len(values) // 2]] if len(values) > 2 and draw(st.booleans()) else [])
    b.output(*dict.fromkeys(outs + targets, None))
    g = b.build()
    return dataclasses.replace(g, kind="model") if model else g


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          derandomize="AKGPY_FUZZ_EXAMPLES" not in os.environ)
@given(g=layout_graphs(), seed=st.integers(0, 2 ** 16))
def test_random_layout_graphs_match_reference(g: Graph, seed: int):
    prog = akgpy.fuse(g, schedule="poly")
    for line in prog.explain().split("== kernel")[1:]:
        path = line.splitlines()[1]
        assert path.startswith("schedule path: poly/"), f"{g.describe()}\n{path}"
    bad = check_program(g, prog, seed=seed)
    assert not bad, f"{g.describe()}\n" + "\n".join(map(str, bad))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          derandomize="AKGPY_FUZZ_EXAMPLES" not in os.environ)
@given(g=layout_graphs(model=True), max_ops=st.integers(1, 6), seed=st.integers(0, 2 ** 16))
def test_random_layout_models_match_reference(g: Graph, max_ops: int, seed: int):
    """The same graphs as whole models, with Concat and StridedSlice between kernels, cut into
    groups of at most `max_ops` ops."""
    from akgpy.fusion import Limits
    prog = akgpy.fuse(g, limits=Limits(max_ops=max_ops))
    bad = check_program(g, prog, seed=seed)
    assert not bad, f"{g.describe()}\n" + "\n".join(map(str, bad))


@st.composite
def transposed_products(draw):
    """A computed value transposed between NCHW and NHWC beside an elementwise output (yolo's
    pattern), at channel counts where the transpose's producer runs in L2-sized blocks, and a
    schedule config that may stream the outputs (whole-line tiles) or shrink L2 (no blocks)."""
    dtype = draw(st.sampled_from(["float16", "float32"]))
    to_nhwc = draw(st.booleans())
    stream = draw(st.booleans())
    if stream:  # outputs past 1 MiB (stream.MIN_OUTPUT), so that they stream: whole-line tiles
        n, c = 4, draw(st.sampled_from([128, 255, 256]))
        h, w = draw(st.sampled_from([26, 52])), draw(st.sampled_from([26, 52]))
    else:
        n, c = draw(st.sampled_from([1, 2])), draw(st.sampled_from([32, 48, 64, 96, 128, 255, 256]))
        h, w = draw(st.sampled_from([4, 7, 8, 12, 13, 16])), draw(st.sampled_from([4, 7, 8, 12, 13, 16, 26]))
    shape = (n, c, h, w) if to_nhwc else (n, h, w, c)
    b = GraphBuilder("transposed_product")
    x, y = b.input("x", shape, dtype), b.input("y", shape, dtype)
    m = (x >= y).astype(dtype) * x
    b.output(x - m)
    b.output(b.transpose(m * 0.5, (0, 2, 3, 1) if to_nhwc else (0, 3, 1, 2)))
    cfg = akgpy.ScheduleConfig(stream_min_bytes=1 << 10 if stream else 0, stream_share=0.0)
    target = {"kind": "llvm", "vector_bytes": draw(st.sampled_from([32, 64])),
              "l2_bytes": draw(st.sampled_from([16 << 10, 1 << 20]))}
    return b.build(), cfg, target


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow],
          derandomize="AKGPY_FUZZ_EXAMPLES" not in os.environ)
@given(case=transposed_products(), seed=st.integers(0, 2 ** 16))
def test_random_transposed_products_match_reference(case, seed: int):
    g, cfg, target = case
    prog = akgpy.fuse(g, schedule="poly", config=cfg, target=target)
    assert "schedule path: poly/" in prog.explain(), g.describe()
    bad = check_program(g, prog, seed=seed)
    assert not bad, f"{g.describe()} {cfg} {target}\n" + "\n".join(map(str, bad))
