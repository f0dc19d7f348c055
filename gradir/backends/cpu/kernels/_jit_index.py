"""Compiled scatter-add of the gather gradients (loaded through ``gradir.backends.cpu.kernels.jit.load("index")``;
numba).

``scatter_rows(out, idx, dy)``: ``out[o, idx[j], :] += dy[o, j, :]`` for ``o`` then ``j`` in order, one element
at a time, so a row that several indices name adds its contributions in the order of the indices (the NumPy
path, ``np.add.at``, adds in the same order: the same bits).  ``out`` ``[outer, n, inner]``, ``idx`` ``[N]``
(Int64, already in ``0..n-1``), ``dy`` ``[outer, N, inner]``, all C-contiguous.
"""

from __future__ import annotations

from numba import njit


@njit(cache=True, nogil=True)
def scatter_rows(out, idx, dy):  # type: ignore[no-untyped-def]
    outer, count, inner = dy.shape
    for o in range(outer):
        for j in range(count):
            t = idx[j]
            for k in range(inner):
                out[o, t, k] += dy[o, j, k]
