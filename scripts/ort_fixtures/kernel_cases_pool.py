"""Kernel fixtures of the pooling, padding and image batch-norm ops: ONNX's GlobalAveragePool and GlobalMaxPool
(2-D and 3-D images), Pad in its three modes (pads, a negative one cropping, constant_value and axes as
initializers; opsets 13 and 18), 3-D MaxPool (with Indices) and AveragePool and ORT's MaxPoolGrad and
AveragePoolGrad of them (the latter only where ORT is right: see below), and ORT's BatchNormInternal and
BatchNormalizationGrad on [N, C, H, W] images (Float32: ORT's only kernels of the gradients).
ORT's pooling gradients read dX's shape from the graph (declared), and
gradir's schemas of them (``gradir/interop/onnx/ort_schemas.py``, loaded by path) let onnx.checker pass."""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path

import numpy as np
import onnx
from kernel_fixtures import MS_DOMAIN, Case

_spec = importlib.util.spec_from_file_location(
    "_gradir_ort_schemas", Path(__file__).resolve().parents[2] / "gradir" / "interop" / "onnx" / "ort_schemas.py")
_schemas = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_schemas)
_schemas.register(onnx)

_rng = np.random.default_rng(3233)


def _f(*shape: int) -> np.ndarray:
    return _rng.standard_normal(shape).astype(np.float32)


def _distinct(*shape: int) -> np.ndarray:
    """Distinct values (a unique maximum per window: ORT's and gradir's Indices agree by definition)."""
    return (_rng.permutation(int(np.prod(shape))).reshape(shape) / 16).astype(np.float32)


def _pad(name: str, mode: str, x: np.ndarray, pads: list[int], value: float | None = None,
         axes: list[int] | None = None, opset: int = 18) -> Case:
    ins = {"data": x, "pads": np.array(pads, np.int64)}
    static = ["pads"]
    if value is not None or axes is not None:
        ins["constant_value"] = None if value is None else np.array(value, np.float32)
        static.append("constant_value")
    if axes is not None:
        ins["axes"] = np.array(axes, np.int64)
        static.append("axes")
    return Case(name, "Pad", "", ins, ["output"], {"mode": mode}, static=tuple(static), opset=opset)


def _out(n: int, k: int, s: int, b: int, e: int) -> int:
    return (n + b + e - k) // s + 1


def _max_pool_3d(x: np.ndarray, kernel: list[int], strides: list[int], pads: list[int]) -> np.ndarray:
    """MaxPool's Indices by its definition (N-D, no dilation): flat positions in the whole X."""
    k = len(kernel)
    sp = x.shape[2:]
    out = [_out(sp[i], kernel[i], strides[i], pads[i], pads[k + i]) for i in range(k)]
    idx = np.zeros(x.shape[:2] + tuple(out), np.int64)
    for n, c in np.ndindex(*x.shape[:2]):
        for o in itertools.product(*(range(d) for d in out)):
            best, where = -np.inf, 0
            for kk in itertools.product(*(range(d) for d in kernel)):
                p = tuple(o[i] * strides[i] + kk[i] - pads[i] for i in range(k))
                if all(0 <= p[i] < sp[i] for i in range(k)) and x[(n, c) + p] > best:
                    image = (n * x.shape[1] + c) * int(np.prod(sp))
                    best, where = x[(n, c) + p], image + int(np.ravel_multi_index(p, sp))
            idx[(n, c) + o] = where
    return idx


_POOL3 = {"kernel_shape": [2, 3, 2], "strides": [1, 2, 2], "pads": [1, 0, 1, 0, 1, 0]}
_X3 = (1, 2, 4, 5, 4)
_bn_x = (_f(3, 4, 5, 6) * 2 + 0.5)
_bn = {"X": _bn_x, "scale": _rng.uniform(0.5, 1.5, 4).astype(np.float32), "B": _f(4), "input_mean": _f(4),
       "input_var": _rng.uniform(0.5, 1.5, 4).astype(np.float32)}
