"""Real model families as torch modules, exported to ONNX the way users export them.

Hugging Face BERT, GPT-2, ViT and T5 encoders are built from small configs with random
weights (nothing is downloaded); the ResNet- and MobileNetV2-style CNNs are written here
(strided, grouped and depthwise convolution, max/average/global pooling, ReLU6, residual
downsampling). BERT and ViT use transformers' default attention (sdpa: its exports guard
the softmax with IsNaN), GPT-2 and T5 the eager one (GPT-2's causal mask as a Where with a large
negative constant). `export(model, inputs, exporter)` runs torch's TorchScript exporter at opset 17
or its dynamo exporter at opset 18. torch and transformers are imported inside the functions,
so importing this module costs nothing. Tests (tests/test_onnx_models.py) and bench/ use it.
"""
from __future__ import annotations

import io
import warnings
from typing import Any, Callable

import numpy as np

from .errors import UnsupportedOpError

EXPORTERS = {"torchscript": 17, "dynamo": 18}  # exporter -> the opset it is run at


def import_transformers():
    """transformers, imported so that it ignores a `kernels` module that is not Hugging Face's:
    this repository's kernels/ folder shadows the `kernels` distribution when the repository
    root is on sys.path (pytest, python -m), and transformers then fails importing from it."""
    import importlib.metadata
    import importlib.util
    spec = importlib.util.find_spec("kernels")
    try:
        real = str(importlib.metadata.distribution("kernels").locate_file("kernels/__init__.py"))
    except importlib.metadata.PackageNotFoundError:
        real = None
    if spec is not None and real is not None and spec.origin != real:
        import transformers.utils
        import transformers.utils.import_utils as iu
        iu.is_kernels_available = transformers.utils.is_kernels_available = lambda *a, **k: False
    import transformers
    return transformers


def _seeded(seed: int) -> None:
    import torch
    torch.manual_seed(seed)


def bert(hidden: int = 64, layers: int = 2, heads: int = 2, vocab: int = 128, attention: str = "sdpa",
         positions: int = 64):
    tf = import_transformers()
    BertConfig, BertModel = tf.BertConfig, tf.BertModel
    cfg = BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                     intermediate_size=4 * hidden, max_position_embeddings=positions, attn_implementation=attention)
    return BertModel(cfg, add_pooling_layer=False)


def gpt2(hidden: int = 64, layers: int = 2, heads: int = 2, vocab: int = 128, attention: str = "eager",
         positions: int = 64):
    tf = import_transformers()
    GPT2Config, GPT2Model = tf.GPT2Config, tf.GPT2Model
    cfg = GPT2Config(vocab_size=vocab, n_embd=hidden, n_layer=layers, n_head=heads, n_positions=positions,
                     attn_implementation=attention, use_cache=False)
    return GPT2Model(cfg)


def vit(hidden: int = 64, layers: int = 2, heads: int = 2, image: int = 32, patch: int = 8,
        attention: str = "sdpa"):
    tf = import_transformers()
    ViTConfig, ViTModel = tf.ViTConfig, tf.ViTModel
    cfg = ViTConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                    intermediate_size=4 * hidden, image_size=image, patch_size=patch, num_channels=3,
                    attn_implementation=attention)
    return ViTModel(cfg, add_pooling_layer=False)


def t5_encoder(d_model: int = 64, layers: int = 2, heads: int = 2, vocab: int = 128):
    tf = import_transformers()
    T5Config, T5EncoderModel = tf.T5Config, tf.T5EncoderModel
    cfg = T5Config(vocab_size=vocab, d_model=d_model, d_kv=d_model // heads, d_ff=4 * d_model, num_layers=layers,
                   num_heads=heads, relative_attention_num_buckets=32, attn_implementation="eager",
                   use_cache=False)
    return T5EncoderModel(cfg)


def resnet(width: int = 16, classes: int = 10):
    """A ResNet-style net: 7x7/2 stem, 3x3/2 max pool, a basic block and a downsampling block
    (strided 3x3 and a 1x1/2 shortcut), global average pool, a linear head."""
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = None if stride == 1 and cin == cout else nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            self.relu = nn.ReLU()

        def forward(self, x):
            y = self.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return self.relu(y + (x if self.down is None else self.down(x)))

    class ResNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                                      nn.MaxPool2d(3, 2, 1))
            self.layer1 = Block(width, width, 1)
            self.layer2 = Block(width, 2 * width, 2)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(2 * width, classes)

        def forward(self, pixel_values):
            y = self.layer2(self.layer1(self.stem(pixel_values)))
            return self.fc(self.pool(y).flatten(1))

    return ResNet()


