"""Normalisations: LayerNorm (fp32 and fp16-in/fp32-compute), RMSNorm, BatchNorm inference."""
from __future__ import annotations

import numpy as np

import akgpy

from ._registry import pattern

LN_EPS = 1e-5
RMS_EPS = 1e-6
BN_EPS = 1e-5


def _layernorm_body(b: akgpy.GraphBuilder, x, gamma, beta, eps: float):
    """mean / variance over the last axis, then scale and shift; x, gamma, beta float32."""
    n = x.shape[-1]
    mean = x.sum(axis=-1, keepdims=True) * (1.0 / n)
    xc = x - mean
    var = (xc * xc).sum(axis=-1, keepdims=True) * (1.0 / n)
    return xc * b.rsqrt(var + eps) * gamma + beta


# -- LayerNorm, float32 ------------------------------------------------------------------------

def layernorm_np(x, gamma, beta):
    mean = x.mean(axis=-1, keepdims=True)
    xc = x - mean
    var = np.mean(xc * xc, axis=-1, keepdims=True)
    y = xc * (1.0 / np.sqrt(var + np.float32(LN_EPS)))
    y *= gamma
    y += beta
    return (y,)


@pattern("layernorm", small=dict(tokens=64, hidden=96), numpy_impl=layernorm_np)
def layernorm(tokens: int = 4096, hidden: int = 768) -> akgpy.Graph:
    """BERT-base LayerNorm: [batch 32 x seq 128, 768] float32."""
    b = akgpy.GraphBuilder("layernorm")
    x = b.input("x", (tokens, hidden), "float32")
    gamma = b.input("gamma", (hidden,), "float32")
    beta = b.input("beta", (hidden,), "float32")
    b.output(_layernorm_body(b, x, gamma, beta, LN_EPS))
    return b.build()


# -- LayerNorm, float16 in/out, float32 compute ---------------------------------------------

def layernorm_fp16_np(x, gamma, beta):
    (y,) = layernorm_np(x.astype(np.float32), gamma, beta)
    return (y.astype(np.float16),)


@pattern("layernorm_fp16", small=dict(tokens=64, hidden=96), numpy_impl=layernorm_fp16_np)
def layernorm_fp16(tokens: int = 4096, hidden: int = 768) -> akgpy.Graph:
    """Mixed-precision LayerNorm: float16 activations, float32 statistics and affine params."""
    b = akgpy.GraphBuilder("layernorm_fp16")
    x = b.input("x", (tokens, hidden), "float16")
    gamma = b.input("gamma", (hidden,), "float32")
    beta = b.input("beta", (hidden,), "float32")
    y = _layernorm_body(b, x.astype("float32"), gamma, beta, LN_EPS)
    b.output(y.astype("float16"))
    return b.build()


# -- Residual add + LayerNorm (the BERT "Add & Norm" block) ----------------------------------

def add_layernorm_np(x, residual, gamma, beta):
    s = x + residual
    (y,) = layernorm_np(s, gamma, beta)
    return (s, y)


@pattern("add_layernorm", small=dict(tokens=64, hidden=96), numpy_impl=add_layernorm_np)
def add_layernorm(tokens: int = 4096, hidden: int = 768) -> akgpy.Graph:
    """Residual add feeding a LayerNorm; the sum is a second output (the next residual)."""
    b = akgpy.GraphBuilder("add_layernorm")
    x = b.input("x", (tokens, hidden), "float32")
    r = b.input("residual", (tokens, hidden), "float32")
    gamma = b.input("gamma", (hidden,), "float32")
    beta = b.input("beta", (hidden,), "float32")
    s = x + r
    b.output(s, _layernorm_body(b, s, gamma, beta, LN_EPS))
    return b.build()


# -- RMSNorm -------------------------------------------------------------------------------------

def rmsnorm_np(x, weight):
    ms = np.mean(x * x, axis=-1, keepdims=True)
    y = x * (1.0 / np.sqrt(ms + np.float32(RMS_EPS)))
    y *= weight
    return (y,)


@pattern("rmsnorm", small=dict(tokens=64, hidden=128), numpy_impl=rmsnorm_np)
def rmsnorm(tokens: int = 2048, hidden: int = 4096) -> akgpy.Graph:
    """LLaMA-7B RMSNorm: y = x * rsqrt(mean(x^2) + eps) * w over [2048 tokens, 4096]."""
    b = akgpy.GraphBuilder("rmsnorm")
    x = b.input("x", (tokens, hidden), "float32")
    w = b.input("weight", (hidden,), "float32")
    ms = (x * x).sum(axis=-1, keepdims=True) * (1.0 / hidden)
    b.output(x * b.rsqrt(ms + RMS_EPS) * w)
    return b.build()


# -- BatchNorm inference, NCHW -----------------------------------------------------------------

def batchnorm_infer_np(x, gamma, beta, mean, var):
    scale = gamma * (1.0 / np.sqrt(var + np.float32(BN_EPS)))
    shift = beta - mean * scale
    c = x.shape[1]
    y = x * scale.reshape(c, 1, 1)
    y += shift.reshape(c, 1, 1)
    return (y,)


@pattern("batchnorm_infer", small=dict(n=2, c=16, h=7, w=7), numpy_impl=batchnorm_infer_np)
def batchnorm_infer(n: int = 32, c: int = 256, h: int = 28, w: int = 28) -> akgpy.Graph:
    """ResNet-50 stage-2 BatchNorm (inference): (x - mean) * rsqrt(var + eps) * gamma + beta."""
    b = akgpy.GraphBuilder("batchnorm_infer")
    x = b.input("x", (n, c, h, w), "float32")
    gamma = b.input("gamma", (c,), "float32")
    beta = b.input("beta", (c,), "float32")
    mean = b.input("moving_mean", (c,), "float32")
    var = b.input("moving_var", (c,), "float32")
    scale = (gamma * b.rsqrt(var + BN_EPS)).reshape((c, 1, 1))
    y = (x - mean.reshape((c, 1, 1))) * scale + beta.reshape((c, 1, 1))
    b.output(y)
    return b.build()
