"""Kernel fixtures of the layer and batch norms: ONNX LayerNormalization (opset 17, and ORT's older ai.onnx form
of opset 13), ORT's SimplifiedLayerNormalization, LayerNormalizationGrad and SimplifiedLayerNormalizationGrad, in
Float32 and, where ORT's CPU kernel runs it, Float64 (LayerNormalization; LayerNormalizationGrad with Float32
statistics).  Several shapes and axes; nodes with 1, 2 and 3 outputs.  The batch norms: ONNX BatchNormalization
(opset 15) in inference and training mode, ORT's BatchNormInternal and BatchNormalizationGrad (Float32: ORT's
only kernels of them) over [N, C] and [N, C, L] inputs.

InvertibleLayerNormalizationGrad's X_grad type ORT cannot infer from its inputs: its cases declare it
(``Case.output_types``).  ORT's older LayerNormalization (ai.onnx, opsets 1-16,
its contrib op) has no fixture: onnx's checker has no schema of it, so no checked model holds it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
from kernel_fixtures import MS_DOMAIN, Case

# ORT's ai.onnx-domain SimplifiedLayerNormalization is unknown to onnx's checker: gradir's registration of it
_spec = importlib.util.spec_from_file_location(
    "ort_schemas", Path(__file__).resolve().parents[2] / "gradir" / "interop" / "onnx" / "ort_schemas.py")
_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mod)
import onnx  # noqa: E402

_mod.register(onnx)

_rng = np.random.default_rng(3117)


def _stats(x: np.ndarray, axis: int, centered: bool = True) -> tuple[np.ndarray, np.ndarray]:
    axes = tuple(range(axis % x.ndim, x.ndim))
    xd = x.astype(np.float64)
    mean = xd.mean(axis=axes, keepdims=True) if centered else np.zeros_like(xd.mean(axis=axes, keepdims=True))
    inv = 1 / np.sqrt(((xd - mean) ** 2).mean(axis=axes, keepdims=True) + 1e-5)
    return mean.astype(np.float32), inv.astype(np.float32)


CASES: list[Case] = []
for k, (shape, axis, dt) in enumerate([((4, 8), -1, np.float32), ((2, 3, 16), -1, np.float32),
                                       ((2, 3, 4, 5), 2, np.float32), ((3, 7), 1, np.float64),
                                       ((2, 3, 6), -2, np.float64)]):
    x = (_rng.standard_normal(shape) * 2 + 0.5).astype(dt)
    norm = shape[axis % len(shape):]
    scale = _rng.uniform(0.5, 1.5, norm).astype(dt)
    bias = _rng.standard_normal(norm).astype(dt)
    tag = f"{k}_{np.dtype(dt).name}"
    CASES.append(Case(f"layernorm_{tag}", "LayerNormalization", "", {"X": x, "Scale": scale, "B": bias},
                      ["Y", "Mean", "InvStdDev"], {"axis": axis, "epsilon": 1e-5}))
    dy = _rng.standard_normal(shape).astype(dt)
    mean, inv = _stats(x, axis)
    CASES.append(Case(f"layernormgrad_{tag}", "LayerNormalizationGrad", MS_DOMAIN,
                      {"dY": dy, "X": x, "scale": scale, "mean": mean, "inv_std_dev": inv},
                      ["X_grad", "scale_grad", "bias_grad"], {"axis": axis}))
    if dt == np.float32:  # ORT's RMSNorm kernels: Float32 only
        CASES.append(Case(f"simplifiedlayernorm_{tag}", "SimplifiedLayerNormalization", "", {"X": x, "scale": scale},
                          ["Y", "inv_std_var"], {"axis": axis, "epsilon": 1e-5}))
        _, inv0 = _stats(x, axis, centered=False)
        CASES.append(Case(f"simplifiedlayernormgrad_{tag}", "SimplifiedLayerNormalizationGrad", MS_DOMAIN,
                          {"dY": dy, "X": x, "scale": scale, "inv_std_var": inv0}, ["X_grad", "scale_grad"],
                          {"axis": axis}))
        y = ((x.astype(np.float64) - mean) * inv * scale + bias).astype(dt)
        CASES.append(Case(f"invertiblelayernormgrad_{tag}", "InvertibleLayerNormalizationGrad", MS_DOMAIN,
                          {"dY": dy, "Y": y, "scale": scale, "bias": bias, "inv_std_var": inv},
                          ["X_grad", "scale_grad", "bias_grad"], {"axis": axis}, output_types={"X_grad": dt}))

_x = _rng.standard_normal((3, 10)).astype(np.float32)
_s, _b = _rng.uniform(0.5, 1.5, 10).astype(np.float32), _rng.standard_normal(10).astype(np.float32)
CASES += [
    # ONNX's optional outputs: 1 output, and 3 with Mean left out
    Case("layernorm_y_only", "LayerNormalization", "", {"X": _x, "Scale": _s, "B": _b}, ["Y"]),
    Case("layernorm_y_invstd", "LayerNormalization", "", {"X": _x, "Scale": _s, "B": _b}, ["Y", "", "InvStdDev"]),
    Case("layernorm_no_bias", "LayerNormalization", "", {"X": _x, "Scale": _s}, ["Y", "Mean"], {"epsilon": 1e-3}),
    Case("simplifiedlayernorm_y_only", "SimplifiedLayerNormalization", "", {"X": _x, "scale": _s}, ["Y"]),
]


def _bn_inputs(shape: tuple) -> dict:
    c = shape[1]
    return {"X": (_rng.standard_normal(shape) * 2 + 0.5).astype(np.float32),
            "scale": _rng.uniform(0.5, 1.5, c).astype(np.float32), "B": _rng.standard_normal(c).astype(np.float32),
            "input_mean": _rng.standard_normal(c).astype(np.float32),
            "input_var": _rng.uniform(0.5, 1.5, c).astype(np.float32)}


for k, shape in enumerate([(8, 5), (4, 3, 7), (2, 3, 4, 5)]):
    bn = _bn_inputs(shape)
    attrs = {"epsilon": 1e-3, "momentum": 0.8}
    CASES += [
        Case(f"batchnorm_inference_{k}", "BatchNormalization", "", bn, ["Y"], {"epsilon": 1e-3}, opset=15),
        Case(f"batchnorm_training_{k}", "BatchNormalization", "", bn, ["Y", "running_mean", "running_var"],
             {**attrs, "training_mode": 1}, opset=15),
        Case(f"batchnorminternal_{k}", "BatchNormInternal", MS_DOMAIN, bn,
             ["Y", "running_mean", "running_var", "saved_mean", "saved_inv_std"], attrs),
    ]
    x = bn["X"].astype(np.float64)
    axes = (0,) + tuple(range(2, x.ndim))
    saved_mean = x.mean(axis=axes).astype(np.float32)
    saved_inv_std = (1 / np.sqrt(x.var(axis=axes) + 1e-3)).astype(np.float32)
    CASES.append(Case(f"batchnormgrad_{k}", "BatchNormalizationGrad", MS_DOMAIN,
                      {"dY": _rng.standard_normal(shape).astype(np.float32), "X": bn["X"], "scale": bn["scale"],
                       "mean": saved_mean, "variance": saved_inv_std},
                      ["X_grad", "scale_grad", "bias_grad"], {"epsilon": 1e-3}))
# (ORT refuses a training-mode BatchNormalization with other than 3 outputs: no Y-only training case)
