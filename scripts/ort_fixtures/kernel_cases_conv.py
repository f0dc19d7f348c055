"""Kernel fixtures of the convolution and pooling ops: ONNX's Conv (2-D with strides, asymmetric pads, dilations,
groups, depthwise, auto_pad; a 1-D and a 3-D smoke case), ORT's ConvGrad (com.microsoft), MaxPool with its
Indices (ceil_mode, dilations, storage_order), ORT's MaxPoolGrad, AveragePool (count_include_pad) and ORT's
AveragePoolGrad.  ORT writes MaxPoolGrad and AveragePoolGrad in the ai.onnx domain (opset 9) and reads dX's
shape from the graph: their dX is declared with its shape, and gradir's schemas of them
(``gradir/interop/onnx/ort_schemas.py``, loaded by path: it imports nothing of gradir) let onnx.checker pass."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnx
from kernel_fixtures import MS_DOMAIN, Case

_spec = importlib.util.spec_from_file_location(
    "_gradir_ort_schemas", Path(__file__).resolve().parents[2] / "gradir" / "interop" / "onnx" / "ort_schemas.py")
_schemas = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_schemas)
_schemas.register(onnx)

_rng = np.random.default_rng(3232)


def _f(*shape: int) -> np.ndarray:
    return _rng.standard_normal(shape).astype(np.float32)


def _conv(name: str, x: tuple, w: tuple, bias: bool = True, **attrs) -> Case:
    ins = {"X": _f(*x), "W": _f(*w)}
    if bias:
        ins["B"] = _f(w[0])
    return Case(name, "Conv", "", ins, ["Y"], attrs)


def _out_shape(n: int, k: int, s: int, d: int, b: int, e: int) -> int:
    return (n + b + e - (k - 1) * d - 1) // s + 1


def _conv_grad(name: str, x: tuple, w: tuple, **attrs) -> Case:
    k = len(x) - 2
    st, dl = attrs.get("strides", [1] * k), attrs.get("dilations", [1] * k)
    pads = attrs.get("pads", [0] * 2 * k)
    y = (x[0], w[0]) + tuple(_out_shape(x[2 + i], w[2 + i], st[i], dl[i], pads[i], pads[k + i]) for i in range(k))
    return Case(name, "ConvGrad", MS_DOMAIN, {"dY": _f(*y), "X": _f(*x), "W": _f(*w)}, ["dX", "dW", "dB"], attrs)


def _max_pool_indices(x: np.ndarray, kernel: list[int], strides: list[int], pads: list[int]) -> tuple:
    """A MaxPool's (Y shape, Indices) by its definition (2-D, no dilation): the input to a MaxPoolGrad case."""
    n, c, h, w = x.shape
    oh, ow = (_out_shape(h, kernel[0], strides[0], 1, pads[0], pads[2]),
              _out_shape(w, kernel[1], strides[1], 1, pads[1], pads[3]))
    idx = np.zeros((n, c, oh, ow), np.int64)
    for a, b, i, j in np.ndindex(n, c, oh, ow):
        best, where = -np.inf, 0
        for u, v in np.ndindex(*kernel):
            p, q = i * strides[0] + u - pads[0], j * strides[1] + v - pads[1]
            if 0 <= p < h and 0 <= q < w and x[a, b, p, q] > best:
                best, where = x[a, b, p, q], ((a * c + b) * h + p) * w + q
        idx[a, b, i, j] = where
    return idx


def _max_pool_grad(name: str, x: tuple, kernel: list[int], strides: list[int], pads: list[int]) -> Case:
    idx = _max_pool_indices(_f(*x), kernel, strides, pads)
    return Case(name, "MaxPoolGrad", "", {"dY": _f(*idx.shape), "Indices": idx}, ["dX"],
                {"kernel_shape": kernel, "strides": strides, "pads": pads}, opset=17,
                output_types={"dX": np.float32}, output_shapes={"dX": list(x)})


def _average_pool_grad(name: str, x: tuple, kernel: list[int], strides: list[int], pads: list[int],
                       count_include_pad: int) -> Case:
    y = x[:2] + tuple(_out_shape(x[2 + i], kernel[i], strides[i], 1, pads[i], pads[2 + i]) for i in range(2))
    return Case(name, "AveragePoolGrad", "", {"dY": _f(*y)}, ["dX"],
                {"kernel_shape": kernel, "strides": strides, "pads": pads, "count_include_pad": count_include_pad},
                output_types={"dX": np.float32}, output_shapes={"dX": list(x)})


