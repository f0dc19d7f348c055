"""Compiled dropout kernels (see ``gradir.backends.cpu.kernels.jit`` and ``dropout.py``).

Each draws the mask of a run of elements whose global flat indices are ``g, g+1, ...`` and writes
``o = (keep * x) / s`` beside it, in one pass without the GIL.  No fastmath: ``0 * -x`` is ``-0`` and
``0 * nan`` is ``nan``, as in ONNX Runtime's ``mask * X / (1 - ratio)``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)
_M32 = np.uint64(0xFFFFFFFF)
_MINSTD = np.uint64(2147483647)
_A = np.uint64(16807)


@njit(inline="always", cache=True)
def philox(c0, c1, k0, k1):  # pragma: no cover - compiled
    """Philox-4x32-10 of the counter (c0, c1, 0, 0) and key (k0, k1): four 32-bit words.  The state is
    uint32 and each product explicitly widened, so LLVM vectorizes a loop of these (32x32->64 multiplies)."""
    c0 = np.uint32(c0)
    c1 = np.uint32(c1)
    c2 = np.uint32(0)
    c3 = np.uint32(0)
    k0 = np.uint32(k0)
    k1 = np.uint32(k1)
    for _ in range(10):
        p0 = np.uint64(0xD2511F53) * np.uint64(c0)
        p1 = np.uint64(0xCD9E8D57) * np.uint64(c2)
        n0 = np.uint32(p1 >> np.uint64(32)) ^ c1 ^ k0
        n2 = np.uint32(p0 >> np.uint64(32)) ^ c3 ^ k1
        c1 = np.uint32(p1 & _M32)
        c3 = np.uint32(p0 & _M32)
        c0 = n0
        c2 = n2
        k0 = np.uint32(k0 + np.uint32(0x9E3779B9))
        k1 = np.uint32(k1 + np.uint32(0xBB67AE85))
    return c0, c1, c2, c3


_TILE = 1024  # blocks of four words drawn at once (a vectorized loop), then applied (another)


@njit(inline="always", cache=True)
def _put(o, m, x, e, w, threshold, s):  # pragma: no cover - compiled
    keep = np.uint64(w) >= threshold
    m[e] = keep
    o[e] = (x.dtype.type(keep) * x[e]) / s


@njit(**_OPTS)
def philox_run(o, m, x, g, k0, k1, threshold, s):  # pragma: no cover - compiled
    """Elements ``x[0:n]`` at global indices ``g..g+n-1``: element ``e`` is word ``(g+e) % 4`` of block
    ``(g+e) // 4``, kept where that word ``>= threshold``."""
    n = x.shape[0]
    w0 = np.empty(_TILE, np.uint32)
    w1 = np.empty(_TILE, np.uint32)
    w2 = np.empty(_TILE, np.uint32)
    w3 = np.empty(_TILE, np.uint32)
    first = g // 4
    last = (g + n - 1) // 4
    b0 = first
    while b0 <= last:
        nb = min(_TILE, last - b0 + 1)
        for j in range(nb):  # no branches: vectorized
            b = np.uint64(b0 + j)
            a0, a1, a2, a3 = philox(b & _M32, b >> np.uint64(32), k0, k1)
            w0[j] = a0
            w1[j] = a1
            w2[j] = a2
            w3[j] = a3
        for j in range(nb):
            base = 4 * (b0 + j) - g  # the local index of the block's word 0
            if base >= 0 and base + 4 <= n:
                _put(o, m, x, base, w0[j], threshold, s)
                _put(o, m, x, base + 1, w1[j], threshold, s)
                _put(o, m, x, base + 2, w2[j], threshold, s)
                _put(o, m, x, base + 3, w3[j], threshold, s)
            else:  # a block cut by the run's ends
                for lane in range(4):
                    e = base + lane
                    if 0 <= e < n:
                        w = w0[j] if lane == 0 else (w1[j] if lane == 1 else (w2[j] if lane == 2 else w3[j]))
                        _put(o, m, x, e, w, threshold, s)
        b0 += nb


@njit(**_OPTS)
def minstd_power(e):  # pragma: no cover - compiled
    """16807 ** e mod (2**31 - 1)."""
    r = np.uint64(1)
    b = _A
    while e > 0:
        if e & 1:
            r = r * b % _MINSTD
        b = b * b % _MINSTD
        e >>= 1
    return r


@njit(**_OPTS)
def ort_run(o, m, x, g, x0, threshold, s):  # pragma: no cover - compiled
    """ONNX Runtime's draws at global indices ``g..``: ``x_n = x0 * 16807**(n+1) mod (2**31-1)``, kept where
    ``float32(x_n - 1) >= threshold`` (``float32(ratio) * 2**31``)."""
    n = x.shape[0]
    v = np.uint64(x0) * minstd_power(g + 1) % _MINSTD
    for i in range(n):
        keep = np.float32(np.int64(v) - 1) >= threshold
        m[i] = keep
        o[i] = (x.dtype.type(keep) * x[i]) / s
        p = v * _A  # < 2**46: mod 2**31 - 1 without a division
        v = (p & _MINSTD) + (p >> np.uint64(31))
        if v >= _MINSTD:
            v -= _MINSTD


@njit(**_OPTS)
def masked(o, m, x, s):  # pragma: no cover - compiled
    """``o = (m * x) / s`` (a given mask; DropoutGrad)."""
    for i in range(x.shape[0]):
        o[i] = (x.dtype.type(m[i]) * x[i]) / s
