"""torch.compile(backend="akgpy") on real model families (small configs, random weights, nothing
downloaded): Hugging Face BERT and GPT-2, a ResNet basic block, a MobileNetV2 inverted residual,
nn.TransformerEncoderLayer with symbolic sizes. Each matches eager, and its report says how many
ATen nodes akgpy ran and how many stayed torch calls."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import akgpy.torch as akt  # noqa: E402
from akgpy.torch.backend import akgpy_backend  # noqa: E402
from akgpy.zoo_torch import import_transformers  # noqa: E402

TOL = dict(rtol=1e-4, atol=1e-4)
pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _left_to_torch(report) -> tuple[int, int]:
    """(ATen nodes akgpy ran, nodes left to torch) over every graph of the report."""
    fused = sum(g.fused_nodes for g in report.graphs)
    return fused, sum(g.nodes for g in report.graphs) - fused


def _check_report(max_torch_fraction: float):
    rep = akt.last_report()
    assert rep is not None and rep.graphs
    fused, torch_nodes = _left_to_torch(rep)
    assert fused > 0 and torch_nodes <= max_torch_fraction * (fused + torch_nodes), str(rep)
    for g in rep.graphs:
        assert not [p for p in g.partitions if p.fallbacks], str(rep)
    return rep


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_hf_bert_matches_eager(attn):
    tf = import_transformers()
    torch.manual_seed(0)
    cfg = tf.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=32, attn_implementation=attn)
    model = tf.BertModel(cfg).eval()
    ids = torch.randint(0, 64, (2, 8))
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 5:] = 0
    with torch.no_grad():
        want = model(ids, attention_mask=mask)
        got = torch.compile(model, backend=akgpy_backend)(ids, attention_mask=mask)
    torch.testing.assert_close(got.last_hidden_state, want.last_hidden_state, **TOL)
    torch.testing.assert_close(got.pooler_output, want.pooler_output, **TOL)
    rep = _check_report(0.0)
    ops = {op for g in rep.graphs for p in g.partitions for op in p.ops}
    assert {"aten.embedding.default", "aten.native_layer_norm.default", "aten.addmm.default"} <= ops, str(rep)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_hf_gpt2_matches_eager(attn):
    tf = import_transformers()
    torch.manual_seed(0)
    cfg = tf.GPT2Config(vocab_size=64, n_embd=32, n_layer=2, n_head=2, n_positions=32, attn_implementation=attn,
                        bos_token_id=0, eos_token_id=0)
    model = tf.GPT2Model(cfg).eval()
    ids = torch.randint(0, 64, (2, 8))
    with torch.no_grad():
        want = model(ids).last_hidden_state
        got = torch.compile(model, backend=akgpy_backend)(ids).last_hidden_state
    torch.testing.assert_close(got, want, **TOL)
    _check_report(0.0)


def _conv_bn(cin, cout, k, stride=1, groups=1):
    return [torch.nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), torch.nn.BatchNorm2d(cout)]


class ResNetBlock(torch.nn.Module):
    """A ResNet stem (7x7/2 conv, max pool) and one basic block with a strided 1x1 downsample,
    then global average pooling and a classifier."""

    def __init__(self, c=8, classes=5):
        super().__init__()
        self.stem = torch.nn.Sequential(*_conv_bn(3, c, 7, 2), torch.nn.ReLU(), torch.nn.MaxPool2d(3, 2, 1))
        self.body = torch.nn.Sequential(*_conv_bn(c, 2 * c, 3, 2), torch.nn.ReLU(), *_conv_bn(2 * c, 2 * c, 3))
        self.down = torch.nn.Sequential(*_conv_bn(c, 2 * c, 1, 2))
        self.head = torch.nn.Linear(2 * c, classes)

    def forward(self, x):
        x = self.stem(x)
        x = torch.relu(self.body(x) + self.down(x))
        return self.head(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(x, 1), 1))


class InvertedResidual(torch.nn.Module):
    """MobileNetV2's block: 1x1 expansion, 3x3 depthwise, 1x1 projection (ReLU6 between),
    residual add, then 2x2 average pooling."""

    def __init__(self, c=8, expand=4):
        super().__init__()
        h = c * expand
        self.body = torch.nn.Sequential(*_conv_bn(c, h, 1), torch.nn.ReLU6(), *_conv_bn(h, h, 3, groups=h),
                                        torch.nn.ReLU6(), *_conv_bn(h, c, 1))
        self.pool = torch.nn.AvgPool2d(2)

    def forward(self, x):
        return self.pool(x + self.body(x))


def _randomise_bn(model):
    torch.manual_seed(1)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.normal_()
            m.running_var.uniform_(0.5, 2.0)
            m.weight.data.normal_()
            m.bias.data.normal_()
    return model.eval()


@pytest.mark.parametrize("block,shape", [(ResNetBlock, (2, 3, 32, 32)), (InvertedResidual, (2, 8, 12, 12))])
def test_cnn_block_matches_eager(block, shape):
    torch.manual_seed(0)
    model = _randomise_bn(block())
    x = torch.randn(*shape)
    with torch.no_grad():
        want = model(x)
        got = torch.compile(model, backend=akgpy_backend)(x)
    torch.testing.assert_close(got, want, **TOL)
    rep = _check_report(0.0)
    ops = {op for g in rep.graphs for p in g.partitions for op in p.ops}
    assert "aten.convolution.default" in ops, str(rep)


def _encoder_layer():
    torch.manual_seed(0)
    return torch.nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)


@pytest.mark.parametrize("dynamic", [True, None])
def test_encoder_layer_with_symbolic_sizes(dynamic):
    """dynamic=True traces symbolic sizes from the first call; dynamic=None (the default) retraces
    with them after a second shape. Either way the views to symbolic sizes stay inside akgpy's
    partition, which compiles one program per concrete shape."""
    layer = _encoder_layer()  # train mode (dropout 0): eval under no_grad takes torch's one-op fast path
    c = torch.compile(layer, backend=akgpy_backend, dynamic=dynamic)
    with torch.no_grad():
        for batch, seq in ((2, 5), (3, 7), (2, 6)):
            x = torch.randn(batch, seq, 16)
            torch.testing.assert_close(c(x), layer(x), **TOL)
    rep = _check_report(0.0)
    (g,) = rep.graphs
    keys = [k for p in g.partitions for k in p.module.compiled]
    assert any(isinstance(k, int) for key in keys for k in key), "no symbolic size reached a partition"
    assert g.programs >= 2, str(rep)


def test_resnet_block_training_gradients_match_eager():
    """Training mode: batch norm on batch statistics (its running statistics updated in akgpy's
    program); convolution and max-pool backward stay torch calls."""
    torch.manual_seed(0)
    model, ref = ResNetBlock(), ResNetBlock()
    ref.load_state_dict(model.state_dict())
    x = torch.randn(2, 3, 16, 16)
    torch.compile(model, backend=akgpy_backend)(x).square().mean().backward()
    ref(x).square().mean().backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, **TOL, msg=lambda s, n=name: f"{n}: {s}")
    for (name, p), q in zip(model.named_buffers(), ref.buffers()):  # batch norm's running statistics
        torch.testing.assert_close(p, q, **TOL, msg=lambda s, n=name: f"{n}: {s}")
    kinds = {g.kind: g for g in akt.last_report().graphs}
    ops = {op for p in kinds["forward"].partitions if p.programs for op in p.ops}
    assert "aten._native_batch_norm_legit_functional.default" in ops, str(akt.last_report())
    assert kinds["backward"].programs >= 1, str(akt.last_report())
