"""Compiled Float32 loss kernels (see ``gradir.backends.cpu.kernels.jit``).

``ce_grad_rows``: the gradient of the softmax cross-entropy over rows of class scores,
``(exp(log_prob) - onehot(label)) * factor`` per row, in one pass.  NumPy's float32 ``exp`` is
vectorized only with AVX-512 (SVML); on an AVX2 machine it is a scalar libm call, 6 ns an element:
100 ms of a GPT block's [2048, 8192] logits, where this loop (``exp2_32``, the activation kernels'
vectorized 2^t, within 1.1 ulp) reads and writes them at memory speed.  Same bits for any split of
the rows (each element on its own) and on every x86-64 CPU (no library call).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._jit_core import ELEMENTWISE, LOG2E, apart, exp2_32

_F = np.float32
_L2E = _F(LOG2E)
_ONE = _F(1.0)
_ZERO = _F(0.0)


@njit(**ELEMENTWISE)
def _row(o, lp, k, f):  # type: ignore[no-untyped-def]
    for j in range(o.shape[0]):
        o[j] = exp2_32(lp[j] * _L2E) * f
    o[k] = (exp2_32(lp[k] * _L2E) - _ONE) * f


@njit(**ELEMENTWISE)
def ce_grad_rows(o, lp, lab, factor):  # type: ignore[no-untyped-def]
    """``o[r] = (exp(lp[r]) - onehot(lab[r])) * factor[r]`` for 2-D ``[rows, classes]`` float32 ``o`` and
    ``lp``; a row with ``lab[r] < 0`` (an ignored target) is exactly 0.  ``o`` may be ``lp`` (the runtime
    writes in place): LLVM vectorizes a loop whose output may overlap its input only behind an overlap
    check that fails in place, so then each row is computed into a private row (in cache) and copied."""
    n = o.shape[1]
    separate = apart(o, lp)
    tmp = np.empty(0 if separate else n, _F)
    for r in range(o.shape[0]):
        orow = o[r]
        k = lab[r]
        if k < 0:
            for j in range(n):
                orow[j] = _ZERO
        elif separate:
            _row(orow, lp[r], k, factor[r])
        else:
            _row(tmp, lp[r], k, factor[r])
            for j in range(n):
                orow[j] = tmp[j]
