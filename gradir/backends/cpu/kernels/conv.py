"""Kernels of the convolution and pooling ops (``gradir/ops/conv.py``, ``gradir/ops/pool.py``).

Two paths compute the same functions.  The NumPy path (``conv_np``, ``conv_grad_np``, ``max_pool_np``, ...; the
reference, and the path taken with ``GRADIR_JIT=0``, for other dtypes and beyond 3 spatial axes): Conv and
ConvGrad are GEMMs over im2col columns (X padded, its windows gathered into [N, group, C/group * K, O]
columns, one NumPy matmul per product), the pooling kernels gather the windows the same way and reduce over
the window axis, the gradients scatter-add in a fixed order (``np.add.at``).

The compiled path (``kernels/_jit_conv.py``; Float32 and Float64, 1-D to 3-D), split over the cores the
runtime gives the step (``parallel``), with bits that do not depend on their number:

- Conv and ConvGrad work on blocks of images fixed by the shapes (``_image_blocks``): per image, im2col into a
  scratch buffer of the thread and a GEMM per group straight into Y; ConvGrad computes each block's dW, the
  columns' gradient (col2im into dX, window element by element) and the per-image bias sums, then adds the
  blocks' dW in block order.  The GEMM is gradir's (``_jit_gemm``) where ``FAST_LARGE`` says it beats OpenBLAS
  (Zen): Y reads the columns in place (``gemm_rows``), dW reads the columns packed straight into its panels;
  elsewhere single-threaded BLAS.  A 1x1 convolution of stride 1 reads the images as their columns.
- A depthwise convolution (``group`` = C = M) is a direct loop per channel: Y, dX, and dW and dB in float64
  over the images in order; the channels are shared out.
- The pooling kernels loop over image planes (shared out in row chunks): MaxPool (a vectorized kernel for
  2x2 windows of stride 2) takes the first maximum in window order (a NaN wins) as the NumPy path does.
"""

from __future__ import annotations

import itertools
import math
import threading
from functools import partial
from typing import Any, Callable, Optional

import numpy as np

from ....ops.conv import ConvGradOp, ConvOp, Window, window
from ....ops.pool import (AveragePoolGradOp, AveragePoolOp, MaxPoolGradOp, MaxPoolOp, average_counts, pool_windows,
                          window_positions)
from . import blocked, jit, parallel
from .conv_scratch import conv_grad_scratch, conv_scratch
from .registry import kernel

__all__ = ["conv", "conv_grad", "max_pool", "max_pool_grad", "average_pool", "average_pool_grad"]


def _put(out: Any, k: int, a: np.ndarray) -> np.ndarray:
    o = out[k] if isinstance(out, tuple) else out
    if o is not None and o.shape == a.shape and o.dtype == a.dtype:
        np.copyto(o, a)
        return o
    return a


def _columns(x: np.ndarray, geo: Window, group: int) -> np.ndarray:
    """im2col: [N, group, C/group * K..., O...] -> [N, group, C/group * prod(K), prod(O)]."""
    n, c = x.shape[:2]
    win = pool_windows(x, geo, 0.0)  # [N, C, O..., K...]
    k = len(geo.out)
    win = np.moveaxis(win, tuple(range(2, 2 + k)), tuple(range(2 + k, 2 + 2 * k)))  # [N, C, K..., O...]
    return np.ascontiguousarray(win).reshape(n, group, -1, int(np.prod(geo.out)))


def _geo(x: np.ndarray, w: np.ndarray, attrs: dict) -> Window:
    return window(x.shape[2:], attrs, w.shape[2:])


