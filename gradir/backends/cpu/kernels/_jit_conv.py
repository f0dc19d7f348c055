"""Compiled loops of the convolution and pooling kernels (``kernels/conv.py``), Float32 and Float64.

Every kernel sees 3-D images: ``kernels/conv.py`` views 1-D and 2-D ones as 3-D with leading axes of size 1
(kernel 1, stride 1, no padding there), so one loop nest serves every rank it takes.  A geometry is the
int64 array ``geo`` [3, 6]: per spatial axis (kernel, stride, dilation, pad_begin, input size, output size).
Window positions outside the input (padding, a ceil_mode window's end) are skipped: zeros for the
convolutions and the average, nothing for the maximum.

Fixed orders (results never depend on which thread computes what): im2col writes, col2im adds each input
element's contributions in window order from zero (the NumPy path's order); the depthwise kernels
compute each output as one chain over the window, dX by window element in order, dW per channel over the
images in order (float64); the pooling kernels walk each window in order (the first maximum wins, a NaN
beats every number, as ``np.argmax``), and the gradients add into each image in the order of its outputs.
The callers split work by images, image planes or channels, which these loops take as index ranges.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ._jit_core import ELEMENTWISE, REDUCTION

_F64 = np.float64


@njit(**ELEMENTWISE)
def _range(o_n, k, s, d, p, n):  # type: ignore[no-untyped-def]
    """The outputs ``o`` in [lo, hi) whose input ``o*s + k*d - p`` lies in [0, n)."""
    off = k * d - p
    lo = 0 if off >= 0 else (-off + s - 1) // s
    hi = 0 if n - 1 - off < 0 else (n - 1 - off) // s + 1
    return lo, max(lo, min(o_n, hi))


@njit(**ELEMENTWISE)
def im2col(x, geo, n0, n1, cols):  # type: ignore[no-untyped-def]
    """cols[c*K + k, i*P + p] = x[n0 + i, c, window k of output p] (0 in the padding): x [N, C, D, H, W],
    cols [C*K, (n1-n0)*P]."""
    C = x.shape[1]
    kd, sd, dd, pd, nd, od = geo[0, 0], geo[0, 1], geo[0, 2], geo[0, 3], geo[0, 4], geo[0, 5]
    kh, sh, dh, ph, nh, oh = geo[1, 0], geo[1, 1], geo[1, 2], geo[1, 3], geo[1, 4], geo[1, 5]
    kw, sw, dw, pw, nw, ow = geo[2, 0], geo[2, 1], geo[2, 2], geo[2, 3], geo[2, 4], geo[2, 5]
    K = kd * kh * kw
    P = od * oh * ow
    for i in range(n1 - n0):
        for c in range(C):
            for a in range(kd):
                a_lo, a_hi = _range(od, a, sd, dd, pd, nd)
                for b in range(kh):
                    b_lo, b_hi = _range(oh, b, sh, dh, ph, nh)
                    for e in range(kw):
                        e_lo, e_hi = _range(ow, e, sw, dw, pw, nw)
                        row = cols[c * K + (a * kh + b) * kw + e, i * P:(i + 1) * P]
                        row[:] = 0
                        for zo in range(a_lo, a_hi):
                            zi = zo * sd + a * dd - pd
                            for yo in range(b_lo, b_hi):
                                yi = yo * sh + b * dh - ph
                                src = x[n0 + i, c, zi, yi]
                                base = (zo * oh + yo) * ow
                                for xo in range(e_lo, e_hi):
                                    row[base + xo] = src[xo * sw + e * dw - pw]


@njit(**ELEMENTWISE)
def col2im(dcols, geo, n0, n1, dx):  # type: ignore[no-untyped-def]
    """The adjoint of ``im2col``: dx[n0 + i] = Σ over window elements k in order of dcols' rows (from 0)."""
    C = dx.shape[1]
    kd, sd, dd, pd, nd, od = geo[0, 0], geo[0, 1], geo[0, 2], geo[0, 3], geo[0, 4], geo[0, 5]
    kh, sh, dh, ph, nh, oh = geo[1, 0], geo[1, 1], geo[1, 2], geo[1, 3], geo[1, 4], geo[1, 5]
    kw, sw, dw, pw, nw, ow = geo[2, 0], geo[2, 1], geo[2, 2], geo[2, 3], geo[2, 4], geo[2, 5]
    K = kd * kh * kw
    P = od * oh * ow
    for i in range(n1 - n0):
        for c in range(C):
            dx[n0 + i, c] = 0
            for a in range(kd):
                a_lo, a_hi = _range(od, a, sd, dd, pd, nd)
                for b in range(kh):
                    b_lo, b_hi = _range(oh, b, sh, dh, ph, nh)
                    for e in range(kw):
                        e_lo, e_hi = _range(ow, e, sw, dw, pw, nw)
                        row = dcols[c * K + (a * kh + b) * kw + e, i * P:(i + 1) * P]
                        for zo in range(a_lo, a_hi):
                            zi = zo * sd + a * dd - pd
                            for yo in range(b_lo, b_hi):
                                yi = yo * sh + b * dh - ph
                                dst = dx[n0 + i, c, zi, yi]
                                base = (zo * oh + yo) * ow
                                for xo in range(e_lo, e_hi):
                                    dst[xo * sw + e * dw - pw] += row[base + xo]


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
    y [N, C, OD, OH, OW]; each output a chain over the window in order from 0, then the bias."""
    N = x.shape[0]
    kd, sd, dd, pd, nd, od = geo[0, 0], geo[0, 1], geo[0, 2], geo[0, 3], geo[0, 4], geo[0, 5]
    kh, sh, dh, ph, nh, oh = geo[1, 0], geo[1, 1], geo[1, 2], geo[1, 3], geo[1, 4], geo[1, 5]
    kw, sw, dw, pw, nw, ow = geo[2, 0], geo[2, 1], geo[2, 2], geo[2, 3], geo[2, 4], geo[2, 5]
    for n in range(N):
        for c in range(c0, c1):
            yc = y[n, c]
            yc[:] = 0
            for a in range(kd):
                a_lo, a_hi = _range(od, a, sd, dd, pd, nd)
                for bb in range(kh):
                    b_lo, b_hi = _range(oh, bb, sh, dh, ph, nh)
                    for e in range(kw):
                        e_lo, e_hi = _range(ow, e, sw, dw, pw, nw)
                        wk = w[c, (a * kh + bb) * kw + e]
                        for zo in range(a_lo, a_hi):
                            zi = zo * sd + a * dd - pd
                            for yo in range(b_lo, b_hi):
                                src = x[n, c, zi, yo * sh + bb * dh - ph]
                                dst = yc[zo, yo]
                                for xo in range(e_lo, e_hi):
                                    dst[xo] += wk * src[xo * sw + e * dw - pw]
            if has_b:
                bc = b[c]
                for zo in range(od):
                    for yo in range(oh):
                        dst = yc[zo, yo]
                        for xo in range(ow):
                            dst[xo] += bc


@njit(**REDUCTION)
def depthwise_grad(dy, x, w, geo, c0, c1, dx, dw, db):  # type: ignore[no-untyped-def]
    """dX, dW (float64 [C, K]) and dB (float64 [C]) of ``depthwise`` for channels [c0, c1): dX by window
    element in order; dW[c, k] and dB[c] over the images in order, each image's row sums vectorized."""
    N = x.shape[0]
    kd, sd, dd, pd, nd, od = geo[0, 0], geo[0, 1], geo[0, 2], geo[0, 3], geo[0, 4], geo[0, 5]
    kh, sh, dh, ph, nh, oh = geo[1, 0], geo[1, 1], geo[1, 2], geo[1, 3], geo[1, 4], geo[1, 5]
    kw, sw, dw_, pw, nw, ow = geo[2, 0], geo[2, 1], geo[2, 2], geo[2, 3], geo[2, 4], geo[2, 5]
    for c in range(c0, c1):
        for k in range(kd * kh * kw):
            dw[c, k] = 0.0
        db[c] = 0.0
    for n in range(N):
        for c in range(c0, c1):
            dxc = dx[n, c]
            dxc[:] = 0
            dyc = dy[n, c]
            s = 0.0
            for zo in range(od):
                for yo in range(oh):
                    r = dyc[zo, yo]
                    for xo in range(ow):
                        s += _F64(r[xo])
            db[c] += s
            for a in range(kd):
                a_lo, a_hi = _range(od, a, sd, dd, pd, nd)
                for bb in range(kh):
                    b_lo, b_hi = _range(oh, bb, sh, dh, ph, nh)
                    for e in range(kw):
                        e_lo, e_hi = _range(ow, e, sw, dw_, pw, nw)
                        k = (a * kh + bb) * kw + e
                        wk = w[c, k]
                        acc = 0.0
                        for zo in range(a_lo, a_hi):
                            zi = zo * sd + a * dd - pd
                            for yo in range(b_lo, b_hi):
                                yi = yo * sh + bb * dh - ph
                                src = x[n, c, zi, yi]
                                dst = dxc[zi, yi]
                                g = dyc[zo, yo]
                                for xo in range(e_lo, e_hi):
                                    xi = xo * sw + e * dw_ - pw
                                    acc += _F64(g[xo]) * _F64(src[xi])
                                    dst[xi] += wk * g[xo]
                        dw[c, k] += acc


