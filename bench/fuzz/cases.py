"""What a case is, and the generators of graph cases. Case (seed, index) is generator
`GENERATORS[index % len(GENERATORS)]` drawing from `numpy.random.default_rng([seed, index])`, so
the pair alone reproduces it. A generator returns ("correct" | "wrong", detail) or raises; the
runner classifies what it raises. `ctx.must_fail` marks input akgpy has to refuse: success then
counts as a wrong result (silently accepted); `ctx.must_succeed` marks valid input with a numpy
answer (IEEE division by zero, 2^31 elements, an AddN of 700): an AkgpyError refusing it counts as
a wrong result too."""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "corpus"
RUN_LIMIT_BYTES = 1 << 30  # graphs whose arguments exceed this are compiled, not run

SPECIAL = {
    "float32": [np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-45, -3e-42, 1.1754942e-38, 1.0, -1.0],
    "float16": [np.nan, np.inf, -np.inf, -0.0, 0.0, 6e-8, -3e-6, 6.1e-5, 1.0, -1.0],
}
# Finite extremes: float16's largest (and past it, for float32 -> float16 casts). Not where a sum
# or contraction reads them: the cancellation error of a float32 accumulation of 65504s exceeds
# the tolerance legitimately (the reference sums in float64).
LARGE = {"float32": [65504.0, -70000.0, 1e5], "float16": [65504.0, -65504.0, 60000.0]}
SUMMING = frozenset({"MatMul", "ReduceSum", "Conv2D"})


@dataclass
class Generator:
    name: str
    fn: Callable


GENERATORS: list[Generator] = []


def generator(fn):
    GENERATORS.append(Generator(fn.__name__.removeprefix("gen_"), fn))
    return fn


def generator_for(index: int) -> Generator:
    from . import onnx_cases  # noqa: F401  (registers its generators)
    return GENERATORS[index % len(GENERATORS)]


