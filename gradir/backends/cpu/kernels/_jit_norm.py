"""Compiled row kernels of the layer-normalization family (``kernels/norm.py``), Float32 and Float64.

The same formulas as norm.py's NumPy path, in one pass per statistic instead of a float64 temporary per
operation: every row's statistics are float64 sums over that row alone (four interleaved accumulators,
in a fixed order, so a row's bits do not depend on how rows are split over threads), results rounded to
the operands' dtype once.  The parameters' gradients (dScale, dB) are float64 sums over the rows in row
order, one column range per thread.  A GPT block's [2048, 512] LayerNormalizationGrad: 39 ms in NumPy,
a few ms here.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._jit_core import ELEMENTWISE, INLINE

_F64 = np.float64


@njit(**INLINE)
def _sum4(a, b, c, d):  # type: ignore[no-untyped-def]
    return (a + b) + (c + d)


@njit(**ELEMENTWISE)
def forward_rows(x, scale, bias, has_bias, eps, centered, y, mean, inv):  # type: ignore[no-untyped-def]
    """y[r] = (x[r] - mean) * inv * scale (+ bias), inv = 1 / sqrt(mean((x - mean)^2) + eps); ``mean`` is 0
    and not written when not ``centered`` (RMSNorm).  ``scale``/``bias`` are float64 [D]."""
    n, d = x.shape
    q = d - d % 4
    for r in range(n):
        xr = x[r]
        m = 0.0
        if centered:
            s0 = s1 = s2 = s3 = 0.0
            for j in range(0, q, 4):
                s0 += _F64(xr[j])
                s1 += _F64(xr[j + 1])
                s2 += _F64(xr[j + 2])
                s3 += _F64(xr[j + 3])
            s = _sum4(s0, s1, s2, s3)
            for j in range(q, d):
                s += _F64(xr[j])
            m = s / d
            mean[r] = m
        v0 = v1 = v2 = v3 = 0.0
        for j in range(0, q, 4):
            t0 = _F64(xr[j]) - m
            t1 = _F64(xr[j + 1]) - m
            t2 = _F64(xr[j + 2]) - m
            t3 = _F64(xr[j + 3]) - m
            v0 += t0 * t0
            v1 += t1 * t1
            v2 += t2 * t2
            v3 += t3 * t3
        v = _sum4(v0, v1, v2, v3)
        for j in range(q, d):
            t = _F64(xr[j]) - m
            v += t * t
        iv = 1.0 / np.sqrt(v / d + eps)
        inv[r] = iv
        yr = y[r]
        if has_bias:
            for j in range(d):
                yr[j] = (_F64(xr[j]) - m) * iv * scale[j] + bias[j]
        else:
            for j in range(d):
                yr[j] = (_F64(xr[j]) - m) * iv * scale[j]


@njit(**INLINE)
def _xhat(xv, j, m, iv, scale, bias, invertible):  # type: ignore[no-untyped-def]
    if invertible:
        return (_F64(xv) - bias[j]) / scale[j]
    return (_F64(xv) - m) * iv


@njit(**ELEMENTWISE)
def backward_rows(dy, x, scale, mean, has_mean, inv, bias, invertible, centered, dx):  # type: ignore[no-untyped-def]
    """dx[r] = inv * (g - x̂ mean(g x̂) [- mean(g)]), g = dy * scale; x̂ = (x - mean) * inv, or (y - B) / scale
    when ``invertible`` (``x`` is then Y)."""
    n, d = x.shape
    for r in range(n):
        xr = x[r]
        dr = dy[r]
        iv = _F64(inv[r])
        m = _F64(mean[r]) if has_mean else 0.0
        sg0 = sg1 = sgx0 = sgx1 = 0.0
        q = d - d % 2
        for j in range(0, q, 2):
            g0 = _F64(dr[j]) * scale[j]
            g1 = _F64(dr[j + 1]) * scale[j + 1]
            sg0 += g0
            sg1 += g1
            sgx0 += g0 * _xhat(xr[j], j, m, iv, scale, bias, invertible)
            sgx1 += g1 * _xhat(xr[j + 1], j + 1, m, iv, scale, bias, invertible)
        sg = sg0 + sg1
        sgx = sgx0 + sgx1
        for j in range(q, d):
            g = _F64(dr[j]) * scale[j]
            sg += g
            sgx += g * _xhat(xr[j], j, m, iv, scale, bias, invertible)
        mg = sg / d
        mgx = sgx / d
        o = dx[r]
        for j in range(d):
            t = _F64(dr[j]) * scale[j] - _xhat(xr[j], j, m, iv, scale, bias, invertible) * mgx
            if centered:
                t -= mg
            o[j] = t * iv


@njit(**ELEMENTWISE)
def param_grads(dy, x, scale, mean, has_mean, inv, bias, invertible, lo, hi, dscale, db,
                with_bias):  # type: ignore[no-untyped-def]
    """dscale[j] = Σ_r dy[r, j] x̂[r, j] and db[j] = Σ_r dy[r, j] for columns lo..hi-1, rows in order
    (float64 [D] accumulators)."""
    n = x.shape[0]
    for r in range(n):
        xr = x[r]
        dr = dy[r]
        iv = _F64(inv[r])
        m = _F64(mean[r]) if has_mean else 0.0
        for j in range(lo, hi):
            dv = _F64(dr[j])
            dscale[j] += dv * _xhat(xr[j], j, m, iv, scale, bias, invertible)
            if with_bias:
                db[j] += dv