@njit(**ELEMENTWISE)
def max_pool(x, geo, r0, r1, base, y, idx):  # type: ignore[no-untyped-def]
    """Y and Indices of the planes [r0, r1) of x [R, D, H, W]: the first maximum in window order (a NaN
    wins), its flat row-major position in the plane plus base[r]."""
    kd, sd, dd, pd, nd, od = geo[0, 0], geo[0, 1], geo[0, 2], geo[0, 3], geo[0, 4], geo[0, 5]
    kh, sh, dh, ph, nh, oh = geo[1, 0], geo[1, 1], geo[1, 2], geo[1, 3], geo[1, 4], geo[1, 5]
    kw, sw, dw, pw, nw, ow = geo[2, 0], geo[2, 1], geo[2, 2], geo[2, 3], geo[2, 4], geo[2, 5]
    for r in range(r0, r1):
        xr = x[r]
        for zo in range(od):
            for yo in range(oh):
                for xo in range(ow):
                    best = xr[0, 0, 0]
                    at = -1
                    for a in range(kd):
                        zi = zo * sd + a * dd - pd
                        if zi < 0 or zi >= nd:
                            continue
                        for b in range(kh):
                            yi = yo * sh + b * dh - ph
                            if yi < 0 or yi >= nh:
                                continue
                            for e in range(kw):
                                xi = xo * sw + e * dw - pw
                                if xi < 0 or xi >= nw:
                                    continue
                                v = xr[zi, yi, xi]
                                if at < 0 or v > best or (v != v and best == best):
                                    best = v
                                    at = (zi * nh + yi) * nw + xi
                    y[r, zo, yo, xo] = best
                    idx[r, zo, yo, xo] = at + base[r]


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
    """y[r] = the window's float64 sum (in order, padding left out) / counts[o] (float64 [OD, OH, OW]) for the
    planes [r0, r1)."""
    kd, sd, dd, pd, nd, od = geo[0, 0], geo[0, 1], geo[0, 2], geo[0, 3], geo[0, 4], geo[0, 5]
    kh, sh, dh, ph, nh, oh = geo[1, 0], geo[1, 1], geo[1, 2], geo[1, 3], geo[1, 4], geo[1, 5]
    kw, sw, dw, pw, nw, ow = geo[2, 0], geo[2, 1], geo[2, 2], geo[2, 3], geo[2, 4], geo[2, 5]
    for r in range(r0, r1):
        xr = x[r]
        for zo in range(od):
            for yo in range(oh):
                for xo in range(ow):
                    s = 0.0
                    for a in range(kd):
                        zi = zo * sd + a * dd - pd
                        if zi < 0 or zi >= nd:
                            continue
                        for b in range(kh):
                            yi = yo * sh + b * dh - ph
                            if yi < 0 or yi >= nh:
                                continue
                            for e in range(kw):
                                xi = xo * sw + e * dw - pw
                                if 0 <= xi < nw:
                                    s += _F64(xr[zi, yi, xi])
                    y[r, zo, yo, xo] = s / counts[zo, yo, xo]


