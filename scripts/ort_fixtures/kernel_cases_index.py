"""Kernel fixtures of the indexing and joining ops: ORT's gradient ops (GatherGrad with repeated and negative
indices along several axes, GatherElementsGrad, SliceGrad with negative, clamped and stepped slices) and
training ops (SplitTraining, ConcatTraining), and a few of the ONNX forward ops they are the gradients of.

GatherGrad's float32 sums: ORT's CPU kernel adds dY's elements in their order under a lock, one thread here
(``kernel_fixtures.run``), the order gradir adds them in; with several threads ORT's order is not fixed."""

from __future__ import annotations

import numpy as np
from kernel_fixtures import MS_DOMAIN, Case

_rng = np.random.default_rng(3131)
I64_MAX, I64_MIN = np.iinfo(np.int64).max, np.iinfo(np.int64).min


def _f(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return _rng.standard_normal(shape).astype(dtype)


def _i(*values: int, dtype: type = np.int64) -> np.ndarray:
    return np.array(values, dtype)


def _gather_grad(name: str, shape: list[int], indices: np.ndarray, axis: int, dtype: type = np.float32) -> Case:
    a = axis % len(shape)
    dy = _f(*(shape[:a] + list(indices.shape) + shape[a + 1:]), dtype=dtype)
    return Case(name, "GatherGrad", MS_DOMAIN, {"shape": _i(*shape), "indices": indices, "dY": dy}, ["dX"],
                {"axis": axis}, static=("shape",))


def _slice_grad(name: str, shape: list[int], starts: list[int], ends: list[int], axes: list[int] | None,
                steps: list[int] | None, dy_shape: tuple) -> Case:
    ins = {"dY": _f(*dy_shape), "shape": _i(*shape), "starts": _i(*starts), "ends": _i(*ends),
           "axes": None if axes is None else _i(*axes), "steps": None if steps is None else _i(*steps)}
    return Case(name, "SliceGrad", MS_DOMAIN, ins, ["dX"], static=("shape", "starts", "ends", "axes", "steps"))


CASES = [
    # repeated (0 three times, 4 as 4 and -1) and negative indices; f32 sums of repeated rows
    _gather_grad("gathergrad_axis0_repeated", [5, 4], _i(0, 4, -1, 0, 2, -5, 0), 0),
    _gather_grad("gathergrad_axis1_int32_2d", [3, 4, 2], _i(1, -1, 1, 3, 0, -4, dtype=np.int32).reshape(2, 3), 1),
    _gather_grad("gathergrad_axis_neg1_scalar", [3, 5], np.array(-2, np.int64), -1),
    _gather_grad("gathergrad_axis0_f64", [6, 3], _i(5, 5, -6, 2, 5, 0, 1, -1), 0, np.float64),
    _gather_grad("gathergrad_embedding", [64, 16], _rng.integers(-64, 64, (4, 32)).astype(np.int64), 0),
    Case("gatherelementsgrad_axis1", "GatherElementsGrad", MS_DOMAIN,
         {"dY": _f(3, 4), "shape": _i(3, 5), "indices": _i(0, 4, -1, 0, 2, 2, -5, 1, 3, 3, 3, -2).reshape(3, 4)},
         ["dX"], {"axis": 1}, static=("shape",)),
    Case("gatherelementsgrad_axis0_int32", "GatherElementsGrad", MS_DOMAIN,
         {"dY": _f(4, 2), "shape": _i(3, 2), "indices": _i(0, 1, 2, -1, 0, 0, -3, 2, dtype=np.int32).reshape(4, 2)},
         ["dX"], {"axis": 0}, static=("shape",)),
    _slice_grad("slicegrad_negative_clamped", [4, 6, 5], [-3, 1], [I64_MAX, -1], [0, 1], None, (3, 4, 5)),
    # ORT 1.19.2's SliceGrad fails on a negative step ("narrowing_error"): stepped forwards only here
    _slice_grad("slicegrad_stepped_clamped", [4, 6, 5], [-100, 1], [I64_MAX, -1], [-1, 1], [2, 2], (4, 2, 3)),
    _slice_grad("slicegrad_no_axes", [5, 7], [1, -6], [4, 100], None, None, (3, 6)),
    Case("splittraining_axis1", "SplitTraining", MS_DOMAIN, {"input": _f(3, 6, 2), "split": _i(1, 3, 2)},
         ["y0", "y1", "y2"], {"axis": 1}, static=("split",)),
    Case("splittraining_axis_neg1", "SplitTraining", MS_DOMAIN, {"input": _f(2, 5), "split": _i(4, 1)},
         ["y0", "y1"], {"axis": -1}, static=("split",)),
    Case("concattraining_axis1", "ConcatTraining", MS_DOMAIN, {"x0": _f(2, 1, 3), "x1": _f(2, 4, 3), "x2": _f(2, 2, 3)},
         ["concat_result", "per_input_length"], {"axis": 1}),
    Case("concattraining_axis0_one_output", "ConcatTraining", MS_DOMAIN, {"x0": _f(2, 3), "x1": _f(1, 3)},
         ["concat_result"], {"axis": 0}),
    # the forward ops
    Case("gather_axis1_negative", "Gather", "", {"data": _f(3, 5), "indices": _i(-1, 0, 4, -5).reshape(2, 2)},
         ["output"], {"axis": 1}),
    Case("gatherelements_axis0", "GatherElements", "", {"data": _f(3, 2), "indices": _i(2, -1, 0, 1).reshape(2, 2)},
         ["output"], {"axis": 0}),
    Case("slice_backwards_clamped", "Slice", "",
         {"data": _f(4, 6), "starts": _i(100, -2), "ends": _i(I64_MIN, -100), "axes": _i(0, 1), "steps": _i(-1, -2)},
         ["output"], static=("starts", "ends", "axes", "steps")),
    Case("split_num_outputs_uneven", "Split", "", {"input": _f(2, 7)}, ["y0", "y1", "y2"],
         {"axis": 1, "num_outputs": 3}, opset=18),
    Case("split_sizes_input", "Split", "", {"input": _f(5, 2), "split": _i(2, 3)}, ["y0", "y1"], {"axis": 0},
         static=("split",), opset=13),
    Case("trilu_lower_k1", "Trilu", "", {"input": _f(2, 3, 4), "k": np.array(1, np.int64)}, ["output"],
         {"upper": 0}, static=("k",), opset=14),
    Case("squeeze_axes_input", "Squeeze", "", {"data": _f(3, 1, 2, 1), "axes": _i(-1, 1)}, ["squeezed"],
         static=("axes",), opset=13),
    Case("expand_both_ways", "Expand", "", {"input": _f(3, 1), "shape": _i(2, 1, 4)}, ["output"],
         static=("shape",), opset=13),
]
