"""The kernels/ pattern library: every pattern compiles at small sizes and matches the numpy
reference, its graph round-trips through composite JSON, its hand-written numpy twin
computes the same thing, and `python -m kernels` reports (and exits on) a failure."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

# kernels/ is a top-level folder of the repo, not part of the installed akgpy package.
ROOT = str(Path(__file__).resolve().parents[1])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import akgpy  # noqa: E402
import kernels.__main__ as driver  # noqa: E402
from akgpy import reference, testing  # noqa: E402
from kernels import PATTERNS  # noqa: E402

NAMES = sorted(PATTERNS)
REQUIRED = {"layernorm", "softmax", "bias_gelu", "adam", "batchnorm_infer", "rmsnorm", "bias_relu",
            "attn_head_split"}


def small(name: str) -> akgpy.Graph:
    build = PATTERNS[name]
    return build(**build.small)


@pytest.fixture(scope="module")
def programs():
    cache: dict[str, tuple[akgpy.Graph, object]] = {}

    def get(name):
        if name not in cache:
            g = small(name)
            cache[name] = (g, akgpy.fuse(g))
        return cache[name]
    return get


def _fmt(bad) -> str:
    return "; ".join(f"{m.tensor}: {m.bad}/{m.total} off (max {m.max_abs:.3g}, tol {m.tol:g}) {m.example}" for m in bad)


def test_library_has_the_required_patterns():
    assert REQUIRED <= set(PATTERNS), f"missing: {REQUIRED - set(PATTERNS)}"
    for name, build in PATTERNS.items():
        assert callable(build) and callable(build.numpy_impl) and isinstance(build.small, dict), name


@pytest.mark.parametrize("name", NAMES)
def test_pattern_matches_reference(name, programs):
    g, prog = programs(name)
    assert len(prog.kernels) >= 1
    bad = testing.check_program(g, prog)
    assert bad == [], f"{name}: {_fmt(bad)}"


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("sizes", ["small", "default"])
def test_graph_round_trips_through_composite(name, sizes):
    build = PATTERNS[name]
    g = build(**build.small) if sizes == "small" else build()
    back = akgpy.load_composite(g.to_composite())
    assert back == g
    assert akgpy.structural_hash(back) == akgpy.structural_hash(g)


@pytest.mark.parametrize("name", NAMES)
def test_numpy_twin_computes_the_same(name):
    """The speed baseline must be the same computation, or the speedup column means nothing."""
    g = small(name)
    inputs = testing.random_inputs(g, seed=1)
    np_in = [a.copy() for a in inputs]
    ref_in = [a.copy() for a in inputs]
    got = PATTERNS[name].numpy_impl(*np_in)
    want = reference.run(g, ref_in)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.shape == b.shape and a.dtype == b.dtype
    # The twin rounds fp16 once at the end where the graph rounds every op: 1e-2 there.
    tol = 1e-2 if any(g.tensors[n].dtype == "float16" for n in g.inputs) else 1e-4
    for a, b in zip(got, want):
        np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=tol, atol=tol)
    for target in g.inplace_targets():
        k = g.inputs.index(target)
        assert not np.array_equal(ref_in[k], inputs[k]), f"reference left {target} unchanged"
        np.testing.assert_allclose(np_in[k], ref_in[k], rtol=tol, atol=tol, err_msg=target)


@pytest.mark.parametrize("name", ["bias_relu", "bias_gelu", "bias_gelu_fp16", "softmax", "layernorm",
                                  "attn_head_split"])
def test_signed_inputs(name, programs):
    """random_inputs are all positive, so ReLU never clips and GELU never sees x < 0;
    check these patterns on inputs of both signs too."""
    g, prog = programs(name)
    rng = np.random.default_rng(7)
    inputs = [rng.uniform(-2.0, 2.0, g.tensors[n].shape).astype(g.tensors[n].dtype) for n in g.inputs]
    kin, ref_in = [a.copy() for a in inputs], [a.copy() for a in inputs]
    got = prog(*kin)
    want = reference.run(g, ref_in)
    bad = testing.compare(g, got, kin, want, ref_in)
    assert bad == [], f"{name}: {_fmt(bad)}"
    if name == "bias_relu":
        assert (got[0] == 0).any() and (got[0] > 0).any()


def test_adam_updates_in_place(programs):
    g, prog = programs("adam")
    inputs = testing.random_inputs(g)
    before = [a.copy() for a in inputs]
    assert prog(*inputs) == ()
    for name in ("param", "m", "v"):
        k = g.inputs.index(name)
        assert not np.array_equal(inputs[k], before[k]), f"{name} was not updated in place"
    for name in ("grad", "lr"):
        k = g.inputs.index(name)
        np.testing.assert_array_equal(inputs[k], before[k])


def test_driver_small_run_passes(capsys):
    assert driver.main(["--small", "--repeat", "2", "--only", "bias_relu", "--only", "adam"]) == 0
    out = capsys.readouterr().out
    assert "bias_relu" in out and "adam" in out and "PASS" in out and "FAIL" not in out


def test_driver_reports_a_wrong_kernel(monkeypatch, capsys):
    real_fuse = akgpy.fuse

    def off_by_one(graph, **kw):
        prog = real_fuse(graph, **kw)

        class Wrong:
            kernels = prog.kernels

            def __call__(self, *args):
                return tuple(o + np.ones((), o.dtype) for o in prog(*args))
        return Wrong()

    monkeypatch.setattr(akgpy, "fuse", off_by_one)
    assert driver.main(["--small", "--repeat", "1", "--only", "softmax"]) == 1
    assert "FAIL" in capsys.readouterr().out
