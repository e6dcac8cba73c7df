"""Activations: Softmax, bias + GELU (tanh approximation), bias + ReLU."""
from __future__ import annotations

import math

import numpy as np

import akgpy

from ._registry import pattern

GELU_C = math.sqrt(2.0 / math.pi)
GELU_K = 0.044715


# -- Softmax over the last axis ------------------------------------------------------------------

def softmax_np(x):
    e = x - x.max(axis=-1, keepdims=True)
    np.exp(e, out=e)
    e /= e.sum(axis=-1, keepdims=True)
    return (e,)


@pattern("softmax", small=dict(rows=96, cols=128), numpy_impl=softmax_np)
def softmax(rows: int = 32 * 12 * 128, cols: int = 128) -> akgpy.Graph:
    """BERT-base attention probabilities: batch 32 x 12 heads x 128 queries, 128 keys."""
    b = akgpy.GraphBuilder("softmax")
    x = b.input("x", (rows, cols), "float32")
    e = b.exp(x - x.max(axis=-1, keepdims=True))
    b.output(e / e.sum(axis=-1, keepdims=True))
    return b.build()


# -- bias + GELU (tanh) ----------------------------------------------------------------------------

def _gelu_np(x):
    x = x.astype(np.float32, copy=False)
    inner = x * x
    inner *= np.float32(GELU_K)
    inner += 1.0
    inner *= x
    inner *= np.float32(GELU_C)
    np.tanh(inner, out=inner)
    inner += 1.0
    inner *= x
    inner *= 0.5
    return inner


def bias_gelu_np(a, bias):
    x = a.astype(np.float32) + bias.astype(np.float32)
    return (_gelu_np(x).astype(a.dtype, copy=False),)


def _bias_gelu_graph(name: str, tokens: int, ffn: int, dtype: str) -> akgpy.Graph:
    b = akgpy.GraphBuilder(name)
    a = b.input("a", (tokens, ffn), dtype)
    bias = b.input("bias", (ffn,), dtype)
    x = a + bias
    inner = (x + x * x * x * GELU_K) * GELU_C
    b.output(x * 0.5 * (b.tanh(inner) + 1.0))
    return b.build()


@pattern("bias_gelu", small=dict(tokens=64, ffn=192), numpy_impl=bias_gelu_np)
def bias_gelu(tokens: int = 4096, ffn: int = 3072) -> akgpy.Graph:
    """BERT-base FFN activation: y = 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))), x = a + bias, float32."""
    return _bias_gelu_graph("bias_gelu", tokens, ffn, "float32")


@pattern("bias_gelu_fp16", small=dict(tokens=64, ffn=192), numpy_impl=bias_gelu_np)
def bias_gelu_fp16(tokens: int = 4096, ffn: int = 3072) -> akgpy.Graph:
    """The same GELU in float16, each op rounded to half as the graph declares (mixed precision)."""
    return _bias_gelu_graph("bias_gelu_fp16", tokens, ffn, "float16")


# -- bias + ReLU ----------------------------------------------------------------------------------

def bias_relu_np(a, bias):
    y = a + bias
    np.maximum(y, 0.0, out=y)
    return (y,)


@pattern("bias_relu", small=dict(tokens=64, features=192), numpy_impl=bias_relu_np)
def bias_relu(tokens: int = 4096, features: int = 3072) -> akgpy.Graph:
    """Dense-layer epilogue: y = max(a + bias, 0) over [4096, 3072] float32."""
    b = akgpy.GraphBuilder("bias_relu")
    a = b.input("a", (tokens, features), "float32")
    bias = b.input("bias", (features,), "float32")
    b.output(b.relu(a + bias))
    return b.build()