CASES = [
    _conv("conv2d_strides_pads_dilations", (2, 3, 9, 8), (4, 3, 3, 2), strides=[2, 1], pads=[1, 0, 2, 1],
          dilations=[1, 2]),
    _conv("conv2d_group2_no_bias", (2, 4, 6, 7), (6, 2, 3, 3), bias=False, group=2, pads=[1, 1, 1, 1]),
    _conv("conv2d_depthwise", (2, 5, 7, 7), (5, 1, 3, 3), group=5, strides=[2, 2], pads=[1, 1, 1, 1]),
    _conv("conv2d_same_upper", (1, 3, 7, 6), (2, 3, 3, 3), auto_pad="SAME_UPPER", strides=[2, 2]),
    _conv("conv2d_same_lower", (1, 3, 6, 6), (2, 3, 2, 2), auto_pad="SAME_LOWER"),
    _conv("conv2d_valid", (1, 2, 5, 6), (3, 2, 3, 2), auto_pad="VALID"),
    _conv("conv1d", (2, 3, 11), (4, 3, 3), strides=[2], pads=[1, 2]),
    _conv("conv3d_smoke", (1, 2, 4, 5, 4), (3, 2, 2, 3, 2), pads=[1, 0, 1, 0, 1, 0]),
    _conv_grad("convgrad_strides_pads_dilations", (2, 3, 9, 8), (4, 3, 3, 2), strides=[2, 1], pads=[1, 0, 2, 1],
               dilations=[1, 2]),
    _conv_grad("convgrad_group2", (2, 4, 6, 7), (6, 2, 3, 3), group=2, pads=[1, 1, 1, 1]),
    _conv_grad("convgrad_depthwise", (2, 5, 7, 7), (5, 1, 3, 3), group=5, strides=[2, 2], pads=[1, 1, 1, 1]),
    _conv_grad("convgrad_plain", (3, 2, 5, 5), (3, 2, 3, 3)),
    Case("maxpool_indices_pads", "MaxPool", "", {"X": _f(2, 3, 7, 6)}, ["Y", "Indices"],
         {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 1, 1, 0]}),
    Case("maxpool_ceil_mode", "MaxPool", "", {"X": _f(2, 2, 7, 8)}, ["Y", "Indices"],
         {"kernel_shape": [2, 3], "strides": [2, 2], "ceil_mode": 1}),
    Case("maxpool_dilations", "MaxPool", "", {"X": _f(1, 2, 8, 7)}, ["Y", "Indices"],
         {"kernel_shape": [2, 2], "dilations": [2, 3], "pads": [1, 0, 0, 1]}),
    Case("maxpool_storage_order", "MaxPool", "", {"X": _f(2, 2, 5, 4)}, ["Y", "Indices"],
         {"kernel_shape": [2, 2], "strides": [1, 2], "storage_order": 1}),
    Case("maxpool_y_only", "MaxPool", "", {"X": _f(2, 3, 6, 6)}, ["Y"], {"kernel_shape": [2, 2], "strides": [2, 2]}),
    _max_pool_grad("maxpoolgrad_overlapping", (2, 3, 7, 6), [3, 3], [1, 2], [1, 1, 1, 1]),
    _max_pool_grad("maxpoolgrad_2x2", (2, 4, 6, 6), [2, 2], [2, 2], [0, 0, 0, 0]),
    Case("averagepool_pads", "AveragePool", "", {"X": _f(2, 3, 7, 6)}, ["Y"],
         {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 1, 1, 0]}),
    Case("averagepool_count_include_pad", "AveragePool", "", {"X": _f(2, 3, 7, 6)}, ["Y"],
         {"kernel_shape": [3, 3], "strides": [2, 1], "pads": [1, 1, 1, 1], "count_include_pad": 1}),
    Case("averagepool_ceil_mode", "AveragePool", "", {"X": _f(1, 2, 7, 8)}, ["Y"],
         {"kernel_shape": [2, 3], "strides": [2, 2], "ceil_mode": 1}),
    _average_pool_grad("averagepoolgrad_pads", (2, 3, 7, 6), [3, 2], [2, 2], [1, 1, 1, 0], 0),
    _average_pool_grad("averagepoolgrad_count_include_pad", (2, 3, 7, 6), [3, 3], [2, 1], [1, 1, 1, 1], 1),
]
