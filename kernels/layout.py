"""Layout patterns: the attention head split (bias add + scale + Reshape + Transpose + Reshape)."""
from __future__ import annotations

import math

import numpy as np

import akgpy

from ._registry import pattern

HEAD_DIM = 64  # every BERT/GPT size uses 64-wide heads; the head count follows from hidden


def attn_head_split_np(x, bias):
    batch, seq, hidden = x.shape
    heads = hidden // HEAD_DIM
    y = x + bias
    y *= np.float32(1.0 / math.sqrt(HEAD_DIM))
    y = y.reshape(batch, seq, heads, HEAD_DIM).transpose(0, 2, 1, 3)
    return (np.ascontiguousarray(y).reshape(batch * heads, seq, HEAD_DIM),)


@pattern("attn_head_split", small=dict(batch=2, seq=16, heads=2), numpy_impl=attn_head_split_np)
def attn_head_split(batch: int = 32, seq: int = 128, heads: int = 12) -> akgpy.Graph:
    """BERT-base query-projection epilogue: q = (x + bias) / sqrt(64), then
    [32, 128, 768] -> [32, 128, 12, 64] -> transpose(0, 2, 1, 3) -> [32*12, 128, 64]."""
    hidden = heads * HEAD_DIM
    b = akgpy.GraphBuilder("attn_head_split")
    x = b.input("x", (batch, seq, hidden), "float32")
    bias = b.input("bias", (hidden,), "float32")
    q = (x + bias) * (1.0 / math.sqrt(HEAD_DIM))
    q = q.reshape((batch, seq, heads, HEAD_DIM)).transpose(0, 2, 1, 3)
    b.output(q.reshape((batch * heads, seq, HEAD_DIM)))
    return b.build()