def mobilenet_v2(width: int = 16, classes: int = 10):
    """A MobileNetV2-style net: inverted residuals (1x1 expand, 3x3 depthwise, 1x1 project) with
    ReLU6, a strided one and a residual one, a grouped 3x3 conv, an average pool and a linear head."""
    import torch.nn as nn

    def cbr(cin, cout, k, s, groups=1):
        return [nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout), nn.ReLU6()]

    class Inverted(nn.Module):
        def __init__(self, cin: int, cout: int, stride: int, expand: int = 4):
            super().__init__()
            mid = cin * expand
            self.body = nn.Sequential(*cbr(cin, mid, 1, 1), *cbr(mid, mid, 3, stride, groups=mid),
                                      nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            y = self.body(x)
            return x + y if self.residual else y

    class MobileNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(*cbr(3, width, 3, 2), Inverted(width, width, 1),
                                          Inverted(width, 2 * width, 2), *cbr(2 * width, 2 * width, 3, 1, groups=4),
                                          nn.AvgPool2d(2, 2))
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(2 * width, classes)

        def forward(self, pixel_values):
            return self.fc(self.pool(self.features(pixel_values)).flatten(1))

    return MobileNet()


# family -> (builder, example inputs for (batch, size)): size is the sequence length or image side
FAMILIES: dict[str, tuple[Callable[[], Any], Callable[[int, int], dict[str, np.ndarray]]]] = {}


def _tokens(batch: int, seq: int, seed: int = 0, vocab: int = 128, mask: bool = True) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, (batch, seq), dtype=np.int64)
    out = {"input_ids": ids}
    if mask:
        m = np.ones((batch, seq), dtype=np.int64)
        m[0, seq - seq // 4:] = 0  # padding on the first sequence: the mask changes the result
        out["attention_mask"] = m
    return out


def _image(batch: int, side: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"pixel_values": rng.standard_normal((batch, 3, side, side)).astype(np.float32)}


FAMILIES.update({
    "bert": (bert, lambda n, s: _tokens(n, s)),
    "gpt2": (gpt2, lambda n, s: _tokens(n, s)),
    "t5_encoder": (t5_encoder, lambda n, s: _tokens(n, s)),
    "vit": (vit, lambda n, s: _image(n, s)),
    "resnet": (resnet, lambda n, s: _image(n, s)),
    "mobilenet_v2": (mobilenet_v2, lambda n, s: _image(n, s)),
})


def build(family: str, seed: int = 0, **config):
    """The family's torch module (its builder called with `config`) in eval mode, weights seeded."""
    if family not in FAMILIES:
        raise UnsupportedOpError(f"unknown model family {family!r}; known: {', '.join(FAMILIES)}")
    return _prepared(FAMILIES[family][0], config, seed)


def _prepared(builder: Callable[..., Any], config: dict, seed: int):
    _seeded(seed)
    m = builder(**config)
    for p in m.parameters():  # BatchNorm's running stats stay 0/1 otherwise: randomise them too
        p.requires_grad_(False)
    for mod in m.modules():
        if hasattr(mod, "running_mean") and mod.running_mean is not None:
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 1.5)
    return m.eval()


def inputs(family: str, batch: int, size: int) -> dict[str, np.ndarray]:
    """Example inputs for a family, by keyword name as the module's forward takes them."""
    if family not in FAMILIES:
        raise UnsupportedOpError(f"unknown model family {family!r}; known: {', '.join(FAMILIES)}")
    return FAMILIES[family][1](batch, size)


def export(model, example: dict[str, np.ndarray], exporter: str = "torchscript", dynamic: bool = False) -> bytes:
    """The module exported with torch.onnx at the exporter's opset (EXPORTERS); inputs by the
    example's names, one output (the first of the module's). Static shapes of `example`, or with
    `dynamic` every input dim symbolic but an image's channels (bind them with
    from_onnx(shapes=))."""
    import torch
    if exporter not in EXPORTERS:
        raise UnsupportedOpError(f"unknown exporter {exporter!r}; known: {', '.join(EXPORTERS)}")
    names = list(example)

    class First(torch.nn.Module):  # HF models return a ModelOutput; export its first tensor
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, *args):
            out = self.m(**dict(zip(names, args)))
            return out if isinstance(out, torch.Tensor) else out[0]

    args = tuple(torch.from_numpy(example[n]) for n in names)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            f = io.BytesIO()
            axes = {n: {d: f"{n}_{d}" for d in range(example[n].ndim) if example[n].ndim != 4 or d != 1}
                    for n in names} if dynamic else None
            torch.onnx.export(First(), args, f, dynamo=False, opset_version=EXPORTERS[exporter],
                              input_names=names, output_names=["output"], dynamic_axes=axes)
            return f.getvalue()
        if dynamic:
            raise UnsupportedOpError("dynamic shapes are exported with the TorchScript exporter here")
        prog = torch.onnx.export(First(), args, dynamo=True, opset_version=EXPORTERS[exporter],
                                 input_names=names, output_names=["output"], verbose=False)
        return prog.model_proto.SerializeToString()


