"""Kernels of ``Dropout`` and ``DropoutGrad`` (``gradir/ops/dropout.py``), in Float32 and Float64.

The mask of element ``n`` (its flat index in the whole tensor) is a function of ``(seed, n)`` only
(``gradir.ops.dropout``: Philox-4x32-10, or ONNX Runtime's ``minstd_rand0`` draws computed directly), so
the work splits anywhere: each thread takes a range of elements and draws them at their global
indices, and a shard (``shard_rows``) draws its slice at the whole tensor's indices.  One pass writes
the mask and ``(mask * data) / (1 - ratio)``; the compiled path is ``_jit_dropout``, the NumPy path draws
whole blocks of words at once.
"""

from __future__ import annotations

import math
from typing import Iterator, Optional

import numpy as np

from ....ops.dropout import DropoutGradOp, DropoutOp
from . import jit
from .parallel import parallel_rows
from .registry import kernel

__all__ = ["dropout", "dropout_grad"]

_M32 = np.uint64(0xFFFFFFFF)
_MINSTD = 2147483647


def _scale(dtype: np.dtype, ratio: float) -> np.generic:
    """``1 - ratio`` in the data's dtype (Float32: ``1.0f - float32(ratio)``, as ONNX Runtime's kernel)."""
    return dtype.type(1) - dtype.type(ratio)


def _runs(shape: tuple, rows: Optional[np.ndarray], axis: int) -> tuple[int, int, int]:
    """(run length, number of runs, global stride of runs) and the first run's global start, as
    ``(length, count, stride, start)``: the local elements are ``count`` runs of ``length`` consecutive
    global indices, run ``p`` starting at ``start + p * stride``."""
    n = math.prod(shape)
    if rows is None or not shape:
        return n, 1, 0, 0  # type: ignore[return-value]
    outer, local, inner = math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])
    if local == 0:
        return 0, 0, 0, 0  # type: ignore[return-value]
    start, total = int(rows[0, 0]), int(rows[0, 1])
    if not (0 <= start and start + local <= total) or np.any(rows[:, 0] != start + np.arange(local)):
        raise ValueError(f"Dropout: shard_rows must be consecutive global indices within the global size, got "
                         f"{rows[:4].tolist()}...")
    return local * inner, outer, total * inner, start * inner  # type: ignore[return-value]


def _segments(lo: int, hi: int, length: int, stride: int, start: int) -> Iterator[tuple[int, int, int]]:
    """The local range ``[lo, hi)`` as (local offset, global index, count) pieces."""
    while lo < hi:
        p, r = divmod(lo, length)
        k = min(hi - lo, length - r)
        yield lo, start + p * stride + r, k
        lo += k


# -- the NumPy path ---------------------------------------------------------------------------------------
def _philox_words(blocks: np.ndarray, k0: int, k1: int) -> np.ndarray:
    """Philox-4x32-10 of the counters (block, 0, 0) for each block: [len(blocks), 4] words as uint64."""
    c0, c1 = blocks & _M32, blocks >> np.uint64(32)
    c2 = np.zeros_like(c0)
    c3 = np.zeros_like(c0)
    key0, key1 = np.uint64(k0), np.uint64(k1)
    for _ in range(10):
        p0, p1 = np.uint64(0xD2511F53) * c0, np.uint64(0xCD9E8D57) * c2
        c0, c1, c2, c3 = (p1 >> np.uint64(32)) ^ c1 ^ key0, p1 & _M32, (p0 >> np.uint64(32)) ^ c3 ^ key1, p0 & _M32
        key0, key1 = (key0 + np.uint64(0x9E3779B9)) & _M32, (key1 + np.uint64(0xBB67AE85)) & _M32
    return np.stack([c0, c1, c2, c3], axis=1)


def _keep_numpy(g: int, k: int, generator: str, seed: int, ratio: float) -> np.ndarray:
    """The mask of the global indices ``g..g+k-1``."""
    s = seed % (1 << 64)
    if generator == "philox":
        first, last = g // 4, (g + k - 1) // 4
        words = _philox_words(np.arange(first, last + 1, dtype=np.uint64), s & 0xFFFFFFFF, s >> 32).reshape(-1)
        return words[g - 4 * first: g - 4 * first + k] >= np.uint64(math.ceil(ratio * 2.0 ** 32))
    x0 = s % _MINSTD or 1
    e = np.arange(g + 1, g + 1 + k, dtype=np.uint64)
    r = np.ones(k, np.uint64)
    b = 16807
    while e.any():
        bit = (e & np.uint64(1)).astype(bool)
        r[bit] = r[bit] * np.uint64(b) % np.uint64(_MINSTD)
        b = b * b % _MINSTD
        e >>= np.uint64(1)
    v = r * np.uint64(x0) % np.uint64(_MINSTD)
    return (v.astype(np.int64) - 1).astype(np.float32) >= np.float32(np.float32(ratio) * np.float32(2.0 ** 31))


def _write(o: np.ndarray, m: np.ndarray, x: np.ndarray, keep: np.ndarray, s: np.generic) -> None:
    m[...] = keep
    np.multiply(keep, x, out=o, dtype=x.dtype)
    np.divide(o, s, out=o)


