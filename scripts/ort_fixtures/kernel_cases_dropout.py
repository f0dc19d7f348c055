"""Kernel fixtures of the dropout family: ORT's ``DropoutGrad`` (Float32 and Float64; ratios 0, 0.1, 0.5; the
ratio and training_mode inputs as initializers, one case without them: ratio 0.5 by default) and ONNX's
``Dropout`` with a ``seed`` in training mode, whose mask gradir draws bit for bit (``generator="ort"``:
the first run of ORT's session), of several ratios, shapes and seeds; and a Dropout in inference mode."""

from __future__ import annotations

import numpy as np
from kernel_fixtures import MS_DOMAIN, Case

_rng = np.random.default_rng(31)
_RATIO_T = ("ratio", "training_mode")


def _grad(name: str, dtype: type, ratio: float | None, shape: tuple = (3, 5, 4)) -> Case:
    dy = _rng.standard_normal(shape).astype(dtype)
    mask = _rng.random(shape) >= (ratio or 0.5)
    inputs = {"dY": dy, "mask": mask}
    if ratio is not None:
        inputs.update(ratio=np.array(ratio, np.float32), training_mode=np.array(True))
    return Case(name, "DropoutGrad", MS_DOMAIN, inputs, ["dX"], static=_RATIO_T)


def _dropout(name: str, shape: tuple, ratio: float, seed: int, dtype: type = np.float32,
             training: bool = True) -> Case:
    return Case(name, "Dropout", "", {"data": _rng.standard_normal(shape).astype(dtype),
                                      "ratio": np.array(ratio, np.float32), "training_mode": np.array(training)},
                ["output", "mask"], {"seed": seed}, static=_RATIO_T, opset=17)


CASES = [
    _grad("dropoutgrad_f32_r0", np.float32, 0.0),
    _grad("dropoutgrad_f32_r01", np.float32, 0.1),
    _grad("dropoutgrad_f32_r05", np.float32, 0.5),
    _grad("dropoutgrad_f64_r0", np.float64, 0.0),
    _grad("dropoutgrad_f64_r01", np.float64, 0.1),
    _grad("dropoutgrad_f64_r05", np.float64, 0.5),
    _grad("dropoutgrad_f32_default_ratio", np.float32, None),
    _dropout("dropout_f32_r01_seed42", (4, 16, 32), 0.1, 42),
    _dropout("dropout_f32_r05_seed0", (7, 9), 0.5, 0),
    _dropout("dropout_f32_r03_seed_negative", (1000,), 0.3, -5),
    _dropout("dropout_f32_r09_seed_large", (2, 3, 4, 5), 0.9, 2 ** 40 + 3),
    _dropout("dropout_f64_r025_seed7", (6, 10), 0.25, 7, np.float64),
    _dropout("dropout_f32_inference", (3, 4), 0.5, 1, training=False),
]