def exported(family: str, exporter: str, batch: int, size: int, seed: int = 0,
             dynamic: bool = False) -> tuple[bytes, dict[str, np.ndarray]]:
    """(ONNX bytes, example inputs) for one family, exporter and input shape."""
    ex = inputs(family, batch, size)
    return export(build(family, seed), ex, exporter, dynamic), ex


# The bench's fixed sizes (bench/bench_models.py, bench/bench_torch.py): name -> (builder, its
# config, example inputs). The transformer entries are the base/small configs with one layer.
def resnet50(classes: int = 1000):
    """ResNet-50's architecture (bottleneck blocks [3, 4, 6, 3], widths 64-512, expansion 4), written
    here: the registry's torchvision does not load with the CPU torch 2.13."""
    import torch.nn as nn

    class Bottleneck(nn.Module):
        def __init__(self, cin: int, width: int, stride: int):
            super().__init__()
            cout = 4 * width
            self.body = nn.Sequential(
                nn.Conv2d(cin, width, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                nn.Conv2d(width, cout, 1, bias=False), nn.BatchNorm2d(cout))
            self.down = None if stride == 1 and cin == cout else nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))
            self.relu = nn.ReLU()

        def forward(self, x):
            return self.relu(self.body(x) + (x if self.down is None else self.down(x)))

    layers, cin = [], 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for k in range(blocks):
            layers.append(Bottleneck(cin, width, stride if k == 0 else 1))
            cin = 4 * width

    class ResNet50(nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                      nn.MaxPool2d(3, 2, 1))
            self.layers = nn.Sequential(*layers)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(cin, classes)

        def forward(self, pixel_values):
            return self.fc(self.pool(self.layers(self.stem(pixel_values))).flatten(1))
    return ResNet50()


def mobilenet_v2_full(classes: int = 1000):
    """MobileNetV2's architecture (width 1.0: the inverted-residual table t, c, n, s of the paper)."""
    import torch.nn as nn

    def cbr(cin, cout, k, s, groups=1):
        return [nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout), nn.ReLU6()]

    class Inverted(nn.Module):
        def __init__(self, cin, cout, stride, t):
            super().__init__()
            mid = cin * t
            body = (cbr(cin, mid, 1, 1) if t != 1 else []) + cbr(mid, mid, 3, stride, groups=mid)
            self.body = nn.Sequential(*body, nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))
            self.residual = stride == 1 and cin == cout

        def forward(self, x):
            y = self.body(x)
            return x + y if self.residual else y

    feats, cin = cbr(3, 32, 3, 2), 32
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                       (6, 320, 1, 1)):
        for k in range(n):
            feats.append(Inverted(cin, c, s if k == 0 else 1, t))
            cin = c
    feats += cbr(cin, 1280, 1, 1)

    class MobileNetV2(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(*feats)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(1280, classes)

        def forward(self, pixel_values):
            return self.fc(self.pool(self.features(pixel_values)).flatten(1))
    return MobileNetV2()


BENCH: dict[str, tuple[Callable[..., Any], dict, Callable[[], dict[str, np.ndarray]]]] = {
    "bert_base_layer": (bert, dict(hidden=768, layers=1, heads=12, vocab=30522, positions=512),
                        lambda: _tokens(1, 128, vocab=30522)),
    "gpt2_small_layer": (gpt2, dict(hidden=768, layers=1, heads=12, vocab=50257, positions=1024),
                         lambda: _tokens(1, 128, vocab=50257)),
    "resnet50": (resnet50, {}, lambda: _image(1, 224)),
    "mobilenet_v2": (mobilenet_v2_full, {}, lambda: _image(1, 224)),
}


def bench_model(name: str, seed: int = 0):
    """(eval module, example inputs) of one BENCH entry."""
    if name not in BENCH:
        raise UnsupportedOpError(f"unknown bench model {name!r}; known: {', '.join(BENCH)}")
    builder, config, example = BENCH[name]
    return _prepared(builder, config, seed), example()
