"""torch.compile(model, backend="akgpy"): results match eager, training included, unsupported ops
stay torch calls, each input shape compiled, tensors cross without copies."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import numpy as np  # noqa: E402

import akgpy.torch as akt  # noqa: E402
from akgpy.torch.backend import akgpy_backend  # noqa: E402
from akgpy.torch.fused import to_numpy  # noqa: E402

TOL = dict(rtol=1e-4, atol=1e-4)
pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _mlp(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 16), torch.nn.ReLU(),
                               torch.nn.Linear(16, 4))


def _forward_graph():
    rep = akt.last_report()
    assert rep is not None and rep.graphs
    return rep.graphs[0]


def test_mlp_forward_matches_eager():
    m = _mlp()
    x = torch.randn(5, 8)
    with torch.no_grad():
        got = torch.compile(m, backend=akgpy_backend)(x)
        want = m(x)
    torch.testing.assert_close(got, want, **TOL)
    g = _forward_graph()
    assert g.programs >= 1 and g.fused_nodes >= 5  # three addmm, gelu, relu at least
    assert not g.left_to_torch(), str(g)


def test_unsupported_op_in_the_middle_stays_in_torch():
    def f(x):
        y = torch.relu(x) * 2.0 + 1.0
        return torch.exp(torch.cumsum(y, dim=1) * 0.1) - x

    x = torch.randn(4, 6)
    got = torch.compile(f, backend=akgpy_backend)(x)
    torch.testing.assert_close(got, f(x), **TOL)
    g = _forward_graph()
    left = g.left_to_torch()
    assert list(left) == ["aten.cumsum.default"], str(g)
    assert "no akgpy converter" in left["aten.cumsum.default"]
    assert g.programs == 2 and g.fused_nodes == g.nodes - 1, str(g)


def test_transformer_encoder_layer_forward_matches_eager():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0,
                                             batch_first=True).eval()
    x = torch.randn(2, 5, 16)
    got = torch.compile(layer, backend=akgpy_backend)(x)
    torch.testing.assert_close(got, layer(x), **TOL)
    g = _forward_graph()
    fused = [op for p in g.partitions if p.programs for op in p.ops]
    for op in ("aten.native_layer_norm.default", "aten._softmax.default", "aten.bmm.default", "aten.select.int"):
        assert op in fused, str(g)
    assert not g.left_to_torch(), str(g)


def test_mask_and_indexing_ops_match_eager():
    def f(x):
        m = x > 0.25
        y = torch.where(~m, x * 2.0, torch.exp(x))
        hit = torch.any(x != 0.5, dim=1, keepdim=True)
        z = y[:, 1:5:2] + y.select(1, 0).unsqueeze(1) + torch.full_like(y[:, :2], 3.0) * hit
        return z, m.logical_not()

    x = torch.randn(6, 7)
    got, want = torch.compile(f, backend=akgpy_backend)(x), f(x)
    torch.testing.assert_close(got[0], want[0], **TOL)
    assert torch.equal(got[1], want[1])
    g = _forward_graph()
    assert not g.left_to_torch() and g.programs == 1, str(g)


def test_conversion_failure_runs_the_partition_in_torch(monkeypatch):
    from akgpy.torch import convert
    monkeypatch.setitem(convert.CONVERTERS, torch.ops.aten.tanh.default,
                        lambda b, out, x: b.reduce_sum(x, 0))  # disagrees with torch's shape

    def f(x):
        return torch.tanh(x * 2.0) + 1.0

    x = torch.randn(3, 4)
    torch.testing.assert_close(torch.compile(f, backend=akgpy_backend)(x), f(x), **TOL)
    g = _forward_graph()
    (p,) = g.partitions
    assert p.programs == 0 and len(p.fallbacks) == 1, str(g)
    assert "torch infers [3, 4]" in next(iter(p.fallbacks.values()))
    assert "aten.tanh.default" in g.left_to_torch()


def test_mlp_training_step_gradients_match_eager():
    ref, m = _mlp(1), _mlp(1)
    x, target = torch.randn(6, 8), torch.randn(6, 4)
    step = torch.compile(lambda xs, ts: torch.nn.functional.mse_loss(m(xs), ts), backend=akgpy_backend)
    loss = step(x, target)
    loss.backward()
    ref_loss = torch.nn.functional.mse_loss(ref(x), target)
    ref_loss.backward()
    torch.testing.assert_close(loss, ref_loss, **TOL)
    for (name, p), q in zip(m.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, **TOL, msg=lambda s, n=name: f"{n}: {s}")
    kinds = {g.kind: g for g in akt.last_report().graphs}
    assert kinds["backward"].programs >= 1, str(akt.last_report())
    for opt in (torch.optim.SGD(m.parameters(), lr=0.1), torch.optim.SGD(ref.parameters(), lr=0.1)):
        opt.step()
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, **TOL)


def test_transformer_encoder_layer_training_gradients_match_eager():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)
    ref = torch.nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)
    ref.load_state_dict(layer.state_dict())
    x = torch.randn(2, 5, 16)
    torch.compile(layer, backend=akgpy_backend)(x).square().mean().backward()
    ref(x).square().mean().backward()
    for (name, p), q in zip(layer.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, **TOL, msg=lambda s, n=name: f"{n}: {s}")
    kinds = {g.kind: g for g in akt.last_report().graphs}
    assert kinds["forward"].fused_nodes == kinds["forward"].nodes and kinds["backward"].programs >= 1, \
        str(akt.last_report())


@pytest.mark.parametrize("dynamic,shapes,rows_seen,programs", [(False, (3, 7), {7}, 1), (True, (3, 9), {3, 9}, 2)])
def test_each_input_shape_is_compiled_and_matches(dynamic, shapes, rows_seen, programs):
    """dynamic=False: the second shape is a second dynamo graph; dynamic=True: one graph with
    symbolic sizes, whose partition compiles once per concrete shape."""
    m = _mlp()
    c = torch.compile(m, backend=akgpy_backend, dynamic=dynamic)
    with torch.no_grad():
        for rows in shapes:
            x = torch.randn(rows, 8)
            torch.testing.assert_close(c(x), m(x), **TOL)
    g = _forward_graph()
    rows = {k[0][0] for p in g.partitions for key in p.module.compiled for k in key if not isinstance(k, int) and k[0]}
    assert g.programs >= programs and rows_seen <= rows, str(g)


def test_backend_by_name_through_the_entry_point():
    from importlib.metadata import entry_points
    assert any(ep.value == "akgpy.torch.backend:akgpy_backend" for ep in entry_points(group="torch_dynamo_backends")
               if ep.name == "akgpy")
    m = _mlp()
    x = torch.randn(2, 8)
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(m, backend="akgpy")(x), m(x), **TOL)
    assert _forward_graph().programs >= 1


def test_tensors_cross_without_copies():
    t = torch.randn(4, 5)
    assert to_numpy(t).ctypes.data == t.data_ptr()
    produced = []

    def f(x):
        return torch.tanh(x) * 2.0 + 1.0

    c = torch.compile(f, backend=akgpy_backend)
    x = torch.randn(8, 16)
    c(x)
    part = next(p for g in akt.last_report().graphs for p in g.partitions if p.programs).module
    (key, entry), = part.compiled.items()
    program = entry.program

    def recording(*arrays):
        outs = program(*arrays)
        produced.extend(outs)
        return outs

    entry.program = recording
    y = c(x)
    torch.testing.assert_close(y, f(x), **TOL)
    assert isinstance(produced[0], np.ndarray)
    assert y.data_ptr() == produced[0].ctypes.data


def _conv_net(seed=0):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.Flatten(),
                            torch.nn.Linear(8 * 6 * 6, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).eval()
    with torch.no_grad():  # running statistics away from the identity, so folding them matters
        m[1].running_mean.uniform_(-0.5, 0.5)
        m[1].running_var.uniform_(0.5, 2.0)
    return m


def _partitions(kind):
    return [p.module for g in akt.last_report().graphs if g.kind == kind for p in g.partitions]


def test_inference_parameters_are_folded_into_the_program():
    m = _conv_net()
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        got = torch.compile(m, backend=akgpy_backend)(x)
        want = m(x)
    torch.testing.assert_close(got, want, **TOL)
    parts = _partitions("inference")
    assert parts and all(p.held for p in parts)
    for p in parts:
        (entry,) = p.compiled.values()
        assert entry.program is not None and entry.held
        # the per-call program takes only what is not a parameter or buffer: the activation
        assert set(entry.inputs).isdisjoint(p.held) and entry.inputs


def test_in_place_weight_update_is_seen_not_stale():
    m = _conv_net()
    c = torch.compile(m, backend=akgpy_backend)
    x = torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        before = c(x)
        torch.testing.assert_close(before, m(x), **TOL)
        m[4].weight.add_(1.0)  # an in-place update bumps the parameter's _version
        m[1].running_mean.add_(0.25)  # a buffer too
        m[0].weight.mul_(2.0)
        after = c(x)
        want = m(x)
    assert not torch.allclose(before, want, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(after, want, **TOL)
    (part,) = _partitions("inference")
    assert part.record.programs == 1  # the shape's program replaced, not added


def test_training_graph_keeps_parameters_as_inputs():
    m = _mlp()
    x = torch.randn(5, 8)
    out = torch.compile(m, backend=akgpy_backend)(x)
    out.sum().backward()
    parts = _partitions("forward")
    assert parts and not any(p.held for p in parts)
    torch.testing.assert_close(out, m(x), **TOL)
