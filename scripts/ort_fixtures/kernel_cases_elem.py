"""Kernel fixtures of the element-wise, logic, reduction and cross-entropy family (issue #31's elem slice):
ORT's four training cross-entropy ops (mean and sum, with and without weights) and the forward ops
whose numbers matter (Pow with non-integer exponents, Erf, Cast's truncation, Max/Min with ties,
ReduceMax by attribute and by input, Where, the comparisons, Not, And).

Reduction "none" is left out of the cross-entropy cases: ORT 1.19's CPU kernels write one number there
(SoftmaxCrossEntropyGrad reads an uninitialized scale), where ORT's own schema and gradir give one loss
per row (docs/ops.md says so on each op).

ORT registers SparseSoftmaxCrossEntropy(Grad) in the ai.onnx domain; the ``onnx`` package's checker
does not know them, so their schemas are registered here as gradir registers them
(gradir/interop/onnx/ort_schemas.py, loaded by path: the ORT venv has no gradir).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnx
from kernel_fixtures import MS_DOMAIN, Case

_spec = importlib.util.spec_from_file_location(
    "ort_schemas", Path(__file__).resolve().parents[2] / "gradir" / "interop" / "onnx" / "ort_schemas.py")
_schemas = importlib.util.module_from_spec(_spec)  # type: ignore[arg-type]
_spec.loader.exec_module(_schemas)  # type: ignore[union-attr]
_schemas.register(onnx)

_rng = np.random.default_rng(3131)
F = np.float32


def _f(*shape: int) -> np.ndarray:
    return _rng.standard_normal(shape).astype(F)


def _soft(*shape: int) -> np.ndarray:
    e = np.exp(_rng.standard_normal(shape))
    return (e / e.sum(axis=-1, keepdims=True)).astype(F)


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return (x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))).astype(F)


CASES: list[Case] = []

# -- SoftmaxCrossEntropy / SoftmaxCrossEntropyGrad (com.microsoft) ------------------------------------------
for red in ("mean", "sum"):
    for shape in ((4, 5), (2, 3, 6)):
        tag = f"{red}_{'x'.join(map(str, shape))}"
        CASES.append(Case(f"sce_{tag}", "SoftmaxCrossEntropy", MS_DOMAIN,
                          {"logits": _f(*shape) * 3, "label": _soft(*shape)}, ["loss", "log_prob"],
                          {"reduction": red}))
        CASES.append(Case(f"sce_grad_{tag}", "SoftmaxCrossEntropyGrad", MS_DOMAIN,
                          {"dY": np.array(_rng.standard_normal(), F), "log_prob": _log_softmax(_f(*shape) * 3),
                           "label": _soft(*shape)}, ["d_logits"], {"reduction": red}))

# -- SparseSoftmaxCrossEntropy / SparseSoftmaxCrossEntropyGrad (ai.onnx, ORT's opset-9 training schemas) ------
for red in ("mean", "sum"):
    for weighted in (False, True):
        for shape in ((6, 5), (2, 3, 4)):
            tag = f"{red}{'_w' if weighted else ''}_{'x'.join(map(str, shape))}"
            label = _rng.integers(0, shape[-1], shape[:-1]).astype(np.int64)
            weight = _rng.uniform(0.2, 2.0, shape[:-1]).astype(F) if weighted else None
            ins = {"logits": _f(*shape) * 2, "label": label}
            if weighted:
                ins["weight"] = weight
            CASES.append(Case(f"ssce_{tag}", "SparseSoftmaxCrossEntropy", "", ins, ["loss", "log_prob"],
                              {"reduction": red}))
            gins = {"dY": np.array(_rng.standard_normal(), F), "log_prob": _log_softmax(_f(*shape) * 2),
                    "label": label}
            if weighted:
                gins["weight"] = weight
            CASES.append(Case(f"ssce_grad_{tag}", "SparseSoftmaxCrossEntropyGrad", "", gins, ["d_logits"],
                              {"reduction": red}))

# -- forward ops whose numbers matter ----------------------------------------------------------------------------
_base = _rng.uniform(0.1, 3.0, (3, 4)).astype(F)
CASES += [
    Case("pow_scalar_2_5", "Pow", "", {"X": _base, "Y": np.array(2.5, F)}, ["Z"]),
    Case("pow_tensor_exponent", "Pow", "", {"X": _base, "Y": _rng.uniform(-2.5, 3.5, 4).astype(F)}, ["Z"]),
    Case("pow_negative_base_integer_exponent", "Pow", "", {"X": _f(3, 4), "Y": np.array(3.0, F)}, ["Z"]),
    Case("pow_int64_exponent", "Pow", "", {"X": _f(3, 4), "Y": np.array(2, np.int64)}, ["Z"]),
    Case("erf", "Erf", "", {"X": (_f(4, 5) * 2)}, ["Y"]),
    Case("cast_float_to_int32", "Cast", "",
         {"input": np.array([-2.7, -2.5, -0.5, -0.0, 0.49, 0.5, 1.5, 2.5, 3.99, -1e6], F)}, ["output"],
         {"to": onnx.TensorProto.INT32}),
    Case("cast_double_to_int64", "Cast", "",
         {"input": np.array([-3.9999, -1.5, 0.7, 2.5, 1e12 + 0.5], np.float64)}, ["output"],
         {"to": onnx.TensorProto.INT64}),
    Case("cast_float_to_bool", "Cast", "", {"input": np.array([0.0, -0.0, 1e-30, -2.0, np.inf], F)}, ["output"],
         {"to": onnx.TensorProto.BOOL}),
    Case("cast_int64_to_float", "Cast", "", {"input": np.array([2 ** 40 + 1, -7, 0, 16777217], np.int64)},
         ["output"], {"to": onnx.TensorProto.FLOAT}),
    Case("cast_double_to_float", "Cast", "", {"input": np.array([1 / 3, 1e-40, 3e38, -2.5], np.float64)}, ["output"],
         {"to": onnx.TensorProto.FLOAT}),
    Case("max_ties_broadcast", "Max", "", {"a": np.array([[1, 2, 3], [3, 2, 1]], F), "b": np.array([3, 2, 1], F),
                                           "c": np.array([[2], [3]], F)}, ["y"]),
    Case("min_ties_broadcast", "Min", "", {"a": np.array([[1, 2, 3], [3, 2, 1]], F), "b": np.array([3, 2, 1], F),
                                           "c": np.array([[2], [1]], F)}, ["y"]),
    Case("reducemax_axes_attr", "ReduceMax", "", {"data": _f(2, 3, 4)}, ["reduced"], {"axes": [1], "keepdims": 0}),
    Case("reducemax_axes_input", "ReduceMax", "", {"data": _f(2, 3, 4), "axes": np.array([0, 2], np.int64)},
         ["reduced"], {"keepdims": 1}, static=("axes",), opset=18),
    Case("reducemax_all", "ReduceMax", "", {"data": _f(2, 3, 4)}, ["reduced"], {"keepdims": 0}),
    Case("where_broadcast", "Where", "", {"condition": _rng.standard_normal((3, 1)) > 0, "X": _f(3, 4),
                                          "Y": _f(4)}, ["output"]),
    Case("equal_int64", "Equal", "", {"A": _rng.integers(0, 3, (3, 4)), "B": _rng.integers(0, 3, 4)}, ["C"]),
    Case("less_float", "Less", "", {"A": np.round(_f(3, 4)), "B": np.round(_f(4))}, ["C"]),
    Case("greater_int32", "Greater", "", {"A": _rng.integers(-2, 3, (3, 4)).astype(np.int32),
                                          "B": _rng.integers(-2, 3, (3, 1)).astype(np.int32)}, ["C"]),
    Case("not", "Not", "", {"X": _rng.standard_normal((3, 4)) > 0}, ["Y"]),
    Case("and_broadcast", "And", "", {"A": _rng.standard_normal((3, 4)) > 0, "B": _rng.standard_normal(4) > 0},
         ["C"]),
]
