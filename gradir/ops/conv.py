"""Convolution: ONNX ``Conv`` (1-D, 2-D, 3-D, any N-D) and ONNX Runtime's gradient op ``ConvGrad``.

X is [N, C, D1, ...], W [M, C / group, K1, ...], B [M], Y [N, M, O1, ...].  ``kernel_shape``, ``strides``,
``pads``, ``dilations`` may be left out (the kernel's from W, 1s, 0s, 1s); ``auto_pad`` SAME_UPPER/SAME_LOWER
pads so that O = ceil(D / stride) (the odd pad at the end or the beginning), VALID pads nothing.  ``window``
resolves them into one geometry, shared with the pooling ops (``gradir/ops/pool.py``).
"""

from __future__ import annotations

import itertools
from typing import Any, Optional, Sequence

import numpy as np

from ..ir.op import Attr, BackwardOp, InferContext, Op, Operand
from ..ir.onnxmap import MS_DOMAIN, OnnxMap
from ..ir.types import FLOAT_DTYPES, TensorType

__all__ = ["Window", "window", "WINDOW_ATTRS", "AUTO_PAD"]

AUTO_PAD = Attr("auto_pad", "str", "NOTSET", choices=("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"),
                doc="NOTSET: `pads`; SAME_*: O = ceil(D / stride), the odd pad at the end (UPPER) or the beginning; "
                    "VALID: no pad")
KERNEL_SHAPE = Attr("kernel_shape", "ints", None, min=1, doc="the window (default: W's spatial shape)")
STRIDES = Attr("strides", "ints", None, min=1, doc="per spatial axis (default 1)")
PADS = Attr("pads", "ints", None, min=0, doc="[begin_1, ..., begin_k, end_1, ..., end_k] (default 0)")
DILATIONS = Attr("dilations", "ints", None, min=1, doc="per spatial axis (default 1)")
WINDOW_ATTRS = (AUTO_PAD, KERNEL_SHAPE, STRIDES, PADS, DILATIONS)
_CONV_ONNX_ATTRS = ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")


class Window(tuple):
    """A resolved window geometry: (kernel, strides, dilations, pads_begin, pads_end, out), each a tuple per
    spatial axis."""

    kernel = property(lambda s: s[0])
    strides = property(lambda s: s[1])
    dilations = property(lambda s: s[2])
    begin = property(lambda s: s[3])
    end = property(lambda s: s[4])
    out = property(lambda s: s[5])