_bn_axes = (0, 2, 3)
_bn64 = _bn_x.astype(np.float64)

CASES = [
    Case("globalaveragepool_2d", "GlobalAveragePool", "", {"X": _f(2, 3, 5, 7)}, ["Y"]),
    Case("globalaveragepool_3d", "GlobalAveragePool", "", {"X": _f(2, 3, 3, 4, 2)}, ["Y"]),
    Case("globalmaxpool_2d", "GlobalMaxPool", "", {"X": _f(2, 3, 5, 7)}, ["Y"]),
    Case("globalmaxpool_3d", "GlobalMaxPool", "", {"X": _f(2, 3, 3, 4, 2)}, ["Y"]),
    _pad("pad_constant_value_crop", "constant", _f(2, 3, 5, 6), [0, 1, 2, -1, 0, -1, 1, 3], value=1.5),
    _pad("pad_constant_negated_pads", "constant", _f(2, 3, 7, 8), [0, 0, -2, -1, 0, 0, -1, -3], opset=13),
    _pad("pad_reflect_axes", "reflect", _f(2, 3, 5, 6), [2, -1, 1, 3], axes=[2, -1]),
    _pad("pad_reflect_all_axes", "reflect", _f(2, 3, 5, 6), [0, 1, 4, 0, 0, 2, 0, 5], opset=13),
    _pad("pad_edge_axes", "edge", _f(2, 3, 5, 6), [3, 0, -2, 2], axes=[1, 3]),
    _pad("pad_edge_all_axes", "edge", _f(2, 3, 4), [1, 0, 2, 0, 3, -1], opset=13),
    Case("maxpool3d_indices", "MaxPool", "", {"X": _distinct(*_X3)}, ["Y", "Indices"], dict(_POOL3)),
    Case("averagepool3d", "AveragePool", "", {"X": _f(*_X3)}, ["Y"], dict(_POOL3)),
    Case("averagepool3d_count_include_pad", "AveragePool", "", {"X": _f(*_X3)}, ["Y"],
         {**_POOL3, "count_include_pad": 1}),
]
_idx3 = _max_pool_3d(_distinct(*_X3), _POOL3["kernel_shape"], _POOL3["strides"], _POOL3["pads"])
CASES += [
    Case("maxpoolgrad3d", "MaxPoolGrad", "", {"dY": _f(*_idx3.shape), "Indices": _idx3}, ["dX"], dict(_POOL3),
         output_types={"dX": np.float32}, output_shapes={"dX": list(_X3)}),
    # ORT 1.19.2's 3-D AveragePoolGrad is not the adjoint of its AveragePool when windows overlap, leave gaps or
    # are padded (<AveragePool(x), dY> != <x, AveragePoolGrad(dY)>; 1-D and 2-D are right): gradir is exact
    # there (docs/ops.md), so the fixture is the case ORT gets right, windows that tile X
    Case("averagepoolgrad3d_tiling", "AveragePoolGrad", "", {"dY": _f(1, 2, 2, 2, 2)}, ["dX"],
         {"kernel_shape": [2, 2, 2], "strides": [2, 2, 2]}, output_types={"dX": np.float32},
         output_shapes={"dX": [1, 2, 4, 4, 4]}),
    Case("batchnorminternal_4d", "BatchNormInternal", MS_DOMAIN, _bn,
         ["Y", "running_mean", "running_var", "saved_mean", "saved_inv_std"], {"epsilon": 1e-3, "momentum": 0.8}),
    Case("batchnormgrad_4d", "BatchNormalizationGrad", MS_DOMAIN,
         {"dY": _f(3, 4, 5, 6), "X": _bn_x, "scale": _bn["scale"],
          "mean": _bn64.mean(axis=_bn_axes).astype(np.float32),
          "variance": (1 / np.sqrt(_bn64.var(axis=_bn_axes) + 1e-3)).astype(np.float32)},
         ["X_grad", "scale_grad", "bias_grad"], {"epsilon": 1e-3}),
]
