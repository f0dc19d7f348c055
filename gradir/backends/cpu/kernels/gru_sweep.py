"""One GRU direction in fixed chunks of ``T0`` steps, shared by GRUTraining/GRUGrad (``gru.py``) and the
checkpointed pair (``gru_checkpointed.py``), so that both give the same bits.

The wrappers of ``gru.py`` reverse a reverse direction's rows into the forward time order (the cores'
order); there the steps go in fixed chunks ``[lo, hi)`` of ``T0`` steps (``chunk_steps``: a function of
the shapes alone, never of a memory budget), and every chunk is one call of a per-direction core on the
chunk's steps, from the state carried out of the chunk before it: the forward core computes the chunk's
``X·Wᵀ`` as its own product, the backward core the chunk's rows of ``dX`` and its partial weight
gradients, fresh, which are then added to the direction's sums in the chunks' fixed order (last chunk
first).  A chunk reads the forward's values only through its own steps' ``HAll``/``ZRH`` and the state
before it (``H_{lo-1}``, or ``H0``), given as C-contiguous arrays (the cores' products choose their path
by layout), so the checkpointed backward, which recomputes them unit by unit into buffers of its own,
computes every chunk from the same operands.  Local sequence lengths (``SL - lo``, clipped to the chunk)
keep the cores' semantics: a row past its length passes its state through.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ....ops.gru import chunk_steps as ops_chunk_steps

__all__ = ["chunk_steps", "chunks", "Forward", "Backward", "halo"]


def chunk_steps(S: int, nb: int, D: int, h: int, dtype: Any) -> int:
    """T0 (``gradir.ops.gru.chunk_steps``, which the memory planner reads too)."""
    return ops_chunk_steps(S, nb, D, h, np.dtype(dtype).itemsize)


def chunks(lo: int, hi: int, T0: int) -> list[tuple[int, int]]:
    """The fixed chunks of steps ``[lo, hi)`` (``lo`` a multiple of ``T0``), first to last."""
    return [(a, min(hi, a + T0)) for a in range(lo, hi, T0)]


def _local(lengths: np.ndarray | None, lo: int, hi: int) -> np.ndarray | None:
    return None if lengths is None else np.clip(lengths - lo, 0, hi - lo)


def halo(h: np.ndarray, lengths: np.ndarray | None, t: int, numpy_core: bool) -> np.ndarray:
    """``HAll[t]`` as the forward core left it, from the state ``h`` carried out of step ``t``: the
    rows without step ``t`` are zero there (the NumPy core writes ``h·0``, the compiled one 0)."""
    if lengths is None or bool((lengths > t).all()):
        return np.array(h)
    live = lengths > t
    if numpy_core:
        return h * live.astype(h.dtype)[:, None]
    return np.where(live[:, None], h, np.zeros((), h.dtype))


class Forward:
    """One direction's forward in the core's time order: ``run(lo, hi, HAll, ZRH)`` computes steps
    ``[lo, hi)`` (one fixed chunk) from the carried state ``h`` (updated), into ``HAll`` ``[hi-lo, B, H]``
    and ``ZRH`` ``[hi-lo, B, 3H]`` (any layout: a contiguous scratch takes the gates if ``ZRH`` is not)."""

    def __init__(self, core: Callable[..., None], X: np.ndarray, parts: tuple, lengths: np.ndarray | None,
                 lbr: int, clip: float | None, T0: int) -> None:
        self.core, self.X, self.parts, self.lengths, self.lbr, self.clip = core, X, parts, lengths, lbr, clip
        Wd, Rd, wb, rb, h0 = parts
        S, nb, _ = X.shape
        n = Rd.shape[1]
        dt = X.dtype
        self.h = np.zeros((nb, n), dt) if h0 is None else np.array(h0, dt)
        self._z = np.empty((min(T0, S), nb, 3 * n), dt)
        self._hf = np.empty((nb, n), dt)

    def run(self, lo: int, hi: int, HAll: np.ndarray, ZRH: np.ndarray | None) -> None:
        Wd, Rd, wb, rb, _ = self.parts
        z = ZRH if ZRH is not None and ZRH.flags.c_contiguous else self._z[: hi - lo]
        self.core(self.X[lo:hi], Wd, Rd, wb, rb, _local(self.lengths, lo, hi), self.h, self.lbr, self.clip, HAll,
                  self._hf, z)
        if ZRH is not None and z is not ZRH:
            ZRH[...] = z
        self.h[...] = self._hf


class Backward:
    """One direction's backward: ``run(lo, hi, hprev, HAll, ZRH, dHAll, dX)`` for each fixed chunk, last
    first, carrying ``dh`` (``dH0`` at the end) and summing ``dW``, ``dR``, ``dB`` chunk by chunk."""

    def __init__(self, core: Callable[..., None], X: np.ndarray, parts: tuple, lengths: np.ndarray | None,
                 dHFinal: np.ndarray | None, lbr: int, clip: float | None) -> None:
        self.core, self.X, self.parts, self.lengths, self.lbr, self.clip = core, X, parts, lengths, lbr, clip
        Wd, Rd, _, _, _ = parts
        nb, n, dt = X.shape[1], Rd.shape[1], X.dtype
        self.dh = np.zeros((nb, n), dt) if dHFinal is None else np.array(dHFinal, dt)
        self.dW, self.dR, self.dB = np.zeros(Wd.shape, dt), np.zeros(Rd.shape, dt), np.zeros(6 * n, dt)
        self._parts = np.empty(Wd.shape, dt), np.empty(Rd.shape, dt), np.empty(6 * n, dt)
        self._dh0 = np.empty((nb, n), dt)
        self.alive = X.shape[0] if lengths is None else int(lengths.max(initial=0))

    def run(self, lo: int, hi: int, hprev: np.ndarray, HAll: np.ndarray, ZRH: np.ndarray, dHAll: np.ndarray | None,
            dX: np.ndarray) -> None:
        if lo >= self.alive:  # no row has these steps: nothing flows through them
            dX[...] = 0
            return
        Wd, Rd, wb, rb, _ = self.parts
        dW, dR, dB = self._parts
        self.core(self.X[lo:hi], Wd, Rd, wb, rb, _local(self.lengths, lo, hi), np.ascontiguousarray(hprev),
                  np.ascontiguousarray(HAll), np.ascontiguousarray(ZRH), dHAll, self.dh, self.lbr, self.clip, dX, dW,
                  dR, dB, self._dh0)
        self.dh[...] = self._dh0
        self.dW += dW
        self.dR += dR
        self.dB += dB
