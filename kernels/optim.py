"""Optimizer updates with in-place writes: Adam and LAMB.

Both follow MindSpore's fused-optimizer graphs: the new moments and parameter are written
back into their input buffers with InplaceAssign (fake outputs chained through the
pass-through operand), so the kernel returns nothing and updates param, m and v in place.
"""
from __future__ import annotations

import numpy as np

import akgpy

from ._registry import pattern

BETA1, BETA2, EPS = 0.9, 0.999, 1e-8
WEIGHT_DECAY = 0.01


def _moments(b, m, v, g):
    m_new = m * BETA1 + g * (1.0 - BETA1)
    v_new = v * BETA2 + g * g * (1.0 - BETA2)
    return m_new, v_new


def _writeback(b, pairs):
    """InplaceAssign each (target, value), threading the fake outputs; returns the last."""
    last = None
    for target, value in pairs:
        last = b.inplace_assign(target, value, last if last is not None else value, fake_output=True)
    return last


def _moments_np(m, v, g):
    m *= np.float32(BETA1)
    m += np.float32(1.0 - BETA1) * g
    v *= np.float32(BETA2)
    v += np.float32(1.0 - BETA2) * (g * g)


# -- Adam ----------------------------------------------------------------------------------------

def adam_np(param, m, v, grad, lr):
    _moments_np(m, v, grad)
    upd = np.sqrt(v)
    upd += np.float32(EPS)
    np.divide(m, upd, out=upd)
    upd *= lr
    param -= upd
    return ()


def _optimizer_inputs(name: str, rows: int, cols: int):
    b = akgpy.GraphBuilder(name)
    shapes = [("param", (rows, cols)), ("m", (rows, cols)), ("v", (rows, cols)), ("grad", (rows, cols)), ("lr", (1,))]
    return (b, *[b.input(n, s, "float32") for n, s in shapes])


@pattern("adam", small=dict(rows=48, cols=64), numpy_impl=adam_np)
def adam(rows: int = 3072, cols: int = 768) -> akgpy.Graph:
    """Adam step on one BERT-base FFN weight [3072, 768]; lr is the bias-corrected step size."""
    b, p, m, v, g, lr = _optimizer_inputs("adam", rows, cols)
    m_new, v_new = _moments(b, m, v, g)
    p_new = p - lr * (m_new / (b.sqrt(v_new) + EPS))
    b.output(_writeback(b, [(m, m_new), (v, v_new), (p, p_new)]))
    return b.build()


# -- LAMB ----------------------------------------------------------------------------------------

def lamb_np(param, m, v, grad, lr):
    _moments_np(m, v, grad)
    upd = np.sqrt(v)
    upd += np.float32(EPS)
    np.divide(m, upd, out=upd)
    upd += np.float32(WEIGHT_DECAY) * param
    w_norm = np.sqrt(np.sum(np.sum(param * param, axis=-1), axis=0))
    u_norm = np.sqrt(np.sum(np.sum(upd * upd, axis=-1), axis=0))
    trust = w_norm / u_norm if (w_norm > 0 and u_norm > 0) else np.float32(1.0)
    upd *= lr * trust
    param -= upd
    return ()


@pattern("lamb", small=dict(rows=48, cols=64), numpy_impl=lamb_np)
def lamb(rows: int = 768, cols: int = 3072) -> akgpy.Graph:
    """LAMB step on one BERT-large-style weight: Adam direction + weight decay, scaled by the
    layer-wise trust ratio ||w|| / ||update|| (norms reduced per row, then over rows)."""
    b, p, m, v, g, lr = _optimizer_inputs("lamb", rows, cols)
    m_new, v_new = _moments(b, m, v, g)
    upd = m_new / (b.sqrt(v_new) + EPS) + p * WEIGHT_DECAY

    def norm(t):
        return b.sqrt((t * t).sum(axis=-1, keepdims=True).sum(axis=0, keepdims=True))

    w_norm, u_norm = norm(p), norm(upd)
    trust = b.select(w_norm > 0.0, b.select(u_norm > 0.0, w_norm / u_norm, 1.0), 1.0)
    p_new = p - lr * trust * upd
    b.output(_writeback(b, [(m, m_new), (v, v_new), (p, p_new)]))
    return b.build()