def window(spatial: Sequence[Optional[int]], attrs: Any, kernel: Optional[Sequence[int]] = None,
           ceil_mode: bool = False, fail: Any = None) -> Window:
    """The geometry of a window op over the spatial dims ``spatial`` (None: unknown) from its attributes
    (``kernel`` when W gives it).  ``fail(message, attr)`` reports an inconsistent attribute."""
    k = len(spatial)

    def bad(msg: str, attr: str) -> None:
        if fail is None:
            raise ValueError(msg)
        fail(msg, attr)

    ks = attrs.get("kernel_shape")
    if ks is None:
        ks = kernel
    elif kernel is not None and tuple(ks) != tuple(kernel):
        bad(f"kernel_shape {list(ks)} is not W's spatial shape {list(kernel)}", "kernel_shape")
    if ks is None:
        bad("kernel_shape is required", "kernel_shape")
    ks = tuple(ks)
    for name, v, n in (("kernel_shape", ks, k), ("strides", attrs.get("strides"), k),
                       ("dilations", attrs.get("dilations"), k), ("pads", attrs.get("pads"), 2 * k)):
        if v is not None and len(v) != n:
            bad(f"{name} has {len(v)} values; {n} for {k} spatial axes", name)
    st = tuple(attrs.get("strides") or (1,) * k)
    dl = tuple(attrs.get("dilations") or (1,) * k)
    pads = tuple(attrs.get("pads") or (0,) * (2 * k))
    auto = attrs.get("auto_pad", "NOTSET")
    if auto != "NOTSET" and attrs.get("pads") and any(pads):
        bad(f"pads {list(pads)} with auto_pad {auto}: give one of them", "pads")
    begin, end, out = [], [], []
    for i, n in enumerate(spatial):
        eff = (ks[i] - 1) * dl[i] + 1
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            if n is None:
                begin.append(0), end.append(0), out.append(None)
                continue
            o = -(-n // st[i])
            total = max(0, (o - 1) * st[i] + eff - n)
            small = total // 2
            b = small if auto == "SAME_UPPER" else total - small
            begin.append(b), end.append(total - b), out.append(o)
            continue
        b, e = (0, 0) if auto == "VALID" else (pads[i], pads[k + i])
        begin.append(b), end.append(e)
        if n is None:
            out.append(None)
            continue
        span = n + b + e - eff
        if span < 0:
            bad(f"spatial axis {i}: the window ({eff} with dilation) is larger than the padded input ({n + b + e})",
                "kernel_shape")
        o = (-(-span // st[i]) if ceil_mode else span // st[i]) + 1
        if ceil_mode and (o - 1) * st[i] >= n + b:  # a last window that starts in the end padding is dropped
            o -= 1
        out.append(o)
    return Window((ks, st, dl, tuple(begin), tuple(end), tuple(out)))


def _conv_window(ctx: InferContext, x: TensorType, w: TensorType) -> Window:
    group = ctx.attrs["group"]
    if x.rank < 3:
        ctx.fail(f"X must be [N, C, D1, ...] (rank 3 or more), got {x}", operand=0)
    if w.rank != x.rank:
        ctx.fail(f"W must be [M, C / group, K1, ...] of X's rank {x.rank}, got {w}", operand=1)
    c, m = x.shape[1], w.shape[0]
    if c is not None and c % group:
        ctx.fail(f"X has {c} channels, not a multiple of group {group}", attr="group")
    if m is not None and m % group:
        ctx.fail(f"W has {m} output channels, not a multiple of group {group}", attr="group")
    if c is not None and w.shape[1] is not None and w.shape[1] * group != c:
        ctx.fail(f"W has {w.shape[1]} input channels per group; X's {c} channels / group {group} = {c // group}",
                 operand=1)
    kernel = tuple(w.shape[2:])
    fail = lambda msg, attr: ctx.fail(msg, attr=attr)  # noqa: E731
    if None not in kernel or ctx.attrs.get("kernel_shape") is not None:
        return window(x.shape[2:], ctx.attrs, None if None in kernel else kernel, fail=fail)
    # W's window is known only at run time, and so are Y's spatial dims along it (as in ONNX's shape inference)
    geo = window(x.shape[2:], ctx.attrs, tuple(1 if d is None else d for d in kernel), fail=fail)
    return Window((kernel, geo.strides, geo.dilations, geo.begin, geo.end,
                   tuple(None if d is None else o for d, o in zip(kernel, geo.out))))


def conv_reference(x: np.ndarray, w: np.ndarray, b: Optional[np.ndarray], geo: Window, group: int) -> np.ndarray:
    """Y in float64 by the definition: a sum over each window, one output position at a time."""
    n, c = x.shape[:2]
    m, cg = w.shape[:2]
    xp = np.pad(x, [(0, 0), (0, 0)] + list(zip(geo.begin, geo.end)))
    y = np.zeros((n, m) + geo.out)
    mg = m // group
    for o in itertools.product(*(range(s) for s in geo.out)):
        start = [o[i] * geo.strides[i] for i in range(len(o))]
        sl = tuple(slice(start[i], start[i] + (geo.kernel[i] - 1) * geo.dilations[i] + 1, geo.dilations[i])
                   for i in range(len(o)))
        for g in range(group):
            patch = xp[(slice(None), slice(g * cg, (g + 1) * cg)) + sl]  # [N, cg, K...]
            y[(slice(None), slice(g * mg, (g + 1) * mg)) + o] = np.tensordot(
                patch, w[g * mg:(g + 1) * mg], axes=(list(range(1, patch.ndim)), list(range(1, patch.ndim))))
    if b is not None:
        y += b.reshape((1, m) + (1,) * len(geo.out))
    return y


def _example(rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
    x = rng.standard_normal((4, 4, 7, 6))
    w = rng.standard_normal((6, 2, 3, 2))
    return [x.astype(dtype), w.astype(dtype)], {"group": 2, "strides": [2, 1], "pads": [1, 0, 1, 1],
                                                 "dilations": [1, 2]}


class ConvOp(Op):
    """ONNX Conv: Y[n, m] = B[m] + Σ W[m, c, k...] X[n, g * C/group + c, o * stride + k * dilation - pad_begin].

X [N, C, D1, ...] (1-D, 2-D, 3-D, ...), W [M, C / group, K1, ...], B [M] (optional). ``group`` = C = M is a
depthwise convolution. The gradient is ONNX Runtime's ConvGrad."""

    ONNX = OnnxMap(attrs=_CONV_ONNX_ATTRS)
    SHARDING = "conv"
    LINEAR_IN = (0, 1)
    GRADIENT = "ConvGrad"
    GRADIENT_OPERANDS = ("X", "W")
    OPERANDS = (Operand("X", doc="[N, C, D1, ...]"), Operand("W", doc="[M, C / group, K1, ...]"),
                Operand("B", optional=True, doc="[M]"))
    RESULTS = ("Y",)
    ATTRS = WINDOW_ATTRS + (Attr("group", "int", 1, min=1, doc="channel groups (C = M = group: depthwise)"),)

    def infer(self, ctx: InferContext) -> list[TensorType]:
        ctx.dtype_in(0, FLOAT_DTYPES)
        ctx.same_dtype(0, 1)
        x, w = ctx.type(0), ctx.type(1)
        geo = _conv_window(ctx, x, w)
        if ctx.has(2):
            ctx.same_dtype(0, 2)
            ctx.expect_shape(2, (w.shape[0],), f" (W {w} has {w.shape[0]} output channels)")
        return [x.with_shape((x.shape[0], w.shape[0]) + geo.out)]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """X [4, 4, 7, 6], W [6, 2, 3, 2], B [6]: 2 groups, strides, asymmetric pads, a dilation."""
        arrays, attrs = _example(rng, dtype)
        return arrays + [rng.standard_normal(6).astype(dtype)], attrs

    @classmethod
    def reference(cls, X: Any, W: Any, B: Any, **attrs: Any) -> Any:
        x, w = np.asarray(X, np.float64), np.asarray(W, np.float64)
        geo = window(x.shape[2:], attrs, w.shape[2:])
        return conv_reference(x, w, None if B is None else np.asarray(B, np.float64), geo, attrs["group"])


class ConvGradOp(BackwardOp):
    """ONNX Runtime ConvGrad (com.microsoft): dX, dW, dB of Conv from dY, X and W (dB = Σ dY over every axis
    but 1), with Conv's attributes. gradir's kernel honours `auto_pad`; ORT's reads explicit `pads` only, so
    gradir's gradient rule writes a Conv's `auto_pad` resolved into `pads`. ORT's CPU kernel is Float32 only."""

    ONNX = OnnxMap(domain=MS_DOMAIN, attrs=_CONV_ONNX_ATTRS, ort_float32_only=True)
    SHARDING = "conv"
    LINEAR_IN = (0,)
    OPERANDS = (Operand("dY", doc="the gradient of Y"), Operand("X", doc="Conv's X"), Operand("W", doc="Conv's W"))
    RESULTS = ("dX", "dW", "dB")
    ATTRS = ConvOp.ATTRS

    def infer(self, ctx: InferContext) -> list[TensorType]:
        ctx.dtype_in(0, FLOAT_DTYPES)
        ctx.same_dtype(0, 1)
        ctx.same_dtype(0, 2)
        x, w = ctx.type(1), ctx.type(2)
        geo = _conv_window(ctx, x, w)
        ctx.expect_shape(0, (x.shape[0], w.shape[0]) + geo.out, " (Conv's Y for these X, W and attributes)")
        return [x, w, w.with_shape((w.shape[0],))]

    @classmethod
    def example(cls, rng: Any, dtype: Any) -> tuple[list[Any], dict[str, Any]]:
        """Conv's example and a dY of its Y's shape."""
        (x, w), attrs = _example(rng, dtype)
        y = ConvOp.reference(x, w, None, **{**{a.name: a.default for a in ConvOp.ATTRS}, **attrs})
        return [rng.standard_normal(y.shape).astype(dtype), x, w], attrs

    @classmethod
    def reference(cls, dY: Any, X: Any, W: Any, **attrs: Any) -> Any:
        """By the definition: Y is linear in X and in W, so dX and dW are the transposed sums of each window."""
        dy, x, w = (np.asarray(a, np.float64) for a in (dY, X, W))
        geo = window(x.shape[2:], attrs, w.shape[2:])
        group = attrs["group"]
        xp = np.zeros(x.shape[:2] + tuple(s + b + e for s, b, e in zip(x.shape[2:], geo.begin, geo.end)))
        dw = np.zeros_like(w)
        dxp = np.zeros_like(xp)
        core = tuple(slice(b, b + s) for b, s in zip(geo.begin, x.shape[2:]))
        xp[(slice(None), slice(None)) + core] = x
        m, cg = w.shape[:2]
        mg = m // group
        for o in itertools.product(*(range(s) for s in geo.out)):
            sl = tuple(slice(o[i] * geo.strides[i], o[i] * geo.strides[i] + (geo.kernel[i] - 1) * geo.dilations[i] + 1,
                             geo.dilations[i]) for i in range(len(o)))
            for g in range(group):
                cs, ms = slice(g * cg, (g + 1) * cg), slice(g * mg, (g + 1) * mg)
                d = dy[(slice(None), ms) + o]  # [N, mg]
                dw[ms] += np.tensordot(d, xp[(slice(None), cs) + sl], axes=([0], [0]))
                dxp[(slice(None), cs) + sl] += np.tensordot(d, w[ms], axes=([1], [0]))
        return dxp[(slice(None), slice(None)) + core], dw, dy.sum(axis=(0,) + tuple(range(2, dy.ndim)))