@njit(**ELEMENTWISE)
def average_pool_grad(dy, geo, counts, r0, r1, dx):  # type: ignore[no-untyped-def]
    """dx[r] = Σ over the windows holding each element, in output order, of dy / counts (planes [r0, r1))."""
    kd, sd, dd, pd, nd, od = geo[0, 0], geo[0, 1], geo[0, 2], geo[0, 3], geo[0, 4], geo[0, 5]
    kh, sh, dh, ph, nh, oh = geo[1, 0], geo[1, 1], geo[1, 2], geo[1, 3], geo[1, 4], geo[1, 5]
    kw, sw, dw, pw, nw, ow = geo[2, 0], geo[2, 1], geo[2, 2], geo[2, 3], geo[2, 4], geo[2, 5]
    for r in range(r0, r1):
        d = dx[r]
        d[:] = 0
        for zo in range(od):
            for yo in range(oh):
                for xo in range(ow):
                    g = _F64(dy[r, zo, yo, xo]) / counts[zo, yo, xo]
                    for a in range(kd):
                        zi = zo * sd + a * dd - pd
                        if zi < 0 or zi >= nd:
                            continue
                        for b in range(kh):
                            yi = yo * sh + b * dh - ph
                            if yi < 0 or yi >= nh:
                                continue
                            for e in range(kw):
                                xi = xo * sw + e * dw - pw
                                if 0 <= xi < nw:
                                    d[zi, yi, xi] += g