def conv_np(X: np.ndarray, W: np.ndarray, B: Optional[np.ndarray] = None, *, out: Any = None,
            **attrs: Any) -> np.ndarray:
    """Y by the NumPy path (the reference of the compiled one, and where it is not taken)."""
    geo, group = _geo(X, W, attrs), attrs.get("group", 1)
    cols = _columns(X, geo, group)  # [N, G, CgK, P]
    m = W.shape[0]
    w = W.reshape(group, m // group, -1)  # [G, Mg, CgK]
    y = np.matmul(w[None], cols)  # [N, G, Mg, P]
    y = y.reshape((X.shape[0], m) + geo.out)
    if B is not None:
        y += B.reshape((1, m) + (1,) * len(geo.out))
    return _put(out, 0, y.astype(X.dtype, copy=False))


def _col2im(dcols: np.ndarray, x_shape: tuple, geo: Window) -> np.ndarray:
    """The adjoint of ``_columns``: [N, C, K..., O...] summed back into X's padded layout, window element by
    window element (a fixed order)."""
    k = len(geo.out)
    extra = [max(0, (o - 1) * s + (kk - 1) * d + 1 - (n + b + e))
             for o, s, kk, d, n, b, e in zip(geo.out, geo.strides, geo.kernel, geo.dilations, x_shape[2:], geo.begin,
                                             geo.end)]
    padded = tuple(n + b + e + z for n, b, e, z in zip(x_shape[2:], geo.begin, geo.end, extra))
    dxp = np.zeros(tuple(x_shape[:2]) + padded, dcols.dtype)
    for kk in itertools.product(*(range(n) for n in geo.kernel)):
        sl = tuple(slice(kk[i] * geo.dilations[i], kk[i] * geo.dilations[i] + (geo.out[i] - 1) * geo.strides[i] + 1,
                         geo.strides[i]) for i in range(k))
        dxp[(slice(None), slice(None)) + sl] += dcols[(slice(None), slice(None)) + kk]
    core = tuple(slice(b, b + n) for b, n in zip(geo.begin, x_shape[2:]))
    return dxp[(slice(None), slice(None)) + core]


def conv_grad_np(dY: np.ndarray, X: np.ndarray, W: np.ndarray, *, out: Any = None, **attrs: Any) -> tuple:
    """(dX, dW, dB) by the NumPy path."""
    geo, group = _geo(X, W, attrs), attrs.get("group", 1)
    n, m = dY.shape[:2]
    p = int(np.prod(geo.out))
    dy = dY.reshape(n, group, m // group, p)  # [N, G, Mg, P]
    cols = _columns(X, geo, group)  # [N, G, CgK, P]
    # dW[g] = Σ_n dy[n, g] @ cols[n, g]^T, the batch summed in order
    dw = np.zeros((group, m // group, cols.shape[2]), dY.dtype)
    for i in range(n):
        dw += np.matmul(dy[i], np.swapaxes(cols[i], -1, -2))
    w = W.reshape(group, m // group, -1)
    dcols = np.matmul(np.swapaxes(w, -1, -2)[None], dy)  # [N, G, CgK, P]
    dcols = dcols.reshape((n, X.shape[1]) + geo.kernel + geo.out)
    dx = _col2im(dcols, X.shape, geo)
    db = dY.reshape(n, m, p).astype(np.float64).sum(axis=(0, 2))
    return (_put(out, 0, np.ascontiguousarray(dx).astype(X.dtype, copy=False)),
            _put(out, 1, dw.reshape(W.shape).astype(W.dtype, copy=False)), _put(out, 2, db.astype(W.dtype)))


def _pool_geo(shape: tuple, attrs: dict) -> Window:
    return window(shape[2:], attrs, None, bool(attrs.get("ceil_mode", 0)))


def _images(X: np.ndarray, shard_rows: Optional[np.ndarray], attrs: dict) -> np.ndarray:
    """The index of each image [N, C] in the whole X (a shard's, ``shard_rows``, are the whole X's)."""
    n, c = np.arange(X.shape[0], dtype=np.int64)[:, None], np.arange(X.shape[1], dtype=np.int64)[None, :]
    if shard_rows is None:
        return n * X.shape[1] + c
    if attrs.get("shard_axis", 0) == 0:
        return shard_rows[:, :1].astype(np.int64) * X.shape[1] + c
    return n * shard_rows[:, 1].astype(np.int64)[None, :] + shard_rows[:, 0].astype(np.int64)[None, :]


def max_pool_np(X: np.ndarray, shard_rows: Optional[np.ndarray] = None, *, out: Any = None, **attrs: Any) -> tuple:
    """(Y, Indices) by the NumPy path."""
    geo = _pool_geo(X.shape, attrs)
    win = pool_windows(X, geo, -np.inf)
    flat = win.reshape(win.shape[:2 + len(geo.out)] + (-1,))
    arg = np.argmax(flat, axis=-1)  # the first maximum in window order
    y = np.take_along_axis(flat, arg[..., None], axis=-1)[..., 0]
    pos = window_positions(X.shape, geo).reshape(geo.out + (-1,))  # [O..., K]
    local = np.take_along_axis(np.broadcast_to(pos, arg.shape + pos.shape[-1:]), arg[..., None], axis=-1)[..., 0]
    sp = X.shape[2:]
    if attrs.get("storage_order", 0):
        coords = np.unravel_index(local, sp)
        local = np.ravel_multi_index(coords, sp, order="F")
    image = int(np.prod(sp))
    base = (_images(X, shard_rows, attrs) * image).reshape(X.shape[:2] + (1,) * len(sp))
    return _put(out, 0, y.astype(X.dtype, copy=False)), _put(out, 1, (local + base).astype(np.int64))


def max_pool_grad_np(dY: np.ndarray, Indices: np.ndarray, *, out: Any = None, **attrs: Any) -> np.ndarray:
    """dX by the NumPy path: dY[n, c] added into the image dX[n, c] at Indices modulo the image size, in dY's
    order."""
    shape = tuple(dY.shape[:2]) + tuple(attrs["shape"][2:])
    image = int(np.prod(shape[2:]))
    dx = np.zeros(int(np.prod(shape)), dY.dtype)
    rows = np.arange(shape[0] * shape[1], dtype=np.int64).reshape(shape[:2] + (1,) * (dY.ndim - 2)) * image
    idx = (Indices.astype(np.int64) % image + rows).reshape(-1)
    np.add.at(dx, idx, dY.reshape(-1))
    return _put(out, 0, dx.reshape(shape))


def average_pool_np(X: np.ndarray, *, out: Any = None, **attrs: Any) -> np.ndarray:
    """Y by the NumPy path."""
    geo = _pool_geo(X.shape, attrs)
    win = pool_windows(X, geo, 0.0)
    sums = win.reshape(win.shape[:2 + len(geo.out)] + (-1,)).sum(axis=-1)
    counts = average_counts(X.shape, geo, attrs.get("count_include_pad", 0)).astype(X.dtype)
    return _put(out, 0, (sums / counts).astype(X.dtype, copy=False))


def average_pool_grad_np(dY: np.ndarray, *, out: Any = None, **attrs: Any) -> np.ndarray:
    """dX by the NumPy path."""
    shape = tuple(dY.shape[:2]) + tuple(attrs["shape"][2:])
    geo = _pool_geo(shape, attrs)
    counts = average_counts(shape, geo, attrs.get("count_include_pad", 0)).astype(dY.dtype)
    g = dY / counts
    k = len(geo.out)
    dcols = np.broadcast_to(g[(Ellipsis,) + (None,) * k], g.shape + geo.kernel)  # [N, C, O..., K...]
    dcols = np.moveaxis(dcols, tuple(range(2, 2 + k)), tuple(range(2 + k, 2 + 2 * k)))  # [N, C, K..., O...]
    dx = _col2im(dcols, shape, geo)
    return _put(out, 0, np.ascontiguousarray(dx).astype(dY.dtype, copy=False))


# ---------------------------------------------------------------------------------------------
# the compiled path (``_jit_conv``): Float32 and Float64, 1-D to 3-D, the work split over the cores given

_BLOCK_BYTES = 1 << 20  # im2col columns per block of images: about what stays in L2/L3 for the block's GEMMs
_local = threading.local()  # each thread's scratch buffers, kept for its next calls


def _jc(*arrays: np.ndarray, rank: int) -> Any:
    """The compiled module where it applies: numba on, float32/float64 operands, 1-3 spatial axes, no empty axis."""
    if not 1 <= rank <= 3 or any(a.dtype not in (np.float32, np.float64) or a.size == 0 for a in arrays):
        return None
    return jit.load("conv")


def _geo3(spatial: tuple, geo: Window) -> np.ndarray:
    """``_jit_conv``'s geometry [3, 6]: (kernel, stride, dilation, pad_begin, input size, output size) per axis,
    leading axes of size 1 for 1-D and 2-D."""
    rows = [(1, 1, 1, 0, 1, 1)] * (3 - len(spatial))
    rows += list(zip(geo.kernel, geo.strides, geo.dilations, geo.begin, spatial, geo.out))
    return np.array(rows, np.int64)


def _as3d(a: np.ndarray, lead: int) -> np.ndarray:
    """``a`` [lead axes..., spatial...] viewed with 3 spatial axes (leading ones of size 1), C-contiguous."""
    a = np.ascontiguousarray(a)
    return a.reshape(a.shape[:lead] + (1,) * (3 - (a.ndim - lead)) + a.shape[lead:])


def _target(out: Any, k: int, shape: tuple, dtype: np.dtype) -> np.ndarray:
    """The runtime's buffer for result ``k`` where it fits (C-contiguous, writeable), else a new array."""
    o = out[k] if isinstance(out, tuple) else out
    if (o is not None and o.shape == shape and o.dtype == dtype and o.flags.c_contiguous
            and o.flags.writeable):
        return o
    return np.empty(shape, dtype)


def _scratch(name: str, shape: tuple, dtype: np.dtype) -> np.ndarray:
    """This thread's scratch array ``name`` (grown as needed, reused from call to call)."""
    size = math.prod(shape)
    key = f"{name}{np.dtype(dtype).str}"
    buf = getattr(_local, key, None)
    if buf is None or buf.size < size:
        buf = np.empty(size, dtype)
        setattr(_local, key, buf)
    return buf[:size].reshape(shape)


def _image_blocks(n: int, rows: int, p: int, itemsize: int) -> list[int]:
    """Block edges over the ``n`` images: as many per block as keep its im2col columns (``rows`` x ``p`` per
    image) near ``_BLOCK_BYTES``.  Shapes alone decide them, never the thread count (dW sums the blocks in
    order)."""
    per = max(1, min(n, _BLOCK_BYTES // max(1, rows * p * itemsize)))
    return list(range(0, n, per)) + [n]


def _split(n: int, body: Callable[[int], None]) -> None:
    """``body(i)`` for every block, on the cores given, each block's GEMMs in single-threaded BLAS."""
    with parallel.own_blas_threads() as held:
        if held.ok:
            parallel.run_blocks(n, body)
        else:
            for i in range(n):
                body(i)


def _conv_fast(jc: Any, X: np.ndarray, W: np.ndarray, B: Optional[np.ndarray], geo: Window, group: int,
               out: Any) -> np.ndarray:
    """Y: depthwise (one input and one output channel per group) by a direct loop per channel, else im2col
    per block of images and one GEMM per image and group straight into Y: gradir's (``_jit_gemm.gemm_rows``,
    the columns read in place, no packing) where ``FAST_LARGE`` says it beats OpenBLAS and the columns' rows
    are not a multiple of 4 KB apart (there a panel's rows share one L1 set: a 1x1 convolution of 32x32
    images ran 1.35x BLAS's time, a 3x3 one of 16x16 images 0.86x), else BLAS."""
    n, c = X.shape[:2]
    m, k, p = W.shape[0], math.prod(geo.kernel), math.prod(geo.out)
    y = _target(out, 0, (n, m) + geo.out, X.dtype)
    g3, x5 = _geo3(X.shape[2:], geo), _as3d(X, 2)
    if c == group == m:
        w2, y5 = np.ascontiguousarray(W).reshape(c, k), y.reshape(n, m, *g3[:, 5])
        b = np.ascontiguousarray(B) if B is not None else np.zeros(c, X.dtype)
        parallel.parallel_rows(c, n * (x5[0, 0].size + p) * X.itemsize,
                               lambda lo, hi: jc.depthwise(x5, w2, b, B is not None, g3, lo, hi, y5))
        return y
    cgk, mg = c // group * k, m // group
    w3, y3 = np.ascontiguousarray(W).reshape(group, mg, cgk), y.reshape(n, group, mg, p)
    edges = _image_blocks(n, c * k, p, X.itemsize)
    if jc.FAST_LARGE and (p * X.itemsize) % 4096:  # gradir's GEMM reading the columns in place
        b2 = (np.ascontiguousarray(B) if B is not None else np.zeros(m, X.dtype)).reshape(group, mg)
        _split(len(edges) - 1, lambda i: jc.conv_images(x5, g3, edges[i], edges[i + 1], w3, b2, B is not None,
                                                        _scratch("cols", (c * k, p), X.dtype), y3))
        return y

    point = jc._pointwise(g3)  # 1x1, stride 1, no padding: the columns are the images themselves

    def block(i: int) -> None:
        n0, n1 = edges[i], edges[i + 1]
        if not point:
            cols = _scratch("cols", (c * k, (n1 - n0) * p), X.dtype)
            jc.im2col(x5, g3, n0, n1, cols)
            colg = cols.reshape(group, cgk, (n1 - n0) * p)
        for j in range(n1 - n0):
            src = x5[n0 + j].reshape(group, cgk, p) if point else colg[:, :, j * p:(j + 1) * p]
            np.matmul(w3, src, out=y3[n0 + j])
            if B is not None:
                y3[n0 + j] += B.reshape(group, mg, 1)

    _split(len(edges) - 1, block)
    return y


def _conv_grad_fast(jc: Any, dY: np.ndarray, X: np.ndarray, W: np.ndarray, geo: Window, group: int,
                    out: Any) -> tuple:
    """(dX, dW, dB): depthwise by a direct loop per channel; else per block of images (fixed by the shapes)
    im2col, the block's dW, its columns' gradient and col2im into dX; the blocks' dW summed in order.  With
    gradir's GEMM (``FAST_LARGE``) a block's dW sums its images' products in order (the columns packed
    straight into its panels); with BLAS it is one GEMM over the block's images side by side."""
    n, c = X.shape[:2]
    m, k, p = W.shape[0], math.prod(geo.kernel), math.prod(geo.out)
    dx, dw, db = (_target(out, 0, X.shape, X.dtype), _target(out, 1, W.shape, W.dtype),
                  _target(out, 2, (m,), W.dtype))
    g3, x5 = _geo3(X.shape[2:], geo), _as3d(X, 2)
    dx5 = dx.reshape((n, c) + tuple(g3[:, 4]))
    if c == group == m:
        w2, dy5 = np.ascontiguousarray(W).reshape(c, k), _as3d(dY, 2)
        dw64, db64 = np.empty((c, k)), np.empty(c)
        parallel.parallel_rows(c, n * (x5[0, 0].size + p) * 2 * X.itemsize,
                               lambda lo, hi: jc.depthwise_grad(dy5, x5, w2, g3, lo, hi, dx5, dw64, db64))
        dw[...] = dw64.reshape(W.shape)
        db[...] = db64
        return dx, dw, db
    cgk, mg = c // group * k, m // group
    w3, dy3 = np.ascontiguousarray(W).reshape(group, mg, cgk), np.ascontiguousarray(dY).reshape(n, m, p)
    edges = _image_blocks(n, c * k, p, X.itemsize)
    parts = np.empty((len(edges) - 1, group, mg, cgk), W.dtype)
    sums = np.empty((n, m))

    def block(i: int) -> None:
        n0, n1 = edges[i], edges[i + 1]
        q = (n1 - n0) * p
        cols = _scratch("cols", (c * k, q), X.dtype)
        jc.im2col(x5, g3, n0, n1, cols)
        if n1 - n0 == 1:
            dyb = dy3[n0]
        else:  # the block's images side by side: one GEMM over all of them
            dyb = _scratch("dyb", (m, q), X.dtype)
            dyb.reshape(m, n1 - n0, p)[...] = dy3[n0:n1].transpose(1, 0, 2)
        dyg = dyb.reshape(group, mg, q)
        np.matmul(dyg, cols.reshape(group, cgk, q).transpose(0, 2, 1), out=parts[i])
        dcols = _scratch("dcols", (c * k, q), X.dtype)
        np.matmul(w3.transpose(0, 2, 1), dyg, out=dcols.reshape(group, cgk, q))
        jc.col2im(dcols, g3, n0, n1, dx5)
        jc.row_sums(dy3, n0, n1, sums)

    if jc.FAST_LARGE:  # gradir's GEMM, the columns packed straight into its panels for dW
        pw = 16 if X.dtype == np.float32 else 8
        wt3, dy4 = np.ascontiguousarray(w3.transpose(0, 2, 1)), dy3.reshape(n, group, mg, p)

        def fast(i: int) -> None:
            n0, n1 = edges[i], edges[i + 1]
            colt = _scratch("colt", (group, -(-cgk // pw), p, pw), X.dtype)
            dcols, tmp = _scratch("dcols", (c * k, p), X.dtype), _scratch("tmp", (mg, cgk), X.dtype)
            jc.conv_grad_images(dy4, x5, g3, n0, n1, wt3, colt, dcols, tmp, parts[i], dx5)
            jc.row_sums(dy3, n0, n1, sums)
        block = fast

    _split(len(edges) - 1, block)
    acc = parts[0].copy()
    for part in parts[1:]:  # the blocks in order: the same sum for any number of cores
        acc += part
    dw[...] = acc.reshape(W.shape)
    db[...] = sums.sum(axis=0)
    return dx, dw, db


def _conv_width(operands: Any, results: Any, attrs: Any) -> int:
    """Two cores for a convolution of at least ``2·MIN_BLOCK_FLOPS`` (its image blocks or channels share them);
    ``results[0]`` is Y (ConvGrad passes its dY)."""
    x, w = operands[0], operands[1]
    if x is None or w is None or not x.is_static or not w.is_static or not results or results[0] is None:
        return 1
    y = results[0].shape if results[0].is_static else None
    if y is None or len(x.shape) < 3:
        return 1
    fl = 2.0 * math.prod(y) * math.prod(w.shape[1:])
    return 2 if fl >= 2 * blocked.MIN_BLOCK_FLOPS else 1


def _warm(dtype: Any) -> None:
    """Load ``_jit_conv`` ahead of a graph's first run."""
    if np.dtype(dtype) in (np.float32, np.float64):
        jit.load("conv")


def _conv_grad_width(operands: Any, results: Any, attrs: Any) -> int:
    return _conv_width(operands[1:], operands[:1], attrs)


# what each keeps on its threads (``conv._scratch``) and allocates per call (``conv_scratch``)
_SCRATCH = {k: (partial(f, _BLOCK_BYTES, wd), partial(f, _BLOCK_BYTES, wd, kept=True))
            for k, f, wd in [("conv", conv_scratch, _conv_width), ("grad", conv_grad_scratch, _conv_grad_width)]}


@kernel(ConvOp, blas=True, width=_conv_width, warm=_warm, scratch=_SCRATCH["conv"][0], kept=_SCRATCH["conv"][1])
def conv(X: np.ndarray, W: np.ndarray, B: Optional[np.ndarray] = None, *, out: Any = None, **attrs: Any) -> np.ndarray:
    """Y (docs/ops.md)."""
    geo, group = _geo(X, W, attrs), attrs.get("group", 1)
    jc = _jc(X, W, rank=X.ndim - 2)
    if jc is None or (B is not None and B.dtype != X.dtype) or W.dtype != X.dtype:
        return conv_np(X, W, B, out=out, **attrs)
    return _conv_fast(jc, X, W, B, geo, group, out)


@kernel(ConvGradOp, blas=True, width=_conv_grad_width, warm=_warm, scratch=_SCRATCH["grad"][0],
        kept=_SCRATCH["grad"][1])
def conv_grad(dY: np.ndarray, X: np.ndarray, W: np.ndarray, *, out: Any = None, **attrs: Any) -> tuple:
    """(dX, dW, dB) (docs/ops.md)."""
    jc = _jc(dY, X, W, rank=X.ndim - 2)
    if jc is None or not dY.dtype == X.dtype == W.dtype:
        return conv_grad_np(dY, X, W, out=out, **attrs)
    return _conv_grad_fast(jc, dY, X, W, _geo(X, W, attrs), attrs.get("group", 1), out)


def _planes(shape: tuple) -> int:
    return shape[0] * shape[1]


@kernel(MaxPoolOp, splits=True, warm=_warm)
def max_pool(X: np.ndarray, shard_rows: Optional[np.ndarray] = None, *, out: Any = None, **attrs: Any) -> tuple:
    """(Y, Indices) (docs/ops.md); a shard's (``shard_rows``) Indices are the whole X's."""
    jc = _jc(X, rank=X.ndim - 2)
    if jc is None:
        return max_pool_np(X, shard_rows, out=out, **attrs)
    geo = _pool_geo(X.shape, attrs)
    g3, sp = _geo3(X.shape[2:], geo), X.shape[2:]
    image, r = math.prod(sp), _planes(X.shape)
    y, idx = _target(out, 0, X.shape[:2] + geo.out, X.dtype), _target(out, 1, X.shape[:2] + geo.out, np.int64)
    x4, y4, i4 = _as3d(X, 2).reshape(r, *g3[:, 4]), y.reshape(r, *g3[:, 5]), idx.reshape(r, *g3[:, 5])
    base = (_images(X, shard_rows, attrs) * image).reshape(-1)
    two = g3[0].tolist() == [1, 1, 1, 0, 1, 1] and all(  # 2x2 windows, stride 2, all inside: the common case
        g3[a, :4].tolist() == [2, 2, 1, 0] and 2 * g3[a, 5] <= g3[a, 4] for a in (1, 2))
    pool = jc.max_pool_2x2 if two else None
    parallel.parallel_rows(r, (image + 3 * math.prod(geo.out)) * X.itemsize,
                           lambda lo, hi: pool(x4, lo, hi, base, y4, i4) if pool is not None
                           else jc.max_pool(x4, g3, lo, hi, base, y4, i4))
    if attrs.get("storage_order", 0):  # the spatial axes column-major
        b = base.reshape(X.shape[:2] + (1,) * len(sp))
        idx[...] = np.ravel_multi_index(np.unravel_index(idx - b, sp), sp, order="F") + b
    return y, idx


@kernel(MaxPoolGradOp, splits=True, warm=_warm)
def max_pool_grad(dY: np.ndarray, Indices: np.ndarray, *, out: Any = None, **attrs: Any) -> np.ndarray:
    """dX (docs/ops.md): dY[n, c] added into the image dX[n, c] at Indices modulo the image size, in dY's order."""
    shape = tuple(dY.shape[:2]) + tuple(attrs["shape"][2:])
    jc = _jc(dY, rank=dY.ndim - 2)
    if jc is None or math.prod(shape) == 0:
        return max_pool_grad_np(dY, Indices, out=out, **attrs)
    r, image = _planes(shape), math.prod(shape[2:])
    dx = _target(out, 0, shape, dY.dtype)
    dy2 = np.ascontiguousarray(dY).reshape(r, -1)
    ix2 = np.ascontiguousarray(Indices, np.int64).reshape(r, -1)
    parallel.parallel_rows(r, image * dY.itemsize + dy2.shape[1] * (8 + dY.itemsize),
                           lambda lo, hi: jc.max_pool_grad(dy2, ix2, image, lo, hi, dx.reshape(r, image)))
    return dx


def _counts3(shape: tuple, geo: Window, attrs: dict) -> np.ndarray:
    counts = average_counts(shape, geo, attrs.get("count_include_pad", 0))
    return np.ascontiguousarray(counts, np.float64).reshape(tuple(_geo3(shape[2:], geo)[:, 5]))


@kernel(AveragePoolOp, splits=True, warm=_warm)
def average_pool(X: np.ndarray, *, out: Any = None, **attrs: Any) -> np.ndarray:
    """Y (docs/ops.md)."""
    jc = _jc(X, rank=X.ndim - 2)
    if jc is None:
        return average_pool_np(X, out=out, **attrs)
    geo = _pool_geo(X.shape, attrs)
    g3, r = _geo3(X.shape[2:], geo), _planes(X.shape)
    y = _target(out, 0, X.shape[:2] + geo.out, X.dtype)
    x4, y4, counts = _as3d(X, 2).reshape(r, *g3[:, 4]), y.reshape(r, *g3[:, 5]), _counts3(X.shape, geo, attrs)
    parallel.parallel_rows(r, (x4[0].size + y4[0].size) * X.itemsize,
                           lambda lo, hi: jc.average_pool(x4, g3, counts, lo, hi, y4))
    return y


@kernel(AveragePoolGradOp, splits=True, warm=_warm)
def average_pool_grad(dY: np.ndarray, *, out: Any = None, **attrs: Any) -> np.ndarray:
    """dX (docs/ops.md)."""
    shape = tuple(dY.shape[:2]) + tuple(attrs["shape"][2:])
    jc = _jc(dY, rank=dY.ndim - 2)
    if jc is None or math.prod(shape) == 0:
        return average_pool_grad_np(dY, out=out, **attrs)
    geo = _pool_geo(shape, attrs)
    g3, r = _geo3(shape[2:], geo), _planes(shape)
    dx = _target(out, 0, shape, dY.dtype)
    dy4, counts = _as3d(dY, 2).reshape(r, *g3[:, 5]), _counts3(shape, geo, attrs)
    dx4 = dx.reshape(r, *g3[:, 4])
    parallel.parallel_rows(r, (dx4[0].size + dy4[0].size) * dY.itemsize,
                           lambda lo, hi: jc.average_pool_grad(dy4, g3, counts, lo, hi, dx4))
    return dx
