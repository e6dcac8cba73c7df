"""Small seeded MindSpore networks whose graph kernels MindSpore fuses on CPU: the workloads the
recorder (bench/record_mindspore.py), the plugin's tests and its bench run.

Each builder returns `(step, inputs)`: `step` is a Cell (forward, or one training step) to call as
`step(*[mindspore.Tensor(a) for a in inputs])`, `inputs` a list of numpy arrays. Sizes keep one
step in milliseconds. mindspore is imported inside the builders only, so importing this module
(and akgpy) never loads it; the caller sets the context (GRAPH_MODE, device_target="CPU").
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

__all__ = ["NETWORKS", "transformer_block", "conv_bn_relu", "adam_step", "reduction_loss"]

SEED = 0


def _seeded(seed: int) -> np.random.Generator:
    import mindspore as ms
    ms.set_seed(seed)
    return np.random.default_rng(seed)


def transformer_block(seed: int = SEED) -> tuple[Any, list[np.ndarray]]:
    """Post-norm encoder layer: softmax attention (4 heads), residual, LayerNorm, GELU MLP,
    residual, LayerNorm; 2 x 64 tokens of width 64. Forward only."""
    import mindspore as ms
    from mindspore import nn, ops

    batch, seq, hidden, heads = 2, 64, 64, 4
    rng = _seeded(seed)

    class Block(nn.Cell):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Dense(hidden, 3 * hidden)
            self.proj = nn.Dense(hidden, hidden)
            self.ln1 = nn.LayerNorm((hidden,))
            self.ln2 = nn.LayerNorm((hidden,))
            self.fc1 = nn.Dense(hidden, 4 * hidden)
            self.fc2 = nn.Dense(4 * hidden, hidden)
            self.gelu = nn.GELU(approximate=False)
            self.scale = 1.0 / float(np.sqrt(hidden // heads))

        def construct(self, x):
            b, s, h = x.shape
            qkv = self.qkv(x.reshape(b * s, h)).reshape(b, s, 3, heads, h // heads)
            qkv = qkv.transpose(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
            att = ops.softmax(ops.matmul(q, k.transpose(0, 1, 3, 2)) * self.scale, -1)
            ctx = ops.matmul(att, v).transpose(0, 2, 1, 3).reshape(b * s, h)
            y = self.ln1(x.reshape(b * s, h) + self.proj(ctx))
            y = self.ln2(y + self.fc2(self.gelu(self.fc1(y))))
            return y.reshape(b, s, h)

    x = rng.standard_normal((batch, seq, hidden), dtype=np.float32)
    return Block(), [x]


def conv_bn_relu(seed: int = SEED) -> tuple[Any, list[np.ndarray]]:
    """One SGD training step of Conv2d 3x3 + BatchNorm2d (training: batch statistics and running
    averages) + ReLU + mean-squared error; batch 4, 8 -> 16 channels, 16 x 16."""
    import mindspore as ms
    from mindspore import nn

    rng = _seeded(seed)

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(8, 16, 3, pad_mode="same", has_bias=False)
            self.bn = nn.BatchNorm2d(16, momentum=0.9)
            self.relu = nn.ReLU()

        def construct(self, x):
            return self.relu(self.bn(self.conv(x)))

    net = Net()
    step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.01))
    step.set_train(True)
    x = rng.standard_normal((4, 8, 16, 16), dtype=np.float32)
    y = rng.standard_normal((4, 16, 16, 16), dtype=np.float32)
    return step, [x, y]


def adam_step(seed: int = SEED) -> tuple[Any, list[np.ndarray]]:
    """One Adam training step of a 64 -> 128 -> 10 MLP with softmax cross-entropy; batch 32.
    The optimizer's moment and weight updates are what fuses."""
    import mindspore as ms
    from mindspore import nn

    rng = _seeded(seed)
    net = nn.SequentialCell([nn.Dense(64, 128), nn.ReLU(), nn.Dense(128, 10)])
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    step = nn.TrainOneStepCell(nn.WithLossCell(net, loss), nn.Adam(net.trainable_params(), 1e-3))
    step.set_train(True)
    x = rng.standard_normal((32, 64), dtype=np.float32)
    labels = rng.integers(0, 10, size=(32,), dtype=np.int32)
    return step, [x, labels]


def reduction_loss(seed: int = SEED) -> tuple[Any, list[np.ndarray]]:
    """A loss heavy in reductions and its gradient in the logits: softmax cross-entropy plus
    variance, logsumexp and max-min range terms over rows of 128 x 64 logits."""
    import mindspore as ms
    from mindspore import nn, ops

    rng = _seeded(seed)

    class Loss(nn.Cell):
        def __init__(self):
            super().__init__()
            self.sum = ops.ReduceSum(keep_dims=True)
            self.mean = ops.ReduceMean(keep_dims=True)
            self.max = ops.ReduceMax(keep_dims=True)
            self.min = ops.ReduceMin(keep_dims=False)

        def construct(self, logits, onehot):
            m = self.max(logits, -1)
            z = logits - m
            lse = ops.log(self.sum(ops.exp(z), -1))
            ce = -self.mean(self.sum(onehot * (z - lse), -1), (0, 1))
            d = logits - self.mean(logits, -1)
            var = self.mean(d * d, (0, 1))
            spread = self.max(logits, 1).reshape(-1) - self.min(logits, 1)
            return ce + 0.1 * var + 0.01 * self.mean(lse + m, (0, 1)) + 0.001 * self.mean(spread, 0)

    class Grad(nn.Cell):
        def __init__(self, net):
            super().__init__()
            self.fn = ms.value_and_grad(net, grad_position=0)

        def construct(self, logits, onehot):
            return self.fn(logits, onehot)

    logits = rng.standard_normal((128, 64), dtype=np.float32)
    onehot = np.eye(64, dtype=np.float32)[rng.integers(0, 64, size=128)]
    return Grad(Loss()), [logits, onehot]


NETWORKS: dict[str, Callable[..., tuple[Any, list[np.ndarray]]]] = {
    "transformer_block": transformer_block,
    "conv_bn_relu": conv_bn_relu,
    "adam_step": adam_step,
    "reduction_loss": reduction_loss,
}
