"""Compiled loops of the convolution and pooling kernels (``kernels/conv.py``), Float32 and Float64.

Every kernel sees 3-D images (``kernels/conv.py`` views 1-D and 2-D ones with leading axes of size 1), with
the geometry ``geo`` [3, 6] int64: per axis (kernel, stride, dilation, pad_begin, input size, output size).
Window positions outside the input (padding, a ceil_mode window's end) give zeros to the convolutions and
the average and nothing to the maximum.  Fixed orders, whichever thread computes what: col2im adds each
input element's contributions in window order from zero (the NumPy path's order); the depthwise kernels
chain each output over the window (on a padded copy of the plane), dX output row by output row, dW per
channel over the images in order (float64); the pooling kernels walk each window in order (the first
maximum wins, a NaN beats every number, as ``np.argmax``), the gradients add in the order of the outputs.
The callers split work by images, planes or channels, which these loops take as index ranges;
``conv_images`` and ``conv_grad_images`` run blocks of images with gradir's GEMM (``_jit_gemm``: every
element one fixed chain of fused multiply-adds over k, whatever the blocking).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._jit_core import ELEMENTWISE, REDUCTION
from ._jit_gemm import FAST_LARGE, gemm, gemm_rows
from ._jit_im2col import pad_shape, pad_plane, out_range, col2im, im2col, im2col_packed

__all__ = ["FAST_LARGE", "im2col", "col2im", "row_sums", "conv_images", "conv_grad_images", "depthwise",
           "depthwise_grad", "max_pool", "max_pool_2x2", "max_pool_grad", "average_pool", "average_pool_grad"]

_F64 = np.float64


@njit(**ELEMENTWISE)
def _pointwise(geo):  # type: ignore[no-untyped-def]
    """Whether the columns are the image itself: a 1x1x1 kernel, stride 1, no padding."""
    for a in range(3):
        if geo[a, 0] != 1 or geo[a, 1] != 1 or geo[a, 3] != 0 or geo[a, 4] != geo[a, 5]:
            return False
    return True


@njit(nogil=True, cache=True, boundscheck=False, error_model="numpy")
def conv_images(x, geo, n0, n1, w3, b, has_b, cols, y3):  # type: ignore[no-untyped-def]
    """Y of images [n0, n1) by gradir's GEMM: each image's columns (``cols`` [C*K, P], ``im2col``), then
    Y[n, g] = W[g]·cols_g read in place (``gemm_rows``: no packing; w3 [G, Mg, Cg*K], y3 [N, G, Mg, P]),
    then the bias (b [G, Mg])."""
    cgk = w3.shape[2]
    P = y3.shape[3]
    for n in range(n0, n1):
        if _pointwise(geo):  # the columns are the image itself
            src = x[n].reshape((x.shape[1], P))
        else:
            im2col(x, geo, n, n + 1, cols)
            src = cols
        for g in range(w3.shape[0]):
            yg = y3[n, g]
            gemm_rows(w3[g], src[g * cgk:(g + 1) * cgk], yg)
            if has_b:
                for i in range(yg.shape[0]):
                    bi = b[g, i]
                    for q in range(yg.shape[1]):
                        yg[i, q] += bi


@njit(nogil=True, cache=True, boundscheck=False, error_model="numpy")
def conv_grad_images(dy3, x, geo, n0, n1, wt3, colt, dcols, tmp, dw3, dx):  # type: ignore[no-untyped-def]
    """ConvGrad's dX and the dW of images [n0, n1) by gradir's GEMM: dcols_g = W[g]ᵀ·dY[n, g] (wt3 [G,
    Cg*K, Mg], read in place: dcols [C*K, P]) summed back by ``col2im``; dW[g] (dw3 [G, Mg, Cg*K]) =
    Σ_n dY[n, g]·cols_gᵀ over the images in order (each product into ``tmp`` [Mg, Cg*K], then added), the
    columns packed straight into panels (``colt`` [G, ceil(Cg*K/PW), P, PW])."""
    G = wt3.shape[0]
    cgk = wt3.shape[1]
    cg = x.shape[1] // G
    dw3[:] = 0
    for n in range(n0, n1):
        im2col_packed(x, geo, n, cg, colt)
        for g in range(G):
            gemm(dy3[n, g], colt[g], tmp)
            dg = dw3[g]
            for i in range(tmp.shape[0]):
                for j in range(cgk):
                    dg[i, j] += tmp[i, j]
            if _pointwise(geo):  # dX is the columns' gradient itself
                gemm_rows(wt3[g], dy3[n, g], dx[n].reshape((dx.shape[1], dcols.shape[1]))[g * cgk:(g + 1) * cgk])
            else:
                gemm_rows(wt3[g], dy3[n, g], dcols[g * cgk:(g + 1) * cgk])
        if not _pointwise(geo):
            col2im(dcols, geo, n, n + 1, dx)


@njit(**REDUCTION)
def row_sums(a, n0, n1, out):  # type: ignore[no-untyped-def]
    """out[n, m] = Σ_p a[n, m, p] in float64 for n in [n0, n1) (dB's per-image sums)."""
    for n in range(n0, n1):
        for m in range(a.shape[1]):
            s = 0.0
            r = a[n, m]
            for p in range(a.shape[2]):
                s += _F64(r[p])
            out[n, m] = s


@njit(**ELEMENTWISE)
def depthwise(x, w, b, has_b, geo, c0, c1, y):  # type: ignore[no-untyped-def]
    """y[n, c] = b[c] + Σ_k w[c, k] x[n, c, window k] for channels [c0, c1): x [N, C, D, H, W], w [C, K],
    y [N, C, OD, OH, OW]; each output a chain over the window in order from 0 (the padding's zeros
    included, as the im2col columns have them), then the bias.  Each plane is copied into a padded one
    first, so that every window element's loop runs over the whole output row (2x faster than skipping
    the padding: measured 35 against 69 ms for 64x64 planes of 32x32)."""
    N = x.shape[0]
    kd, sd, dd = geo[0, 0], geo[0, 1], geo[0, 2]
    kh, sh, dh = geo[1, 0], geo[1, 1], geo[1, 2]
    kw, sw, dw = geo[2, 0], geo[2, 1], geo[2, 2]
    od, oh, ow = geo[0, 5], geo[1, 5], geo[2, 5]
    pad = np.empty(pad_shape(geo), x.dtype)
    acc = np.empty(ow, x.dtype)
    for n in range(N):
        for c in range(c0, c1):
            pad_plane(x[n, c], geo, pad)
            yc = y[n, c]
            for zo in range(od):
                for yo in range(oh):
                    acc[:] = 0
                    for a in range(kd):
                        for bb in range(kh):
                            row = pad[zo * sd + a * dd, yo * sh + bb * dh]
                            for e in range(kw):
                                wk = w[c, (a * kh + bb) * kw + e]
                                off = e * dw
                                if sw == 1:  # contiguous: vectorized
                                    for xo in range(ow):
                                        acc[xo] += wk * row[xo + off]
                                else:
                                    for xo in range(ow):
                                        acc[xo] += wk * row[xo * sw + off]
                    yr = yc[zo, yo]
                    bc = b[c] if has_b else 0
                    for xo in range(ow):
                        yr[xo] = acc[xo] + bc if has_b else acc[xo]


@njit(**REDUCTION)
def depthwise_grad(dy, x, w, geo, c0, c1, dx, dw, db):  # type: ignore[no-untyped-def]
    """dX, dW (float64 [C, K]) and dB (float64 [C]) of ``depthwise`` for channels [c0, c1), through padded
    planes as ``depthwise``: dX adds each output row's window elements in order, output row after output row;
    dW[c, k] and dB[c] sum over the images in order (each image's sum vectorized in a fixed order)."""
    N = x.shape[0]
    kd, sd, dd = geo[0, 0], geo[0, 1], geo[0, 2]
    kh, sh, dh = geo[1, 0], geo[1, 1], geo[1, 2]
    kw, sw, dw_ = geo[2, 0], geo[2, 1], geo[2, 2]
    od, oh, ow, pd, ph, pw = geo[0, 5], geo[1, 5], geo[2, 5], geo[0, 3], geo[1, 3], geo[2, 3]
    nd, nh, nw, K = geo[0, 4], geo[1, 4], geo[2, 4], kd * kh * kw
    pad, dpad, part = np.empty(pad_shape(geo), x.dtype), np.empty(pad_shape(geo), x.dtype), np.empty(K)
    dw[c0:c1] = 0.0
    db[c0:c1] = 0.0
    for n in range(N):
        for c in range(c0, c1):
            pad_plane(x[n, c], geo, pad)
            dpad[:] = 0
            part[:] = 0.0
            s = 0.0
            for zo in range(od):
                for yo in range(oh):
                    g = dy[n, c, zo, yo]
                    for xo in range(ow):
                        s += _F64(g[xo])
                    for a in range(kd):
                        for bb in range(kh):
                            row = pad[zo * sd + a * dd, yo * sh + bb * dh]
                            drow = dpad[zo * sd + a * dd, yo * sh + bb * dh]
                            for e in range(kw):
                                k = (a * kh + bb) * kw + e
                                wk = w[c, k]
                                off = e * dw_
                                acc = 0.0
                                if sw == 1:  # contiguous: vectorized
                                    for xo in range(ow):
                                        acc += _F64(g[xo]) * _F64(row[xo + off])
                                    for xo in range(ow):
                                        drow[xo + off] += wk * g[xo]
                                else:
                                    for xo in range(ow):
                                        acc += _F64(g[xo]) * _F64(row[xo * sw + off])
                                        drow[xo * sw + off] += wk * g[xo]
                                part[k] += acc
            db[c] += s
            for k in range(K):
                dw[c, k] += part[k]
            dxc = dx[n, c]
            for zi in range(nd):
                for yi in range(nh):
                    dst = dxc[zi, yi]
                    i, j = zi + pd, yi + ph
                    if i < dpad.shape[0] and j < dpad.shape[1]:
                        srow = dpad[i, j]
                        for xi in range(nw):
                            q = xi + pw
                            dst[xi] = srow[q] if q < dpad.shape[2] else 0
                    else:
                        dst[:] = 0


@njit(**ELEMENTWISE)
def max_pool(x, geo, r0, r1, base, y, idx):  # type: ignore[no-untyped-def]
    """Y and Indices of the planes [r0, r1) of x [R, D, H, W]: the first maximum in window order (a NaN
    wins), its flat row-major position in the plane plus base[r].  Row by row of outputs: each window
    element in order updates the whole row (the same comparisons as one window at a time)."""
    kd, sd, dd, pd, nd, od = geo[0, 0], geo[0, 1], geo[0, 2], geo[0, 3], geo[0, 4], geo[0, 5]
    kh, sh, dh, ph, nh, oh = geo[1, 0], geo[1, 1], geo[1, 2], geo[1, 3], geo[1, 4], geo[1, 5]
    kw, sw, dw, pw, nw, ow = geo[2, 0], geo[2, 1], geo[2, 2], geo[2, 3], geo[2, 4], geo[2, 5]
    for r in range(r0, r1):
        for zo in range(od):
            for yo in range(oh):
                yr = y[r, zo, yo]
                ir = idx[r, zo, yo]
                ir[:] = -1
                for a in range(kd):
                    zi = zo * sd + a * dd - pd
                    if zi < 0 or zi >= nd:
                        continue
                    for b in range(kh):
                        yi = yo * sh + b * dh - ph
                        if yi < 0 or yi >= nh:
                            continue
                        row = x[r, zi, yi]
                        at = (zi * nh + yi) * nw
                        for e in range(kw):
                            e_lo, e_hi = out_range(ow, e, sw, dw, pw, nw)
                            for xo in range(e_lo, e_hi):
                                xi = xo * sw + e * dw - pw
                                v = row[xi]
                                u = yr[xo]
                                j = ir[xo]
                                take = (j < 0) | (v > u) | ((v != v) & (u == u))  # selects, no branches
                                yr[xo] = v if take else u
                                ir[xo] = at + xi if take else j
                b0 = base[r]
                for xo in range(ow):
                    ir[xo] += b0


@njit(**ELEMENTWISE)
def _better(v, u):  # type: ignore[no-untyped-def]
    """Whether ``v`` replaces the maximum ``u`` so far (np.argmax's rule: a NaN wins, the first one)."""
    return (v > u) | ((v != v) & (u == u))


@njit(**ELEMENTWISE)
def max_pool_2x2(x, r0, r1, base, y, idx):  # type: ignore[no-untyped-def]
    """``max_pool`` for the common 2-D window: 2x2, stride 2, no padding, no dilation, every window inside
    (constant strides: vectorized).  x [R, 1, H, W], y and idx [R, 1, OH, OW]."""
    nw = x.shape[3]
    for r in range(r0, r1):
        b0 = base[r]
        for yo in range(y.shape[2]):
            top = x[r, 0, 2 * yo]
            bot = x[r, 0, 2 * yo + 1]
            yr = y[r, 0, yo]
            ir = idx[r, 0, yo]
            at = 2 * yo * nw
            for xo in range(y.shape[3]):
                best = top[2 * xo]
                j = 0
                v = top[2 * xo + 1]
                t = _better(v, best)
                best = v if t else best
                j = 1 if t else j
                v = bot[2 * xo]
                t = _better(v, best)
                best = v if t else best
                j = nw if t else j
                v = bot[2 * xo + 1]
                t = _better(v, best)
                best = v if t else best
                j = nw + 1 if t else j
                yr[xo] = best
                ir[xo] = b0 + at + 2 * xo + j


@njit(**ELEMENTWISE)
def max_pool_grad(dy, idx, image, r0, r1, dx):  # type: ignore[no-untyped-def]
    """dx[r] (flat [R, image]) = dy[r] added at idx[r] modulo ``image``, in dy's order, planes [r0, r1)."""
    for r in range(r0, r1):
        d = dx[r]
        d[:] = 0
        g = dy[r]
        ix = idx[r]
        for o in range(g.shape[0]):
            d[ix[o] % image] += g[o]


@njit(**ELEMENTWISE)
def average_pool(x, geo, counts, r0, r1, y):  # type: ignore[no-untyped-def]
    """y[r] = the window's float64 sum (in window order, padding left out) / counts[o] (float64 [OD, OH, OW])
    for the planes [r0, r1), a row of outputs at a time."""
    kd, sd, dd, pd, nd, od = geo[0, 0], geo[0, 1], geo[0, 2], geo[0, 3], geo[0, 4], geo[0, 5]
    kh, sh, dh, ph, nh, oh = geo[1, 0], geo[1, 1], geo[1, 2], geo[1, 3], geo[1, 4], geo[1, 5]
    kw, sw, dw, pw, nw, ow = geo[2, 0], geo[2, 1], geo[2, 2], geo[2, 3], geo[2, 4], geo[2, 5]
    acc = np.empty(ow)
    for r in range(r0, r1):
        for zo in range(od):
            for yo in range(oh):
                acc[:] = 0.0
                for a in range(kd):
                    zi = zo * sd + a * dd - pd
                    if zi < 0 or zi >= nd:
                        continue
                    for b in range(kh):
                        yi = yo * sh + b * dh - ph
                        if yi < 0 or yi >= nh:
                            continue
                        row = x[r, zi, yi]
                        for e in range(kw):
                            e_lo, e_hi = out_range(ow, e, sw, dw, pw, nw)
                            for xo in range(e_lo, e_hi):
                                acc[xo] += _F64(row[xo * sw + e * dw - pw])
                yr = y[r, zo, yo]
                cr = counts[zo, yo]
                for xo in range(ow):
                    yr[xo] = acc[xo] / cr[xo]


@njit(**ELEMENTWISE)
def average_pool_grad(dy, geo, counts, r0, r1, dx):  # type: ignore[no-untyped-def]
    """dx[r] = Σ over the windows holding each element of dy / counts, the windows in output order and
    each window's elements in order (planes [r0, r1))."""
    kd, sd, dd, pd, nd, od = geo[0, 0], geo[0, 1], geo[0, 2], geo[0, 3], geo[0, 4], geo[0, 5]
    kh, sh, dh, ph, nh, oh = geo[1, 0], geo[1, 1], geo[1, 2], geo[1, 3], geo[1, 4], geo[1, 5]
    kw, sw, dw, pw, nw, ow = geo[2, 0], geo[2, 1], geo[2, 2], geo[2, 3], geo[2, 4], geo[2, 5]
    g = np.empty(ow)
    for r in range(r0, r1):
        dx[r] = 0
        for zo in range(od):
            for yo in range(oh):
                gr = dy[r, zo, yo]
                cr = counts[zo, yo]
                for xo in range(ow):
                    g[xo] = _F64(gr[xo]) / cr[xo]
                for a in range(kd):
                    zi = zo * sd + a * dd - pd
                    if zi < 0 or zi >= nd:
                        continue
                    for b in range(kh):
                        yi = yo * sh + b * dh - ph
                        if yi < 0 or yi >= nh:
                            continue
                        dst = dx[r, zi, yi]
                        for e in range(kw):
                            e_lo, e_hi = out_range(ow, e, sw, dw, pw, nw)
                            for xo in range(e_lo, e_hi):
                                xi = xo * sw + e * dw - pw
                                dst[xi] += g[xo]