class Context:
    """One case's random source, its stage (for error details) and the repro it leaves on disk:
    written before each risky step, so a crash leaves it behind."""

    def __init__(self, seed: int, index: int, name: str, out: Path):
        self.rng = np.random.default_rng([seed, index])
        self.stage, self.describe, self.must_fail, self.must_succeed = "build", "", False, False
        self._stem = out / "repros" / f"{seed}-{index}"
        self._repro = {"case": f"{seed}:{index}", "generator": name}

    def note(self, describe: str, **call) -> None:
        self.describe = describe
        self._repro["describe"] = describe
        self._repro.update(call)
        self._write()

    def save_graph(self, g) -> None:
        self._repro["composite"] = json.loads(g.to_composite())
        self._write()

    def save_onnx(self, data: bytes) -> None:
        self._stem.with_suffix(".onnx").write_bytes(data)
        self._repro["onnx"] = self._stem.with_suffix(".onnx").name
        self._write()

    def _write(self) -> None:
        self._stem.parent.mkdir(parents=True, exist_ok=True)
        self._stem.with_suffix(".json").write_text(json.dumps(self._repro, default=repr))

    def pick(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def hypothesis_draw(self, strategy):
        """One example of a hypothesis strategy, drawn from this case's seed alone."""
        from hypothesis.errors import StopTest
        from hypothesis.internal.conjecture.data import ConjectureData
        for _ in range(20):  # a draw that runs out of choices or hits a filter is drawn again
            try:
                return ConjectureData(random=random.Random(int(self.rng.integers(1 << 62)))).draw(strategy)
            except StopTest:
                continue
        raise RuntimeError("the strategy gave no example in 20 draws")


# -- running and checking ------------------------------------------------------------------------

def sprinkle(ctx: Context, arrays, frac: float, *, large: bool = False) -> None:
    """Overwrite a fraction of each float array with NaN, +-inf, +-0 and subnormals (`large`:
    and the float16 extremes)."""
    for a in arrays:
        if a.dtype.kind == "f" and a.size:
            key = "float16" if a.dtype == np.float16 else "float32"
            vals = np.array(SPECIAL[key] + (LARGE[key] if large else []), a.dtype)
            mask = ctx.rng.random(a.shape) < frac
            a[mask] = vals[ctx.rng.integers(len(vals), size=int(mask.sum()))]


def check_graph(ctx: Context, g, inputs=None, *, make_args=None, schedule="poly", target="llvm", **options):
    """Compile g, call it twice (the first call's outputs poisoned, so unwritten elements show) and
    compare the second call with the numpy reference on the values the arguments held."""
    import akgpy
    from akgpy import reference
    from akgpy.testing import compare, poison, random_inputs
    ctx.save_graph(g)
    ctx.stage = "compile"
    prog = akgpy.fuse(g, target=target, schedule=schedule, **options)
    nbytes = sum(g.tensors[n].size * np.dtype(_np(g.tensors[n].dtype)).itemsize for n in g.tensors)
    if nbytes > RUN_LIMIT_BYTES:
        return "correct", f"compiled ({nbytes >> 20} MiB of tensors, not run)"
    if make_args is None:
        base = inputs if inputs is not None else random_inputs(g, int(ctx.rng.integers(1 << 16)))
        make_args = lambda: [a.copy() for a in base]  # noqa: E731
    ctx.stage = "call"
    first = prog(*make_args())
    poison(first)
    del first
    args = make_args()
    # the values the arguments hold now (aliased ones read each other's), at the graph's dtypes (lists)
    ref_in = [np.array(a, dtype=_np(g.tensors[n].dtype), copy=True) for a, n in zip(args, g.free_inputs)]
    got = prog(*args)
    ctx.stage = "reference"
    want = reference.run(g, ref_in)
    ctx.stage = "compare"
    bad = compare(g, got, [np.asarray(a) for a in args], want, ref_in, equal_nan=True)
    if bad:
        return "wrong", "; ".join(map(str, bad))[:600]
    return "correct", ""


def _np(dtype: str):
    from akgpy import dtypes
    return dtypes.to_numpy(dtype)


def _builder(name="fuzz"):
    from akgpy import GraphBuilder
    return GraphBuilder(name)


def _shape(ctx: Context, rank=None, dims=(1, 3, 4, 7, 16, 33, 64)):
    rank = rank or int(ctx.rng.integers(1, 4))
    return tuple(int(ctx.pick(dims)) for _ in range(rank))


# -- generators, in a fixed order (a case's generator is its index modulo their count) -----------

_corpus_files: list[Path] | None = None


def corpus_files() -> list[Path]:
    """Corpus graphs small enough to compile in about a second (the Custom solver left out)."""
    global _corpus_files
    if _corpus_files is None:
        _corpus_files = sorted(p for p in CORPUS.rglob("*") if p.suffix in (".info", ".json")
                               and p.stat().st_size < 6000 and p.name != "lu.info")
    return _corpus_files


_ATTR_VALUES = [7, -9, 1.5, "1", None, [], [0, 0], [99], True, {"a": 1}, 1 << 40]
_DIMS = [0, 1, -1, 2.5, "4", None, 3, 17]
_DTYPES = ["float64", "int8", "bool", "float17", 3, None, "complex64", "uint16"]


def _mutate_composite(ctx: Context, d: dict) -> str:
    """One mutation of a composite dict, in place; returns what it did."""
    ops = d.get("op_desc") or [{}]
    op = ops[int(ctx.rng.integers(len(ops)))]
    descs = [t for lst in op.get("input_desc") or [] for t in (lst if isinstance(lst, list) else [lst])]
    descs += op.get("output_desc") or []
    descs += [t for lst in d.get("input_desc") or [] for t in lst] + (d.get("output_desc") or [])
    kind = ctx.pick(["dim", "dim", "dtype", "drop_key", "op_name", "attr", "attr", "tensor_name", "dup_op",
                     "drop_op"])
    if kind == "dim" and descs:
        t = ctx.pick(descs)
        if t.get("shape"):
            i, v = int(ctx.rng.integers(len(t["shape"]))), ctx.pick(_DIMS)
            t["shape"][i] = v
            return f"shape of {t.get('tensor_name')}[{i}] = {v!r}"
    if kind == "dtype" and descs:
        t = ctx.pick(descs)
        t["data_type"] = ctx.pick(_DTYPES)
        return f"dtype of {t.get('tensor_name')} = {t['data_type']!r}"
    if kind == "drop_key" and op:
        k = ctx.pick(sorted(op))
        del op[k]
        return f"{op.get('name')}: key {k!r} dropped"
    if kind == "op_name":
        from akgpy.ops.registry import OPS
        old, op["name"] = op.get("name"), ctx.pick(sorted(OPS) + ["Frobnicate", "", 7])
        return f"op {old} renamed {op['name']!r}"
    if kind == "attr" and op.get("attr"):
        a = ctx.pick(op["attr"])
        a["value"] = ctx.pick(_ATTR_VALUES)
        return f"{op.get('name')}.{a.get('name')} = {a['value']!r}"
    if kind == "tensor_name" and descs:
        t = ctx.pick(descs)
        t["tensor_name"] = ctx.pick([ctx.pick(descs).get("tensor_name"), "nowhere", 5])
        return f"a tensor renamed {t['tensor_name']!r}"
    if kind == "dup_op" and ops:
        ops.append(json.loads(json.dumps(op)))
        return f"op {op.get('name')} duplicated"
    if kind == "drop_op" and len(ops) > 1:
        ops.remove(op)
        return f"op {op.get('name')} dropped"
    d.pop("output_desc", None)
    return "graph output_desc dropped"


@generator
def gen_corpus_mutation(ctx: Context):
    import akgpy
    path = ctx.pick(corpus_files())
    text = path.read_text()
    d = json.loads(text)
    rel = path.relative_to(CORPUS)
    form = ctx.pick(["dict", "dict", "dict", "bytes"])
    if form == "bytes":  # a flipped byte or a cut: the loader sees broken JSON or a changed value
        raw = bytearray(text.encode())
        if ctx.rng.random() < 0.5:
            i = int(ctx.rng.integers(len(raw)))
            raw[i] ^= 1 << int(ctx.rng.integers(8))
            what = f"byte {i} flipped"
        else:
            raw = raw[: int(ctx.rng.integers(len(raw)))]
            what = f"cut at {len(raw)}"
        ctx.note(f"corpus {rel}: {what}", text=raw.decode(errors="replace"))
        ctx.stage = "load"
        g = akgpy.load_composite(bytes(raw))
    else:
        what = "; ".join(_mutate_composite(ctx, d) for _ in range(int(ctx.rng.integers(1, 3))))
        ctx.note(f"corpus {rel}: {what}", mutated=d)
        ctx.stage = "load"
        g = akgpy.load_composite(d)
    return check_graph(ctx, g)


def _call_templates(ctx: Context):
    """Small graphs with the argument roles the call mutations need: (graph, in-place target index)."""
    b = _builder()
    n = int(ctx.pick([4, 16, 33]))
    kind = ctx.pick(["elemwise", "assign", "inplace_matmul", "reduce"])
    if kind == "elemwise":
        x, y = b.input("x", (n, n)), b.input("y", (n, n))
        b.output(x * 2.0 + y)
        return b.build(), None, kind
    if kind == "assign":  # issue 48's assign(t, transpose(y) + 1)
        t, y = b.input("t", (n, n)), b.input("y", (n, n))
        b.output(b.assign(t, y.transpose(1, 0) + 1.0))
        return b.build(), 0, kind
    if kind == "inplace_matmul":
        t, x, w = b.input("t", (n, n)), b.input("x", (n, n)), b.input("w", (n, n))
        b.output(b.inplace_assign(t, b.matmul(x, w)))
        return b.build(), 0, kind
    x, y = b.input("x", (n, n)), b.input("y", (n, 1))
    b.output((x * y).sum(axis=1, keepdims=True))
    return b.build(), None, kind


def _views(ctx: Context, a: np.ndarray, how: str):
    """`a`'s values as an array of another memory layout."""
    if how == "strided":
        big = np.empty((a.shape[0] * 2,) + a.shape[1:], a.dtype)
        v = big[::2]
    elif how == "transposed":
        v = np.empty(a.shape[::-1], a.dtype).T
    elif how == "fortran":
        v = np.asfortranarray(np.empty_like(a))
    else:  # unaligned: an offset of `how` bytes into a raw buffer (1 misaligns even the dtype)
        off = int(how.split("+")[1])
        raw = np.empty(a.nbytes + 64, np.uint8)
        base = (-raw.ctypes.data) % 64
        v = np.frombuffer(raw, a.dtype, a.size, base + off).reshape(a.shape) if off % a.itemsize == 0 else \
            np.ndarray(a.shape, a.dtype, raw.data, base + off)
    v[...] = a
    return v


@generator
def gen_call_args(ctx: Context):
    """Arguments in every layout and some that are wrong: aliased, overlapping, strided,
    transposed, unaligned, read-only, wrong dtype/shape/count, not arrays."""
    import akgpy
    from akgpy.testing import random_inputs
    g, target, kind = _call_templates(ctx)
    base = random_inputs(g, int(ctx.rng.integers(1 << 16)))
    sprinkle(ctx, base, 0.05)
    k = int(ctx.rng.integers(len(base)))
    how = ctx.pick(["alias", "alias", "overlap", "strided", "transposed", "fortran", "unaligned+4", "unaligned+1",
                    "unaligned+8", "readonly", "wrong_dtype", "wrong_shape", "too_few", "too_many", "list",
                    "scalar", "none"])
    ctx.note(f"{kind} graph, argument {k} ({g.inputs[k]}) {how}", call={"argument": k, "how": how})

    def make_args():
        args = [a.copy() for a in base]
        a = args[k]
        if how == "alias":  # another argument of the same shape is passed the same array
            j = next((j for j in range(len(args)) if j != k and args[j].shape == a.shape), None)
            if j is not None:
                args[j] = a
        elif how == "overlap":  # args k and j are views of one buffer, shifted by one row
            j = next((j for j in range(len(args)) if j != k and args[j].shape == a.shape), None)
            if j is not None:
                buf = np.empty((a.shape[0] + 1,) + a.shape[1:], a.dtype)
                buf[1:] = args[j]
                buf[:-1] = a  # the shared row takes k's value: both views hold what the call reads
                args[k], args[j] = buf[:-1], buf[1:]
        elif how in ("strided", "transposed", "fortran") or how.startswith("unaligned"):
            args[k] = _views(ctx, a, how)
        elif how == "readonly":
            a.setflags(write=False)
        elif how == "wrong_dtype":
            args[k] = a.astype(np.float64 if a.dtype != np.float64 else np.float32)
        elif how == "wrong_shape":
            args[k] = np.resize(a, (a.shape[0] + 1,) + a.shape[1:])
        elif how == "too_few":
            args.pop()
        elif how == "too_many":
            args.append(a)
        elif how == "list":
            args[k] = a.tolist()
        elif how == "scalar":
            args[k] = float(a.flat[0])
        elif how == "none":
            args[k] = None
        return args

    # a target must be an array akgpy can write; the other refusals are about shape, dtype, count
    ctx.must_fail = how in ("wrong_dtype", "wrong_shape", "too_few", "too_many", "none") or \
        (how in ("readonly", "list") and k == target) or (how == "scalar" and base[k].size > 1)
    if ctx.must_fail:
        ctx.save_graph(g)
        ctx.stage = "compile"
        prog = akgpy.fuse(g)
        ctx.stage = "call"
        prog(*make_args())
        return "correct", "call accepted"
    return check_graph(ctx, g, make_args=make_args)


@generator
def gen_alias_inplace(ctx: Context):
    """In-place targets that are, or overlap, another argument: issue 48's prog(a, a)."""
    from akgpy.testing import random_inputs
    b = _builder()
    n = int(ctx.pick([8, 32, 64]))
    kind = ctx.pick(["assign_transpose", "inplace_transpose", "inplace_matmul", "assign_reverse_rows"])
    t, y = b.input("t", (n, n)), b.input("y", (n, n))
    if kind == "assign_transpose":
        b.output(b.assign(t, y.transpose(1, 0) + 1.0))
    elif kind == "inplace_transpose":
        b.output(b.inplace_assign(t, y.transpose(1, 0) * 2.0 - t))
    elif kind == "inplace_matmul":
        b.output(b.inplace_assign(t, b.matmul(y, t)))
    else:
        rev = b.op("StridedSlice", [y], (n, n), "float32", begin=[n - 1, 0], end=[-n - 1, n], strides=[-1, 1])
        b.output(b.assign(t, rev + t))
    g = b.build()
    base = random_inputs(g, int(ctx.rng.integers(1 << 16)))
    shift = int(ctx.pick([0, 0, 1, n // 2]))  # rows y starts after t in one buffer; 0: the same array
    ctx.note(f"{kind} n={n} called with y = t shifted by {shift} rows", call={"shift_rows": shift})

    def make_args():
        buf = np.empty((n + shift, n), np.float32)
        buf[shift:] = base[1]
        buf[:n] = base[0]
        return [buf[:n], buf[shift:]]

    return check_graph(ctx, g, make_args=make_args)


@generator
def gen_random_extreme(ctx: Context):
    """tests/test_property_layout.py's random graphs on NaN/inf/-0/subnormal/float16-extreme inputs."""
    ctx.must_succeed = True
    import os
    import sys
    os.environ.setdefault("AKGPY_FUZZ_MAX_ELEMENTS", str(1 << 12))
    sys.path.insert(0, str(REPO / "tests"))
    from test_property_layout import layout_graphs

    from akgpy.testing import random_inputs
    model = bool(ctx.rng.random() < 0.25)
    g = ctx.hypothesis_draw(layout_graphs(model=model))
    schedule = ctx.pick(["poly", "poly", "plain"])
    inputs = random_inputs(g, int(ctx.rng.integers(1 << 16)))
    frac = float(ctx.pick([0.01, 0.1, 0.5]))
    sprinkle(ctx, inputs, frac, large=not any(op.name in SUMMING for op in g.ops))
    ctx.note(f"random {'model' if model else 'graph'} of {len(g.ops)} ops, {schedule}, {frac:.0%} special inputs",
             inputs=[a.tolist() for a in inputs] if sum(a.size for a in inputs) < 4096 else "random_inputs+sprinkle")
    return check_graph(ctx, g, inputs, **({} if model else {"schedule": schedule}))


@generator
def gen_long_chain(ctx: Context):
    """An AddN of many inputs or a long Neg chain (bounded so a case stays within seconds)."""
    ctx.must_succeed = True
    b = _builder()
    shape = _shape(ctx, 2, (1, 4, 16))
    if ctx.rng.random() < 0.5:
        count = int(ctx.rng.integers(2, 700))
        xs = [b.input(f"x{i}", shape) for i in range(count)]
        b.output(b.addn(*xs))
        what = f"AddN of {count} inputs {shape}"
    else:
        count = int(ctx.rng.integers(2, 600))
        x = b.input("x", shape)
        y = x
        for _ in range(count):
            y = -y
        b.output(y)
        what = f"chain of {count} Neg {shape}"
    ctx.note(what)
    return check_graph(ctx, b.build(), schedule=ctx.pick(["poly", "plain"]))


@generator
def gen_many_outputs(ctx: Context):
    ctx.must_succeed = True
    b = _builder()
    count = int(ctx.rng.integers(2, 120))
    x = b.input("x", _shape(ctx, 2, (3, 16, 64)))
    b.output(*[x * float(k + 2) for k in range(count)])
    ctx.note(f"{count} outputs x * k, x {x.shape}")
    return check_graph(ctx, b.build())


@generator
def gen_int_division(ctx: Context):
    """Integer RealDiv / Reciprocal with zero divisors and INT_MIN / -1."""
    ctx.must_succeed = True
    b = _builder()
    dtype = ctx.pick(["int32", "int32", "int64", "int8", "uint8"])
    shape = _shape(ctx, 2, (1, 5, 16))
    x, y = b.input("x", shape, dtype), b.input("y", shape, dtype)
    op = ctx.pick(["div", "div", "reciprocal", "div_const"])
    if op == "div":
        b.output(b.div(x, y))
    elif op == "reciprocal":
        b.output(b.reciprocal(y) + x)
    else:
        b.output(b.div(x, b.broadcast_to(0, shape, dtype)) + y)
    g = b.build()
    info = np.iinfo(dtype)
    pool = np.array([0, 0, 1, -1, 2, 7, info.min, info.max] if info.min < 0 else [0, 0, 1, 2, 7, info.max], dtype)
    inputs = [pool[ctx.rng.integers(len(pool), size=shape)] for _ in range(2)]
    ctx.note(f"{dtype} {op} {shape}", inputs=[a.tolist() for a in inputs])
    return check_graph(ctx, g, inputs, schedule=ctx.pick(["poly", "plain"]))


@generator
def gen_float_division(ctx: Context):
    """Float division by zero (a broadcast zero, a constant +-0, Reciprocal or Rsqrt of one): IEEE
    gives +-inf and NaN, never a refusal or a signal."""
    ctx.must_succeed = True
    b = _builder()
    dtype = ctx.pick(["float32", "float16"])
    shape = _shape(ctx, 2, (1, 3, 16, 37))
    x = b.input("x", shape, dtype)
    zero = float(ctx.pick([0.0, -0.0]))
    zeros = lambda: b.broadcast_to(zero, shape, dtype)  # noqa: E731
    forms = {"x / broadcast(0)": lambda: x / zeros(), "x / 0": lambda: x / zero,
             "reciprocal(broadcast(0)) + x": lambda: b.reciprocal(zeros()) + x, "broadcast(0) / x": lambda: zeros() / x,
             "x / (x - x)": lambda: x / (x - x), "rsqrt(broadcast(0)) * x": lambda: b.rsqrt(zeros()) * x}
    name = ctx.pick(sorted(forms))
    b.output(forms[name]())
    a = ctx.rng.uniform(-2, 2, shape).astype(dtype)
    sprinkle(ctx, [a], 0.2, large=True)
    ctx.note(f"{name} with zero {zero!r}, {dtype}{list(shape)}", inputs=[a.tolist()])
    return check_graph(ctx, b.build(), [a], schedule=ctx.pick(["poly", "plain"]))


@generator
def gen_float_identity(ctx: Context):
    """x - x, x * 0, (x + 1) - x, x == x, x / x ... on inputs with NaN and inf: no folding is exact."""
    ctx.must_succeed = True
    b = _builder()
    dtype = ctx.pick(["float32", "float16"])
    shape = _shape(ctx, 2, (1, 3, 16, 37))
    x = b.input("x", shape, dtype)
    forms = {"x-x": lambda: x - x, "x*0": lambda: x * 0.0, "(x+1)-x": lambda: (x + 1.0) - x,
             "x==x": lambda: b.equal(x, x), "x/x": lambda: x / x, "0*x+1": lambda: 0.0 * x + 1.0,
             "x+(-x)": lambda: x + (-x), "max(x,x)-x": lambda: b.maximum(x, x) - x,
             "sum(x-x)": lambda: (x - x).sum(axis=-1), "x*1-x": lambda: x * 1.0 - x}
    name = ctx.pick(sorted(forms))
    b.output(forms[name]())
    g = b.build()
    a = ctx.rng.uniform(-2, 2, shape).astype(dtype)
    sprinkle(ctx, [a], 0.3, large=name != "sum(x-x)")
    ctx.note(f"{name} on {dtype}{list(shape)} with NaN/inf", inputs=[a.tolist()])
    return check_graph(ctx, g, [a], schedule=ctx.pick(["poly", "plain"]))


@generator
def gen_cast_bool(ctx: Context):
    ctx.must_succeed = True
    b = _builder()
    dtype = ctx.pick(["float32", "float16"])
    shape = _shape(ctx, 2, (1, 3, 16, 37))
    x = b.input("x", shape, dtype)
    b.output(x.astype("bool") if ctx.rng.random() < 0.7 else x.astype("bool").astype("float32"))
    a = ctx.rng.uniform(-1, 1, shape).astype(dtype)
    sprinkle(ctx, [a], 0.4, large=True)
    ctx.note(f"Cast {dtype}{list(shape)} -> bool on NaN/+-0/subnormals", inputs=[a.tolist()])
    return check_graph(ctx, b.build(), [a], schedule=ctx.pick(["poly", "plain"]))


@generator
def gen_bool_matmul(ctx: Context):
    b = _builder()
    m, k, n = (int(ctx.pick([1, 3, 8, 16])) for _ in range(3))
    x, y = b.input("x", (m, k), "bool"), b.input("y", (k, n), "bool")
    b.output(b.matmul(x, y, dst_type=ctx.pick(["bool", "bool", "float32"])))
    ctx.note(f"bool MatMul ({m},{k}) x ({k},{n})")
    return check_graph(ctx, b.build())


@generator
def gen_reduce_cast_bool(ctx: Context):
    """A reduction of a Cast of a bool comparison (issue 48's boolx16 IntImm under poly)."""
    ctx.must_succeed = True
    b = _builder()
    shape = _shape(ctx, 2, (3, 16, 64))
    x, y = b.input("x", shape), b.input("y", shape)
    c = (x > y).astype(ctx.pick(["float32", "float16", "int32"]))
    axis = int(ctx.rng.integers(2))
    b.output(c.max(axis=axis) if ctx.rng.random() < 0.6 else c.sum(axis=axis))
    ctx.note(f"reduce(Cast(x > y)) {shape} axis {axis}")
    return check_graph(ctx, b.build(), schedule=ctx.pick(["poly", "poly", "plain"]))


@generator
def gen_bad_target(ctx: Context):
    import akgpy
    b = _builder()
    x = b.input("x", (4, 16))
    b.output(x + 1.0)
    good = ["llvm", "cpu", "host", None, {"kind": "llvm"}]
    bad = ["cuda", {"kind": "cuda", "arch": "sm_90"}, {"kind": "opencl"}, {"kind": "rocm"}, "vulkan", 7,
           {"arch": "sm_90"}, "llvm -mtriple=aarch64-linux-gnu", {"kind": "llvm", "mtriple": "riscv64-linux-gnu"},
           "", {"kind": "c"}]
    target = ctx.pick(good + bad + bad)
    ctx.must_fail = target not in good
    ctx.note(f"fuse(x + 1, target={target!r})", target=target)
    if ctx.must_fail:
        ctx.stage = "compile"
        akgpy.fuse(b.build(), target=target)
        return "correct", "compiled"
    return check_graph(ctx, b.build(), target=target)


@generator
def gen_bad_builder(ctx: Context):
    """Values the builder must refuse: axes out of range, fractional or negative dims, bad perms ..."""
    b = _builder()
    x = b.input("x", (4, 6))
    forms = {
        "sum(axis=7)": lambda: x.sum(axis=7), "sum(axis=-3)": lambda: x.max(axis=-3),
        "sum(axis=[0,0])": lambda: x.sum(axis=[0, 0]), "sum(axis=1.5)": lambda: x.sum(axis=1.5),
        "input dim 4.7": lambda: b.input("y", (4.7, 6)), "input dim -2": lambda: b.input("y", (-2, 6)),
        "input dim '6'": lambda: b.input("y", ("6", 6)), "input dim True": lambda: b.input("y", (True, 6)),
        "transpose(0,0)": lambda: x.transpose(0, 0), "transpose(0,2)": lambda: x.transpose(0, 2),
        "reshape(5,5)": lambda: x.reshape(5, 5), "reshape(2.0,12)": lambda: x.reshape(2.0, 12),
        "broadcast_to(x,(3,6))": lambda: b.broadcast_to(x, (3, 6)),
        "cast float128": lambda: x.astype("float128"), "dtype float8": lambda: b.input("y", (4, 6), "float8"),
        "matmul K 6x5": lambda: b.matmul(x, b.input("y", (5, 3))),
        "addn shapes": lambda: b.addn(x, b.input("y", (6, 4))),
        "op Frobnicate": lambda: b.op("Frobnicate", [x], (4, 6), "float32"),
        "op Add wrong shape": lambda: b.op("Add", [x, x], (4, 7), "float32"),
        "op ReduceSum axis str": lambda: b.op("ReduceSum", [x], (4,), "float32", axis="1", keep_dims=False),
        "pad negative": lambda: b.op("PadAkg", [x], (4, 4), "float32", head=[0, 0], tail=[0, -2], pad_val=0),
        "strided step 0": lambda: b.op("StridedSlice", [x], (4, 6), "float32", begin=[0, 0], end=[4, 6],
                                       strides=[1, 0]),
    }
    name = ctx.pick(sorted(forms))
    ctx.must_fail = True
    ctx.note(f"builder: {name}")
    y = forms[name]()
    b.output(y)
    ctx.stage = "build"
    g = b.build()
    ctx.save_graph(g)
    import akgpy
    ctx.stage = "compile"
    akgpy.fuse(g)
    return "correct", "built and compiled"


@generator
def gen_big_index(ctx: Context):
    """Tensors of 2^31 elements or more compile (CI compiles, it does not run 8 GiB)."""
    ctx.must_succeed = True
    import akgpy
    b = _builder()
    rows = int(ctx.pick([1 << 16, 65537, 3 << 15]))
    x = b.input("x", (rows, 1 << 15), ctx.pick(["float32", "float16"]))
    b.output(ctx.pick([lambda: x + 1.0, lambda: x.sum(axis=1), lambda: x.transpose(1, 0)])())
    g = b.build()
    ctx.save_graph(g)
    ctx.note(f"{x.dtype}[{rows}, 32768] ({rows * 32768 / 2 ** 31:.2f} x 2^31 elements), compile only")
    ctx.stage = "compile"
    akgpy.fuse(g)
    return "correct", "compiled"