def _check(op: str, x: np.ndarray, mask: Optional[np.ndarray]) -> None:
    if x.dtype not in (np.float32, np.float64):
        raise TypeError(f"{op}: the data must be Float32 or Float64, got {x.dtype}")
    if mask is not None and (mask.dtype != np.bool_ or mask.shape != x.shape):
        raise ValueError(f"{op}: the mask must be Bool {list(x.shape)}, got {mask.dtype} {list(mask.shape)}")


def _apply_mask(op: str, x: np.ndarray, mask: np.ndarray, s: np.generic, out: Optional[np.ndarray]) -> np.ndarray:
    """``(mask * x) / s`` in ``out`` (which may be ``x``), in parallel row ranges."""
    o = jit.writable_out(out, op) if out is not None and out.flags.c_contiguous else np.empty(x.shape, x.dtype)
    xf, mf, of = np.ascontiguousarray(x).reshape(-1), np.ascontiguousarray(mask).reshape(-1), o.reshape(-1)
    compiled = jit.load("dropout")

    def body(lo: int, hi: int) -> None:
        if compiled is not None:
            compiled.masked(of[lo:hi], mf[lo:hi], jit.readable(xf[lo:hi]), s)
        else:
            np.multiply(mf[lo:hi], xf[lo:hi], out=of[lo:hi], dtype=x.dtype)
            np.divide(of[lo:hi], s, out=of[lo:hi])

    parallel_rows(xf.size, 2 * x.itemsize + 1, body)
    if out is not None and o is not out:
        np.copyto(out, o)
        return out
    return o


@kernel(DropoutOp, inplace=True, splits=True)
def dropout(data: np.ndarray, mask: Optional[np.ndarray] = None, shard_rows: Optional[np.ndarray] = None, *,
            out: Optional[tuple] = None, ratio: float = 0.5, training_mode: bool = False, seed: int = 0,
            generator: str = "philox", shard_axis: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(output, mask) of ONNX's Dropout with gradir's counter-based mask (docs/ops.md)."""
    op = "Dropout"
    _check(op, data, mask)
    out_y, out_m = out if out is not None else (None, None)
    res_m = out_m if out_m is not None else np.empty(data.shape, np.bool_)
    if not (training_mode and ratio > 0):  # ONNX: drop none, an all-true mask (a mask operand too)
        res_m[...] = True
        res = out_y if out_y is not None else np.empty(data.shape, data.dtype)
        if res is not data:
            np.copyto(res, data)
        return res, res_m
    if mask is not None:
        if mask is not res_m:
            np.copyto(res_m, mask)
        return _apply_mask(op, data, mask, _scale(data.dtype, ratio), out_y), res_m
    s = _scale(data.dtype, ratio)
    length, count, stride, start = _runs(data.shape, shard_rows, shard_axis)
    o = out_y if out_y is not None and out_y.flags.c_contiguous else np.empty(data.shape, data.dtype)
    o = jit.writable_out(o, op)
    xf, of, mf = np.ascontiguousarray(data).reshape(-1), o.reshape(-1), res_m.reshape(-1)
    compiled = jit.load("dropout")
    seed64 = seed % (1 << 64)
    k0, k1 = np.uint64(seed64 & 0xFFFFFFFF), np.uint64(seed64 >> 32)
    x0 = seed64 % _MINSTD or 1
    threshold = np.uint64(math.ceil(ratio * 2.0 ** 32))
    threshold32 = np.float32(np.float32(ratio) * np.float32(2.0 ** 31))

    def body(lo: int, hi: int) -> None:
        for at, g, k in _segments(lo, hi, length, stride, start):
            y, m, x = of[at:at + k], mf[at:at + k], xf[at:at + k]
            if compiled is None:
                _write(y, m, x, _keep_numpy(g, k, generator, seed, ratio), s)
            elif generator == "philox":
                compiled.philox_run(y, m, jit.readable(x), g, k0, k1, threshold, s)
            else:
                compiled.ort_run(y, m, jit.readable(x), g, x0, threshold32, s)

    parallel_rows(xf.size, 2 * data.itemsize + 1, body)
    if out_y is not None and o is not out_y:
        np.copyto(out_y, o)
        o = out_y
    return o, res_m


@kernel(DropoutGradOp, inplace=True, splits=True)
def dropout_grad(dy: np.ndarray, mask: np.ndarray, *, out: Optional[np.ndarray] = None, ratio: float = 0.5,
                 training_mode: bool = False) -> np.ndarray:
    """ORT's DropoutGrad: ``(mask * dY) / (1 - ratio)``, a copy of dY for ratio 0 (training_mode not read)."""
    _check("DropoutGrad", dy, mask)
    if ratio == 0:
        res = out if out is not None else np.empty(dy.shape, dy.dtype)
        if res is not dy:
            np.copyto(res, dy)
        return res
    return _apply_mask("DropoutGrad", dy, mask, _scale(dy.dtype, ratio), out)
